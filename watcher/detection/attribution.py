"""Write attribution: who wrote, and which fields changed hands or value, from one version to the next.

The writer of a write is the managedFields entry whose time advanced, which appeared, or whose field set grew;
failing that, the one owner of every visible field the write changed (v1.20 stamps no new time when a writer
rewrites fields it already owns). Anything else is unattributed: counted, never guessed.
"""

from __future__ import annotations

import sys
from typing import Final

from watcher.detection import values
from watcher.detection.findings import OpenFinding, Rate
from watcher.detection.handovers import REMOVED, Handover, HandoverLog
from watcher.detection.ignore import ObjectRules
from watcher.detection.managed_fields import (
    Entry,
    FieldSetCache,
    PackedEntries,
    RawEntries,
    decode,
    keep_entry,
    pack_entries,
    stamp,
    unpack_entries,
)
from watcher.detection.values import BodyTable, LeafTable
from watcher.model import UNATTRIBUTED, JSONObject, ObjectRef, Writer, new_tuple

_NO_FIELDS: Final[frozenset[str]] = frozenset()
_UNTRACED: Final = "spec.replicas"  # written through the scale subresource without a managedFields entry (< 1.22)


class Values:
    """An object's value hashes at one moment: labels/annotations and body kept apart (see values.py)."""

    __slots__ = ("body", "meta")

    def __init__(self, meta: LeafTable, body: BodyTable) -> None:
        self.meta = meta
        self.body = body

    def get(self, path: str) -> int:
        """The value hash at `path`, or `REMOVED` when it has none."""
        return (self.meta if path.startswith("metadata.") else self.body).get(path, REMOVED)

    def has(self, path: str) -> bool:
        return self.meta.has(path) or self.body.has(path)


def controlled(meta: JSONObject) -> bool:
    """Whether an object has a controller (an ownerReference with `controller: true`), in this version."""
    return any(isinstance(o, dict) and o.get("controller") for o in meta.get("ownerReferences") or ())


def version_key(resource_version: str) -> int:
    """A resourceVersion as the state keeps it: only ever compared, to drop repeated versions, so a hash (half
    the memory of the text), cut to 62 bits: compiled, the state holds it unboxed (0 for no version)."""
    return hash(resource_version) >> 2


class ObjectState:
    """Everything the engine keeps per object between two of its versions; slotted, since there are many."""

    __slots__ = (
        "body_values",
        "controlled",
        "entries",
        "fight",
        "history",
        "hot",
        "last_write",
        "meta_values",
        "rates",
        "rules",
        "rv",
        "seq",
    )

    def __init__(self, rv: int, rules: ObjectRules) -> None:
        # The object's reference is in every event (see `Attribution.object_ref`), so it is not kept (findings
        # keep theirs); the engine keys states by a hash of the uid (see `Engine.process`).
        self.rv = rv  # (see `version_key`)
        self.rules = rules
        self.entries: PackedEntries = ()  # (see `pack_entries`)
        self.meta_values: LeafTable = values.NO_LEAVES
        self.body_values: BodyTable = values.NO_BODY  # (with the digest of the body it was made from)
        self.seq = 0  # writes seen
        self.history: HandoverLog | None = None  # bounded by `history` and the window
        self.rates: dict[Writer, Rate] | None = None
        self.fight: OpenFinding | None = None
        self.hot: OpenFinding | None = None
        self.controlled = False  # has a controller ownerReference (see `controlled`)
        self.last_write = 0.0


class Write:
    """What one write did, as the detectors need it. (A class, not a dataclass: compiled, a dataclass is made by
    its generated `__init__`, which is Python code, and one is made per write.)"""

    __slots__ = ("at", "changed", "handovers", "timed", "version", "writers")

    def __init__(self, at: float, writers: list[Writer], changed: list[str]) -> None:
        self.at = at
        self.writers = writers
        self.changed = changed
        self.handovers: list[Handover] = []
        self.timed = True  # the write's time is known (rates need it)
        self.version = ""  # the object's resourceVersion after the write (names a finding it opens)


