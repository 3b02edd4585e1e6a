"""Decode `metadata.managedFields` into who-owns-which-leaf, the raw material of write attribution.

A managedFields entry is keyed by (manager, operation, subresource); older servers (< 1.22) have no
`subresource`, and entries of one manager that differ only by apiVersion are merged here, as they describe the
same writer. `fieldsV1` is a trie whose keys are `f:<field>`, `k:<json merge keys>`, `v:<json value>`,
`i:<index>` and `.` (the node itself). Only leaves are kept: a node whose only child is `.`, or none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import orjson

from watcher.detection import hashing, paths
from watcher.model import JSONObject, Writer, new_tuple, parse_time


class FieldsV1Error(ValueError):
    """fieldsV1 that is not the trie the API server writes."""


def leaf_paths(fields_v1: JSONObject) -> frozenset[str]:
    """Return the readable leaf paths owned according to a `fieldsV1` trie."""
    out: list[str] = []
    _walk(fields_v1, "", out)
    return frozenset(out)


# Subtrees kept as one leaf: their keys hold per-object identities (owner uids), which would make every trie
# unique, and nobody fights over their parts.
_OPAQUE: Final = frozenset({"metadata.ownerReferences"})


def _walk(node: JSONObject, prefix: str, out: list[str]) -> None:
    if prefix in _OPAQUE:
        out.append(prefix)
        return
    memo = _children.get(prefix)
    if memo is None:
        if len(_children) > _MAX_MEMO:
            _children.clear()
        memo = _children[prefix] = {}
    leaf = True
    for key, child in node.items():
        if key == ".":
            continue
        leaf = False
        if type(child) is not dict:
            raise FieldsV1Error(f"unexpected fieldsV1 value under {key!r} at {prefix or 'the root'}")
        path = memo.get(key)
        if path is None:
            path = _child_path(prefix, key)
            if len(memo) < _MAX_MEMO:
                memo[key] = path
        _walk(child, path, out)
    if leaf and prefix:
        out.append(prefix)


# prefix -> raw trie key -> readable path: tries of one shape repeat the same keys object after object.
_children: Final[dict[str, dict[str, str]]] = {}
_MAX_MEMO: Final = 100_000


def _child_path(prefix: str, key: str) -> str:
    if len(key) < 2 or key[1] != ":":
        raise FieldsV1Error(f"unexpected fieldsV1 key {key!r} under {prefix or 'the root'}")
    tag, text = key[0], key[2:]
    if tag == "f":
        return paths.field(prefix, text)
    if tag == "k":
        keys = _json(text, key, prefix)
        if not isinstance(keys, dict):
            raise FieldsV1Error(f"fieldsV1 key {key!r} under {prefix or 'the root'} is not a JSON object")
        return paths.keyed_item(prefix, keys)
    if tag == "v":
        return paths.set_member(prefix, _json(text, key, prefix))
    if tag == "i":
        return paths.index(prefix, text)
    raise FieldsV1Error(f"unexpected fieldsV1 key {key!r} under {prefix or 'the root'}")


def _json(text: str, key: str, prefix: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise FieldsV1Error(f"fieldsV1 key {key!r} under {prefix or 'the root'} holds invalid JSON") from exc


class Entry:
    """One writer's managedFields entry, normalised: `time` in whole seconds (see `stamp`).

    (A class, not a NamedTuple: compiled, it is made without running Python code; one is made per entry and write.)
    """

    __slots__ = ("fields", "time", "writer")

    def __init__(self, writer: Writer, time: int, fields: frozenset[str]) -> None:
        self.writer = writer
        self.time = time
        self.fields = fields

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entry):
            return NotImplemented
        return (self.writer, self.time, self.fields) == (other.writer, other.time, other.fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Entry({self.writer!r}, {self.time}, {sorted(self.fields)!r})"


_stamps: Final[dict[str, int]] = {}


def stamp(text: str) -> int:
    """Return a managedFields time as entries keep it: whole seconds since the epoch, 0 for none.

    The API server writes these times to the second. Cached: a stream has many events a second, and the entries stamped
    in one second share one int while it is cached (an int, not the time's text: a third of the memory, and no
    interning).
    """
    found = _stamps.get(text)
    if found is None:
        if len(_stamps) >= 1024:
            _stamps.clear()
        found = _stamps[text] = int(parse_time(text)) if text else 0
    return found


class FieldSetCache:
    """Decode each distinct `fieldsV1` once, and share the resulting sets between objects.

    Objects of one shape owned by one controller carry identical tries, so the cache saves both the decoding
    time and the memory of a set per object. It is bounded: when full it starts again (cheap, and the working
    set refills in one pass over the hot objects).
    """

    def __init__(self, max_entries: int = 20_000) -> None:
        self._max = max_entries
        self._sets: dict[int, frozenset[str]] = {}
        self._interned: dict[frozenset[str], frozenset[str]] = {}

    def get(self, fields_v1: JSONObject) -> frozenset[str]:
        # Keyed by a 64-bit hash of the serialised trie, not the bytes: orjson's output keeps a buffer of
        # several KiB per object, and the hash is all a lookup needs.
        key = hashing.digest(orjson.dumps(fields_v1))
        found = self._sets.get(key)
        if found is None:
            decoded = leaf_paths(fields_v1)
            found = self._interned.setdefault(decoded, decoded)
            if len(self._sets) >= self._max:
                self._sets.clear()
                self._interned.clear()
            self._sets[key] = found
        return found


_writers: Final[dict[Writer, Writer]] = {}


RawEntries = dict[Writer, tuple[str, Any]]  # writer -> (time, fieldsV1 or [fieldsV1, ...]), not yet decoded


def raw_entries(managed_fields: Iterable[Any]) -> RawEntries:
    """Group raw entries by writer: writer -> (newest time, fieldsV1 or [fieldsV1, ...]) without decoding.

    The writers are not interned here (that happens once an entry is kept, see `keep_entry`): most are only
    compared with what the object had before.
    """
    grouped: RawEntries = {}
    for raw in managed_fields:
        if type(raw) is not dict:
            raise FieldsV1Error("a managedFields entry is not an object")
        writer = new_tuple(Writer, (raw.get("manager") or "", raw.get("operation") or "", raw.get("subresource") or ""))
        fields = raw.get("fieldsV1") or {}
        if type(fields) is not dict:
            raise FieldsV1Error(f"fieldsV1 of manager {writer.manager!r} is not an object")
        seen = grouped.get(writer)
        if seen is None:
            grouped[writer] = (raw.get("time") or "", fields)
        else:  # the same writer under two apiVersions
            merged = seen[1] if isinstance(seen[1], list) else [seen[1]]
            grouped[writer] = (max(seen[0], raw.get("time") or ""), [*merged, fields])
    return grouped


def newest_time(raw: RawEntries) -> str:
    """Return the newest time of the entries ("" for none).

    The time of the write, as far as managedFields tell.
    """
    newest = ""
    for time, _ in raw.values():  # (a loop, not max() over a generator: this runs for every event)
        newest = max(newest, time)
    return newest


def keep_entry(writer: Writer, time: int, fields: frozenset[str]) -> Entry:
    """Make an Entry to keep: its writer is interned, as millions of objects share a few."""
    return Entry(_writers.setdefault(writer, writer), time, fields)


PackedEntries = tuple[Any, ...]  # writer, time, fields, writer, time, fields, ...


def pack_entries(entries: Iterable[Entry]) -> PackedEntries:
    """Entries as an object keeps them between writes: one flat tuple, not a tuple of tuples (half the memory)."""
    packed: list[Any] = []
    for entry in entries:
        packed += (entry.writer, entry.time, entry.fields)
    return tuple(packed)


def unpack_entries(packed: PackedEntries) -> dict[Writer, Entry]:
    """Return the entries of `pack_entries` by writer."""
    entries: dict[Writer, Entry] = {}
    for i in range(0, len(packed), 3):
        writer = packed[i]
        entries[writer] = Entry(writer, packed[i + 1], packed[i + 2])
    return entries


def decode(cache: FieldSetCache, fields: Any) -> frozenset[str]:
    """Decode the fieldsV1 of one writer (one trie, or several merged across apiVersions)."""
    if isinstance(fields, list):
        return frozenset().union(*(cache.get(f) for f in fields))
    return cache.get(fields)
