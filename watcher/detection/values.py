"""The values a watch event lets us see, flattened to readable leaf paths with a hash of each value.

Metadata-only events (PartialObjectMetadata) show labels and annotations; full objects also show every other
top-level section (spec, data, webhooks, ...), the *body*, and `status`. Status values legitimately swing back
and forth (conditions, phases), so they are no evidence of a fight (status fights are seen through ownership):
they are read only to name the writer of a write that changes nothing else (see `reference.py`), and only for
objects that had such a write (most objects never do, and their status costs no memory).

Labels/annotations, the body and the status are digested separately, so a write that changes only one of them
flattens only that one. Only hashes are kept, never values: memory stays small and no Secret value is ever
held. Value hashes are 32-bit and stable (`hashing.py`): a change is missed only when old and new value share
their hash, with a probability of 2**-32 per change.
"""

from __future__ import annotations

# Not used here, but imported by a compiled module: mypyc makes the subclasses of `Words` (an `array`) look up
# `array.array` through a module reference it only declares for a compiled module that imports `array` itself.
import array  # noqa: F401
import zlib
from collections.abc import Iterable
from typing import Any, Final, Self

import orjson
from mypy_extensions import mypyc_attr

from watcher.detection import hashing, paths
from watcher.detection.words import Words
from watcher.model import JSONObject

_NOT_BODY: Final = frozenset({"apiVersion", "kind", "metadata", "status"})
_LIST_KEYS: Final = ("name", "type")
_LABELS: Final = paths.field("metadata", "labels")
_ANNOTATIONS: Final = paths.field("metadata", "annotations")

LeafHashes = dict[str, int]
_STATUS: Final = "status"


@mypyc_attr(native_class=False)  # a subclass of a built-in type: a plain Python class, also when compiled
class LeafTable(Words):
    """Leaf hashes as an object keeps them: 4 bytes a leaf in one array of 32-bit words.

    The paths are shared by every object of one shape (a subclass, not a wrapper: one object per table, not two).

    `positions` maps each path to its place in the array; objects with the same leaves share one `positions`.
    Made by `of` (mypyc compiles no `__new__` for a subclass of a built-in type).
    """

    __slots__ = ("positions",)
    positions: dict[str, int]

    @classmethod
    def of(cls, positions: dict[str, int], hashes: Iterable[int] = ()) -> Self:
        made = cls("I", hashes)
        made.positions = positions
        return made

    def get(self, path: str, default: int) -> int:
        position = self.positions.get(path)
        return default if position is None else self[position]

    def has(self, path: str) -> bool:
        return path in self.positions


@mypyc_attr(native_class=False)
class BodyTable(LeafTable):
    """The table of an object's body, with the digest it was made from (`body_digest`).

    The next version's digest tells whether the body changed at all.
    """

    __slots__ = ("digest",)
    digest: int

    @classmethod
    def of_body(cls, positions: dict[str, int], hashes: Iterable[int] = (), digest: int = 0) -> BodyTable:
        made = cls.of(positions, hashes)
        made.digest = digest
        return made


NO_LEAVES: Final = LeafTable.of({})  # shared by every object without labels and annotations: never mutated
NO_BODY: Final = BodyTable.of_body({})  # shared by every metadata-only object: never mutated
_SHAPES: Final[dict[tuple[str, ...], dict[str, int]]] = {}
_MAX_SHAPES: Final = 50_000


def body_table(leaves: LeafHashes, digest: int) -> BodyTable:
    """Pack a body's (cut) leaf hashes; the path index is shared with every earlier table of the same shape."""
    shape = tuple(leaves)
    index = _SHAPES.get(shape)
    if index is None:
        if len(_SHAPES) >= _MAX_SHAPES:
            _SHAPES.clear()  # live tables keep their own index
        index = _SHAPES[shape] = {path: position for position, path in enumerate(shape)}
    return BodyTable.of_body(index, leaves.values(), digest)