class Attribution:
    """Turns consecutive versions of an object into `Write`s. Holds the shared cache of decoded field sets."""

    def __init__(self) -> None:
        self._fields = FieldSetCache()
        self._tables = values.TableCache()

    def baseline(
        self,
        obj: JSONObject,
        meta: JSONObject,
        raw: RawEntries,
        rules: ObjectRules,
    ) -> ObjectState:
        """The state of an object first seen (ADDED, or already there when the stream began): no write yet."""
        state = ObjectState(version_key(meta.get("resourceVersion") or ""), rules)
        self.resync(state, obj, meta, raw)
        return state

    @staticmethod
    def object_ref(obj: JSONObject, meta: JSONObject) -> ObjectRef:
        """The reference to the object an event carries (its type and namespace strings interned)."""
        namespace = meta.get("namespace")
        return ObjectRef(
            api_version=sys.intern(obj.get("apiVersion") or ""),
            kind=sys.intern(obj.get("kind") or ""),
            namespace=sys.intern(namespace) if namespace else None,
            name=meta["name"],
            uid=meta["uid"],
        )

    def resync(self, state: ObjectState, obj: JSONObject, meta: JSONObject, raw: RawEntries) -> None:
        """Take this version as the object's baseline without counting a write: ownership and values are read
        afresh; its handovers, rates and open findings stay (a relist after a watch lost events).
        """
        state.entries = pack_entries(keep_entry(w, stamp(t), decode(self._fields, f)) for w, (t, f) in raw.items())
        self._changed_values(state, obj, compare=False)
        state.controlled = controlled(meta)

    def attribute(self, state: ObjectState, obj: JSONObject, raw: RawEntries, newest: str, now: float) -> Write:
        """Find the writer(s) of this write and the fields that changed hands or value."""
        prev = unpack_entries(state.entries)
        entries, writers, gained = self._entries(prev, raw, newest)
        before = Values(state.meta_values, state.body_values)
        changed = self._changed_values(state, obj)
        if not writers and changed:
            writers = self._owner_of_changes(entries, changed, raw)
        state.seq += 1
        state.controlled = controlled(obj["metadata"])  # (as of this version: a controller may adopt or orphan)
        write = Write(now, writers or [UNATTRIBUTED], changed)
        after = Values(state.meta_values, state.body_values)
        taken = self._ownership_handovers(
            state, write, prev=prev, entries=entries, gained=gained, raw=raw, before=before, after=after
        )
        if not (state.controlled and len(writers) == 1):
            # (A single writer flipping values of an object another controller owns is an echo of that owner's
            # state, e.g. a ReplicaSet following its Deployment; a fight there is found on the owner.)
            self._value_handovers(
                write,
                state.seq,
                changed=changed,
                taken=taken,
                writers=writers,
                entries=entries,
                before=before,
                after=after,
            )
        state.entries = pack_entries(entries.values())
        return write

    @staticmethod
    def _value_handovers(
        write: Write,
        seq: int,
        *,
        changed: list[str],
        taken: set[str],
        writers: list[Writer],
        entries: dict[Writer, Entry],
        before: Values,
        after: Values,
    ) -> None:
        """Record each changed visible value (not already recorded as an ownership handover) as a handover."""
        sole = entries[writers[0]].fields if len(writers) == 1 else None
        for path in changed:
            if path in taken:
                continue
            if sole is not None:
                by = writers[0] if path in sole else UNATTRIBUTED
            else:
                by = next((w for w in writers if path in entries[w].fields), UNATTRIBUTED)
            # An unattributed change of a field someone owns names that owner as a party to the flip.
            owner = None if writers else next((w for w, e in entries.items() if path in e.fields), None)
            handover = (write.at, seq, path, by, owner, None, before.get(path), after.get(path))
            write.handovers.append(new_tuple(Handover, handover))

    def _entries(
        self, prev: dict[Writer, Entry], raw: RawEntries, newest: str
    ) -> tuple[dict[Writer, Entry], list[Writer], dict[Writer, frozenset[str]]]:
        """The new entries, the writers they show (time advanced, new, or field set grown) and what each gained.

        An entry not stamped in the newest second cannot have written now (a write stamps the current time), so
        its trie is not even decoded; it may have *lost* fields, which `_ownership_handovers` checks lazily.
        """
        entries: dict[Writer, Entry] = {}
        writers: list[Writer] = []
        gained: dict[Writer, frozenset[str]] = {}
        latest = stamp(newest)
        for raw_writer, (text, fields_v1) in raw.items():
            old = prev.get(raw_writer)
            time = stamp(text)
            if old is not None and old.time == time and time != latest:
                entries[old.writer] = old
                continue
            fields = decode(self._fields, fields_v1)
            if old is None:
                kept = keep_entry(raw_writer, time, fields)
                writer = kept.writer  # interned: handovers and rates keep it, not the decoded strings
                entries[writer] = kept
                writers.append(writer)
                gained[writer] = fields
                continue
            writer = old.writer
            entries[writer] = old if old.fields is fields and old.time == time else keep_entry(writer, time, fields)
            grew = fields - old.fields if fields is not old.fields else _NO_FIELDS
            if time > old.time or grew:
                writers.append(writer)
                if grew:
                    gained[writer] = grew
        return entries, writers, gained

    def _changed_values(self, state: ObjectState, obj: JSONObject, *, compare: bool = True) -> list[str]:
        """Visible leaves whose value changed (or appeared, or vanished); updates the object's value hashes.
        Without `compare` (a baseline) only the hashes are updated."""
        changed: list[str] = []
        meta = obj["metadata"]
        old = state.meta_values
        new = values.meta_table(meta, old)
        if new is not old:
            if compare:
                changed = values.changed_leaves(old, new)
            state.meta_values = new
        digest = values.body_digest(obj)
        if digest != state.body_values.digest:
            body = self._tables.body(digest, obj)
            if compare:
                changed += values.changed_leaves(state.body_values, body)
            state.body_values = body
        return changed

    def _ownership_handovers(
        self,
        state: ObjectState,
        write: Write,
        *,
        prev: dict[Writer, Entry],
        entries: dict[Writer, Entry],
        gained: dict[Writer, frozenset[str]],
        raw: RawEntries,
        before: Values,
        after: Values,
    ) -> set[str]:
        """Record leaves a writer gained that another manager owned before and no longer owns.

        The loser's entry may be gone altogether (it owned nothing else), or kept from the previous version
        without decoding (its time did not move): then what it owns now is decoded here, only when it matters.
        """
        taken: set[str] = set()
        for taker, paths in gained.items():
            for path in paths:
                for loser, owned in prev.items():
                    if loser is taker or path not in owned.fields or loser.manager == taker.manager:
                        continue
                    entry = entries.get(loser)
                    if entry is owned:
                        entry = self._refresh(entries, loser, raw)
                    if entry is not None and path in entry.fields:
                        continue
                    visible = before.has(path) or after.has(path)
                    write.handovers.append(
                        Handover(
                            write.at,
                            state.seq,
                            path,
                            taker,
                            before=loser,
                            after=taker,
                            was=before.get(path) if visible else None,
                            now=after.get(path) if visible else None,
                        )
                    )
                    taken.add(path)
        return taken

    def _owner_of_changes(self, entries: dict[Writer, Entry], changed: list[str], raw: RawEntries) -> list[Writer]:
        """Attribute a write no entry explains to the one writer that owns every visible field it changed.

        A manager that rewrites fields it already owns leaves managedFields as they were: its set does not
        change and (at least up to v1.20) neither does its time. Only the owner can have changed those fields,
        as any other recorded writer would have taken them, except through the scale subresource, which on
        servers before 1.22 writes `spec.replicas` without a trace: a change of it alone stays unattributed. Two
        owners (shared server-side-apply ownership) or none also leave the write unattributed.
        """
        if changed == [_UNTRACED]:
            return []
        owners = []
        for writer, entry in list(entries.items()):
            if entry.fields.issuperset(changed) and self._refresh(entries, writer, raw).fields.issuperset(changed):
                owners.append(writer)
        return owners if len(owners) == 1 else []

    def _refresh(self, entries: dict[Writer, Entry], writer: Writer, raw: RawEntries) -> Entry:
        """What `writer` owns now: an entry kept from the previous version may since have lost fields."""
        entry = entries[writer]
        fresh = decode(self._fields, raw[writer][1])
        if fresh is not entry.fields:
            entry = entries[writer] = Entry(entry.writer, entry.time, fresh)
        return entry
