"""The reference implementation of write attribution (the protocol in `attribution.py`), in Python.

Per object it keeps (in `TrackedObject`, the engine's state extended) the managedFields entries by writer with
their decoded, shared field sets, and tables of value hashes: labels/annotations and the body; and, for the few
objects that had a write nothing else explains, a table of their status (beside the states, by object key: most
objects never need one). The native implementation ports this module line for line.
"""

from __future__ import annotations

from typing import Final

from watcher.detection import events, values
from watcher.detection.attribution import Write
from watcher.detection.events import Event, ObjectEvent
from watcher.detection.handovers import REMOVED, Handover
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
from watcher.detection.state import ObjectState
from watcher.detection.values import BodyTable, LeafTable
from watcher.model import UNATTRIBUTED, JSONObject, Writer, new_tuple

_NO_FIELDS: Final[frozenset[str]] = frozenset()
_UNTRACED: Final = "spec.replicas"  # written through the scale subresource without a managedFields entry (< 1.22)


class TrackedObject(ObjectState):
    """The engine's state of an object, with what the reference attribution keeps of it."""

    __slots__ = ("body_values", "controlled", "entries", "meta_values")

    def __init__(self, rv: int, rules: ObjectRules) -> None:
        super().__init__(rv, rules)
        self.entries: PackedEntries = ()  # (see `pack_entries`)
        self.meta_values: LeafTable = values.NO_LEAVES
        self.body_values: BodyTable = values.NO_BODY  # (with the digest of the body it was made from)
        self.controlled = False  # has a controller ownerReference (see `controlled`)


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


def _tracked(state: ObjectState) -> TrackedObject:
    if not isinstance(state, TrackedObject):
        raise TypeError("this state was not made by the reference attribution")
    return state


def _event(event: ObjectEvent) -> Event:
    if not isinstance(event, Event):
        raise TypeError("this event was not decoded by the reference decoder")
    return event


class PythonAttribution:
    """Turns consecutive versions of an object into `Write`s. Holds the shared caches of decoded field sets and
    value tables."""

    name = "python"

    def __init__(self) -> None:
        self._fields = FieldSetCache()
        self._tables = values.TableCache()
        self._statuses: dict[int, BodyTable] = {}  # object key -> status table (see `_status`)
        self.decode = events.decode
        self.object_key = events.object_key

    def baseline(self, event: ObjectEvent, rules: ObjectRules) -> ObjectState:
        state = TrackedObject(event.rv, rules)
        self.resync(state, event)
        return state

    def resync(self, state: ObjectState, event: ObjectEvent) -> None:
        tracked, read = _tracked(state), _event(event)
        raw = read.raw
        tracked.entries = pack_entries(keep_entry(w, stamp(t), decode(self._fields, f)) for w, (t, f) in raw.items())
        self._changed_values(tracked, read.object, compare=False)
        if read.key in self._statuses:
            self._statuses[read.key] = self._tables.status(read.object)
        tracked.controlled = controlled(read.object["metadata"])

    def forget(self, key: int) -> None:
        self._statuses.pop(key, None)

    def owned(
        self,
        state: ObjectState,
        event: ObjectEvent,  # noqa: ARG002 - the protocol's signature (the state has all this implementation needs)
        writer: Writer,
    ) -> frozenset[str] | None:
        entry = unpack_entries(_tracked(state).entries).get(writer)
        return entry.fields if entry is not None else None

    def attribute(self, state: ObjectState, event: ObjectEvent, now: float) -> Write:
        tracked, read = _tracked(state), _event(event)
        obj, raw = read.object, read.raw
        prev = unpack_entries(tracked.entries)
        entries, writers, gained = self._entries(prev, raw, read.newest)
        before = Values(tracked.meta_values, tracked.body_values)
        changed = self._changed_values(tracked, obj)
        status = self._status(read, quiet=not changed, explained=bool(writers))
        if not writers and (changed or status):
            writers = self._owner_of_changes(entries, changed or status, raw)
        tracked.controlled = controlled(obj["metadata"])  # (as of this version: a controller may adopt or orphan)
        seq = tracked.seq
        write = Write(now, seq, writers or [UNATTRIBUTED], changed + status, [])
        after = Values(tracked.meta_values, tracked.body_values)
        taken = self._ownership_handovers(
            write, prev=prev, entries=entries, gained=gained, raw=raw, before=before, after=after
        )
        if not (tracked.controlled and len(writers) == 1):
            # (A single writer flipping values of an object another controller owns is an echo of that owner's
            # state, e.g. a ReplicaSet following its Deployment; a fight there is found on the owner.)
            self._value_handovers(
                write, changed=changed, taken=taken, writers=writers, entries=entries, before=before, after=after
            )
        tracked.entries = pack_entries(entries.values())
        return write

    @staticmethod
    def _value_handovers(
        write: Write,
        *,
        changed: list[str],
        taken: set[str],
        writers: list[Writer],
        entries: dict[Writer, Entry],
        before: Values,
        after: Values,
    ) -> None:
        """Record each changed visible value (not already recorded as an ownership handover) as a handover.
        (Status values are not: they swing back and forth by nature.)"""
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
            handover = (write.at, write.seq, path, by, owner, None, before.get(path), after.get(path))
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

    def _changed_values(self, state: TrackedObject, obj: JSONObject, *, compare: bool = True) -> list[str]:
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

    def _status(self, event: Event, *, quiet: bool, explained: bool) -> list[str]:
        """The status leaves a write changed, when it changed nothing else visible (`quiet`); else none.

        The status is kept only from the first quiet write that no managedFields entry explains (the writer of the
        next ones is then the one owner of the status values they change); until then an object's status costs
        nothing. Metadata-only objects have none.
        """
        obj = event.object
        old = self._statuses.get(event.key)
        if old is None:
            if quiet and not explained and obj.get("status") is not None:
                self._statuses[event.key] = self._tables.status(obj)
            return []
        new = self._tables.status(obj)
        if new is old or new.digest == old.digest:
            return []
        self._statuses[event.key] = new
        return values.changed_leaves(old, new) if quiet else []

    def _ownership_handovers(
        self,
        write: Write,
        *,
        prev: dict[Writer, Entry],
        entries: dict[Writer, Entry],
        gained: dict[Writer, frozenset[str]],
        raw: RawEntries,
        before: Values,
        after: Values,
    ) -> set[str]:
        """Record leaves a writer gained that another manager owned before and no longer owns, taker by taker (in
        the order of their entries), path by path (in the order of their names).

        The loser's entry may be gone altogether (it owned nothing else), or kept from the previous version
        without decoding (its time did not move): then what it owns now is decoded here, only when it matters.
        """
        taken: set[str] = set()
        for taker, paths in gained.items():
            for path in sorted(paths):  # (a set's order is the process's own: see hashing.py)
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
                            write.seq,
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
        """Attribute a write no entry explains to the one writer that owns every field it changed.

        A manager that rewrites fields it already owns leaves managedFields as they were: its set does not change
        and (at least up to v1.20) neither does its time. Only the owner can have changed those fields, as any other
        recorded writer would have taken them, except through the scale subresource, which on servers before 1.22
        writes `spec.replicas` without a trace: a change of it alone stays unattributed. Two owners (shared
        server-side-apply ownership) or none also leave the write unattributed.
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
