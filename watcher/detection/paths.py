"""Readable field paths: the one place where a path inside an object is rendered as text.

Both ownership (decoded from managedFields `fieldsV1`) and values (read from the object itself) name their
leaves with these functions, so the same field always has the same name:

    spec.replicas
    metadata.labels.owner
    metadata.annotations[example.com/last-reconciled]
    spec.template.spec.containers[name=app].image
    webhooks[name=validate.example.com].clientConfig.caBundle
    metadata.finalizers[example.com/cleanup]          (set member)
    spec.args[0]                                        (list index)
"""

from __future__ import annotations

import re
import sys
from typing import Any, Final

_PLAIN_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_fields: Final[dict[str, dict[str, str]]] = {}
_MAX_CACHED: Final = 200_000


def children(parent: str) -> dict[str, str]:
    """Return the memo of `field(parent, name)` by name.

    For loops that look it up themselves before calling `field`.
    """
    found = _fields.get(parent)
    if found is None:
        if len(_fields) > _MAX_CACHED:
            _fields.clear()
        found = _fields[parent] = {}
    return found


def field(parent: str, name: str) -> str:
    """Render a struct field or map key: `.name` when it reads as an identifier, else `[name]`.

    Memoised: the same few thousand paths are rendered for every object of a kind, millions of times.
    """
    memo = children(parent)
    found = memo.get(name)
    if found is None:
        if _PLAIN_NAME.match(name):
            found = sys.intern(f"{parent}.{name}" if parent else name)
        else:
            found = sys.intern(f"{parent}[{name}]")
        if len(memo) < _MAX_CACHED:
            memo[name] = found
    return found


def keyed_item(parent: str, keys: dict[str, Any]) -> str:
    """Render a list item identified by its merge keys, e.g. `containers[name=app]`."""
    rendered = ",".join(f"{k}={_scalar(v)}" for k, v in keys.items())
    memo = children(parent)
    memo_key = "\x00" + rendered  # cannot collide with a field name
    found = memo.get(memo_key)
    if found is None:
        found = sys.intern(f"{parent}[{rendered}]")
        if len(memo) < _MAX_CACHED:
            memo[memo_key] = found
    return found


def set_member(parent: str, value: Any) -> str:
    """Render a member of a set-like list (e.g. finalizers)."""
    return sys.intern(f"{parent}[{_scalar(value)}]")


def index(parent: str, position: int | str) -> str:
    return sys.intern(f"{parent}[{position}]")