class TableCache:
    """Tables by the digest of what they were made from.

    Objects of one template, and values that flip back and forth, find their table made already, and share it (tables
    are never mutated).
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self._max = max_entries
        self._tables: dict[int, BodyTable] = {}

    def body(self, digest: int, obj: JSONObject) -> BodyTable:
        if not digest:
            return NO_BODY
        found = self._tables.get(digest)
        if found is None:
            if len(self._tables) >= self._max:
                self._tables.clear()
            found = self._tables[digest] = body_table(body_leaves(obj), digest)
        return found

    def status(self, obj: JSONObject) -> BodyTable:
        """Return the table of the object's status (`NO_BODY` without one).

        It comes with the digest it was made from.
        """
        status = obj.get(_STATUS)
        if status is None:
            return NO_BODY
        digest = hashing.digest(b"status\x00" + orjson.dumps(status)) or 1
        found = self._tables.get(digest)
        if found is None:
            if len(self._tables) >= self._max:
                self._tables.clear()
            leaves: LeafHashes = {}
            _flatten({_STATUS: status}, "", leaves)
            found = self._tables[digest] = body_table(leaves, digest)
        return found


_META_SHAPES: Final[dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, int]]] = {}
_NOTHING: Final[JSONObject] = {}


def meta_table(meta: JSONObject, old: LeafTable = NO_LEAVES) -> LeafTable:
    """Return labels and annotations as a table.

    The key tuples find the shared path index, and the value hashes are packed straight from the maps. `old` itself when
    nothing changed (most writes leave them as they were: no table is made).
    """
    labels = meta.get("labels") or _NOTHING
    annotations = meta.get("annotations") or _NOTHING
    if not labels and not annotations:
        return NO_LEAVES
    shape = (tuple(labels), tuple(annotations))
    positions = _META_SHAPES.get(shape)
    if positions is None:
        if len(_META_SHAPES) >= _MAX_SHAPES:
            _META_SHAPES.clear()  # live tables keep their own index
        paths_ = [paths.field(_LABELS, key) for key in shape[0]] + [paths.field(_ANNOTATIONS, key) for key in shape[1]]
        positions = _META_SHAPES[shape] = {path: position for position, path in enumerate(paths_)}
    if positions is old.positions and _same(old, labels, annotations):
        return old
    hashes = [_meta_hash(value) for value in labels.values()]
    if annotations:
        hashes += [_meta_hash(value) for value in annotations.values()]
    return LeafTable.of(positions, hashes)


def _same(old: LeafTable, labels: JSONObject, annotations: JSONObject) -> bool:
    """Whether the values hash as in `old` (of the same keys), compared one by one: no table made to compare."""
    i = 0
    for section in (labels, annotations):
        for value in section.values():
            if _meta_hash(value) != old[i]:
                return False
            i += 1
    return True


def _meta_hash(value: Any) -> int:
    if type(value) is str:
        return zlib.crc32(value.encode(), hashing.STRING)  # (`hashing.text_hash`, inline: it runs for every value)
    if type(value) is dict or type(value) is list:
        raise ValueError("metadata.labels and metadata.annotations must map strings to strings")
    return hashing.value_hash(value)


def changed_leaves(old: LeafTable, new: LeafTable) -> list[str]:
    """Leaves whose value changed, appeared or vanished."""
    if old.positions is new.positions:
        if old == new:
            return []
        return [path for path, a, b in zip(new.positions, old, new, strict=True) if a != b]
    if not old.positions:
        return list(new.positions)
    before = dict(zip(old.positions, old, strict=True))
    after = dict(zip(new.positions, new, strict=True))
    return changed_paths(before, after)


def body_digest(obj: JSONObject) -> int:
    """Return a 64-bit digest of the body sections (`hashing.digest`); 0 for metadata-only objects."""
    body = [(k, v) for k, v in obj.items() if k not in _NOT_BODY]
    return (hashing.digest(orjson.dumps(body)) or 1) if body else 0


def body_leaves(obj: JSONObject) -> LeafHashes:
    out: LeafHashes = {}
    body = {k: v for k, v in obj.items() if k not in _NOT_BODY}
    if body:
        _flatten(body, "", out)
    return out


def changed_paths(old: LeafHashes, new: LeafHashes) -> list[str]:
    """Leaves whose value changed, appeared or vanished."""
    changed = [p for p, h in new.items() if old.get(p) != h]
    changed.extend(p for p in old if p not in new)
    return changed


def _flatten(node: JSONObject, prefix: str, out: LeafHashes) -> None:
    memo = paths.children(prefix)
    for key, value in node.items():
        path = memo.get(key) or paths.field(prefix, key)
        kind = type(value)
        if kind is dict:
            if value:
                _flatten(value, path, out)
            else:
                out[path] = 0
        elif kind is list:
            _flatten_list(value, path, out)
        else:
            out[path] = hashing.value_hash(value)


def _flatten_list(items: list[Any], prefix: str, out: LeafHashes) -> None:
    list_key = _list_key(items)
    if list_key is None:
        out[prefix] = hashing.list_hash(items)
    else:
        for item in items:
            path = paths.keyed_item(prefix, {list_key: item[list_key]})
            _flatten(item, path, out)  # (never empty: it has its key)


def _list_key(items: list[Any]) -> str | None:
    """Return the merge key of a list of objects (`name`, `type`) when every item has a distinct one."""
    if not items or not all(type(i) is dict for i in items):
        return None
    for key in _LIST_KEYS:
        seen = {i.get(key) for i in items}
        if None not in seen and len(seen) == len(items) and all(isinstance(s, str) for s in seen):
            return key
    return None


def leaf_texts(obj: JSONObject, section: str) -> dict[str, str]:
    """Return the string values of the leaves of one top-level section of an object.

    The section is `spec`, `status`, ...; the leaves are named as the tables name them: for hints that look at what a
    write wrote (e.g. a timestamp). Not on the hot path.
    """
    out: dict[str, str] = {}
    value = obj.get(section)
    if value is not None:
        _texts({section: value}, "", out)
    return out


def _texts(node: JSONObject, prefix: str, out: dict[str, str]) -> None:
    for key, value in node.items():
        path = paths.field(prefix, key)
        if type(value) is dict:
            _texts(value, path, out)
        elif type(value) is list:
            list_key = _list_key(value)
            if list_key is not None:
                for item in value:
                    _texts(item, paths.keyed_item(path, {list_key: item[list_key]}), out)
        elif type(value) is str:
            out[path] = value
