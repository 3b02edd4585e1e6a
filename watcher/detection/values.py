"""The values a watch event lets us see, flattened to readable leaf paths with a hash of each value.

Metadata-only events (PartialObjectMetadata) show labels and annotations; full objects also show every other
top-level section (spec, data, webhooks, ...). `status` is left out: status values legitimately swing back and
forth (conditions, phases), so they are no evidence of a fight; status fights are seen through ownership.

Only hashes are kept, never values: memory stays small and no Secret value is ever held.
"""

from __future__ import annotations

from typing import Any

import orjson

from watcher.detection import paths
from watcher.model import JSONObject

_NOT_VALUES = frozenset({"apiVersion", "kind", "metadata", "status"})
_LIST_KEYS = ("name", "type")

LeafHashes = dict[str, int]


def visible_digest(obj: JSONObject) -> int:
    """A hash of everything `leaf_hashes` would look at: equal digests mean no visible value changed."""
    meta = obj.get("metadata") or {}
    parts = [meta.get("labels"), meta.get("annotations")]
    parts.extend(v for k, v in obj.items() if k not in _NOT_VALUES)
    return hash(orjson.dumps(parts))


def leaf_hashes(obj: JSONObject) -> LeafHashes:
    """Map each visible leaf path to a hash of its value."""
    out: LeafHashes = {}
    meta = obj.get("metadata") or {}
    for section in ("labels", "annotations"):
        found = meta.get(section)
        if isinstance(found, dict):
            prefix = paths.field("metadata", section)
            for key, value in found.items():
                out[paths.field(prefix, key)] = hash(value)
    for key, value in obj.items():
        if key not in _NOT_VALUES:
            _flatten(value, paths.field("", key), out)
    return out


def _flatten(value: Any, prefix: str, out: LeafHashes) -> None:
    if isinstance(value, dict):
        if not value:
            out[prefix] = 0
        for key, child in value.items():
            _flatten(child, paths.field(prefix, key), out)
    elif isinstance(value, list):
        list_key = _list_key(value)
        if list_key is None:
            out[prefix] = hash(orjson.dumps(value))
        else:
            for item in value:
                _flatten(item, paths.keyed_item(prefix, {list_key: item[list_key]}), out)
    else:
        out[prefix] = hash(value) if not isinstance(value, float) else hash(repr(value))


def _list_key(items: list[Any]) -> str | None:
    """The merge key of a list of objects (`name`, `type`) when every item has a distinct one."""
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in _LIST_KEYS:
        seen = {i.get(key) for i in items}
        if None not in seen and len(seen) == len(items) and all(isinstance(s, str) for s in seen):
            return key
    return None


def value_text(obj: JSONObject, path_prefix_free: str) -> str | None:
    """The text of a label or annotation value, for hints that look at what is written (e.g. timestamps)."""
    meta = obj.get("metadata") or {}
    for section, prefix in (("annotations", "metadata.annotations"), ("labels", "metadata.labels")):
        if path_prefix_free.startswith(prefix):
            key = path_prefix_free[len(prefix) :]
            key = key[1:-1] if key.startswith("[") else key.lstrip(".")
            found = (meta.get(section) or {}).get(key)
            return found if isinstance(found, str) else None
    return None
