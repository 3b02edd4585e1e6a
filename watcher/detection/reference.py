"""The reference implementation of write attribution (the protocol in `attribution.py`), in Python.

Per object it keeps (in `TrackedObject`, the engine's state extended) the managedFields entries by writer with
their decoded, shared field sets, tables of value hashes: labels/annotations and the body, and the fields a write
removed with who removed them (see `_removals`); and, for the few objects that had a write nothing else explains, a
table of their status (beside the states, by object key: most objects never need one). The native implementation
ports this module line for line.
"""

from __future__ import annotations

from typing import Final

from watcher.detection import events, values
from watcher.detection.attribution import Write
from watcher.detection.events import Event, ObjectEvent
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
from watcher.detection.state import ObjectState
from watcher.detection.values import BodyTable, LeafTable
from watcher.model import SERVER_MANAGERS, UNATTRIBUTED, JSONObject, Writer, new_tuple

_NO_FIELDS: Final[frozenset[str]] = frozenset()
_UNTRACED: Final = "spec.replicas"  # written through the scale subresource without a managedFields entry (< 1.22)
NO_GENERATION: Final = -1  # an object without a `metadata.generation` (or one that is not a number)
MAX_REMOVED: Final = 8  # fields an object remembers who removed (the oldest is forgotten first)
# Seconds an entry's stamp may lie before a write's time and still be this write's (the server's and the watcher's
# clocks, and a write at the end of a second seen in the next).
STAMP_SLACK: Final = 1
Removed = tuple[tuple[str, Writer], ...]  # (path, the writer whose write removed it), oldest first


class TrackedObject(ObjectState):
    """The engine's state of an object, with what the reference attribution keeps of it."""

    __slots__ = ("body_values", "controlled", "entries", "generation", "meta_values", "removed")

    def __init__(self, rv: int, rules: ObjectRules) -> None:
        super().__init__(rv, rules)
        self.entries: PackedEntries = ()  # (see `pack_entries`)
        self.removed: Removed = ()  # fields removed by a write, with its writer, until someone sets them again
        self.meta_values: LeafTable = values.NO_LEAVES
        self.body_values: BodyTable = values.NO_BODY  # (with the digest of the body it was made from)
        self.controlled = False  # has a controller ownerReference (see `controlled`)
        self.generation = NO_GENERATION  # `metadata.generation` (see `generation`)


class Values:
    """An object's value hashes at one moment: labels/annotations and body kept apart (see values.py)."""

    __slots__ = ("body", "meta")

    def __init__(self, meta: LeafTable, body: BodyTable) -> None:
        self.meta = meta
        self.body = body

    def get(self, path: str) -> int:
        """Return the value hash at `path`, or `REMOVED` when it has none."""
        return (self.meta if path.startswith("metadata.") else self.body).get(path, REMOVED)

    def has(self, path: str) -> bool:
        return self.meta.has(path) or self.body.has(path)


def generation(meta: JSONObject) -> int:
    """Return an object's `metadata.generation` (NO_GENERATION for none).

    The API server moves it with every write of the spec and never with a write of the status, which tells the two apart
    where the watch shows neither.
    """
    found = meta.get("generation")
    return found if type(found) is int and 0 <= found < 1 << 63 else NO_GENERATION


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
    """Turns consecutive versions of an object into `Write`s.

    Holds the shared caches of decoded field sets and value tables.
    """

    name = "python"

    def __init__(self) -> None:
        self._fields = FieldSetCache()
        self._tables = values.TableCache()
        self._statuses: dict[int, BodyTable] = {}  # object key -> status table (see `_status`)
        # The server stamps every write's writer (see `_note_server`): seen an entry with a subresource.
        self.stamped = False
        self.decode = events.decode
        self.object_key = events.object_key

    def baseline(self, event: ObjectEvent, rules: ObjectRules) -> ObjectState:
        state = TrackedObject(event.rv, rules)
        self.resync(state, event)
        return state

    def resync(self, state: ObjectState, event: ObjectEvent) -> None:
        tracked, read = _tracked(state), _event(event)
        raw = read.raw
        self._note_server(raw)
        tracked.entries = pack_entries(keep_entry(w, stamp(t), decode(self._fields, f)) for w, (t, f) in raw.items())
        self._changed_values(tracked, read.object, compare=False)
        if read.key in self._statuses:
            self._statuses[read.key] = self._tables.status(read.object)
        meta = read.object["metadata"]
        tracked.controlled = controlled(meta)
        tracked.generation = generation(meta)

    def _note_server(self, raw: RawEntries) -> None:
        """Note whether the server stamps every write's writer, from its entries.

        Servers from 1.22 on key entries by subresource too, and stamp the entry of every write's writer with the
        write's second (v1.20 stamps it only when the writer's set of fields changes): once an entry with a
        subresource is seen, a write nothing else explains is put to the one entry stamped in its second.
        """
        if not self.stamped:
            for writer in raw:
                if writer.subresource:
                    self.stamped = True
                    return

    def forget(self, key: int) -> None:
        self._statuses.pop(key, None)

    def new_log(self) -> HandoverLog:
        return HandoverLog.empty()

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
        self._note_server(raw)
        prev = unpack_entries(tracked.entries)
        entries, writers, gained = self._entries(prev, raw, read.newest)
        before = Values(tracked.meta_values, tracked.body_values)
        changed = self._changed_values(tracked, obj)
        after = Values(tracked.meta_values, tracked.body_values)
        losses = self._losses(prev, entries, raw, after)
        status = self._status(read, quiet=not changed, explained=bool(writers))
        if not writers and (changed or status):
            writers = self._owner_of_changes(entries, changed or status, raw)
        meta = obj["metadata"]
        now_generation = generation(meta)
        if not writers and self.stamped and not (losses and int(now) - stamp(read.newest) > STAMP_SLACK):
            # (A write that removed fields leaves its writer's entry as it was, if it did nothing else: the entry
            # stamped last, seconds before, was not stamped by this write.)
            known = NO_GENERATION not in (now_generation, tracked.generation)
            spec = now_generation != tracked.generation if known else None
            writers = self._stamped_in(entries, read.newest, changed or status, spec=spec)
        tracked.generation = now_generation
        tracked.controlled = controlled(meta)  # (as of this version: a controller may adopt or orphan)
        seq = tracked.seq
        write = Write(now, seq, writers or [UNATTRIBUTED], changed + status, [])
        values = (before, after)
        taken = self._ownership_handovers(write, prev=prev, entries=entries, gained=gained, raw=raw, values=values)
        self._removals(write, tracked, prev=prev, gained=gained, losses=losses, taken=taken, values=values)
        if not (tracked.controlled and len(writers) == 1):
            # (A single writer flipping values of an object another controller owns is an echo of that owner's
            # state, e.g. a ReplicaSet following its Deployment; a fight there is found on the owner.)
            self._value_handovers(
                write, tracked, changed=changed, taken=taken, writers=writers, entries=entries, values=values
            )
        tracked.entries = pack_entries(entries.values())
        return write

    @staticmethod
    def _value_handovers(
        write: Write,
        tracked: TrackedObject,
        *,
        changed: list[str],
        taken: set[str],
        writers: list[Writer],
        entries: dict[Writer, Entry],
        values: tuple[Values, Values],
    ) -> None:
        """Record each changed visible value as a handover.

        Not one already recorded as an ownership handover; and status values are not: they swing back and forth by
        nature. A value that appears where there was none is a handover only when a write removed it before (from its
        remover, `removed`): a field set for the first time is taken from nobody. A value removed is remembered with
        its remover.
        """
        before, after = values
        sole = entries[writers[0]].fields if len(writers) == 1 else None
        for path in changed:
            if path in taken:
                continue
            was, now = before.get(path), after.get(path)
            remover = None
            if was == REMOVED:
                remover = _pop_removed(tracked, path)
                if remover is None:
                    continue
            if sole is not None:
                # (a field nobody owns, such as one the API server derives, was changed by the one writer there is)
                mine = path in sole or not any(path in e.fields for e in entries.values())
                by = writers[0] if mine else UNATTRIBUTED
            else:
                by = next((w for w in writers if path in entries[w].fields), UNATTRIBUTED)
            # An unattributed change of a field someone owns names that owner as a party to the flip; a value set again
            # after a removal names its remover.
            owner = None if writers else next((w for w, e in entries.items() if path in e.fields), None)
            if remover is not None and remover != by:
                owner = remover
            handover = (write.at, write.seq, path, by, owner, None, was, now)
            write.handovers.append(new_tuple(Handover, handover))
            if now == REMOVED:
                _note_removed(tracked, path, by)

    def _entries(
        self, prev: dict[Writer, Entry], raw: RawEntries, newest: str
    ) -> tuple[dict[Writer, Entry], list[Writer], dict[Writer, frozenset[str]]]:
        """Return the new entries, the writers they show, and what each gained.

        The writers shown are those whose entry's time advanced, which are new, or whose field set grew.

        An entry not stamped in the newest second cannot have written now (a write stamps the current time), so
        its trie is not even decoded; it may have *lost* fields, which `_ownership_handovers` checks lazily. The API
        server's own managers (`SERVER_MANAGERS`) are never writers and gain nothing: what moves to them (the
        entries it merges, the fields an object had before its first apply) changes no hands.
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
            server = raw_writer.manager in SERVER_MANAGERS
            if old is None:
                kept = keep_entry(raw_writer, time, fields)
                writer = kept.writer  # interned: handovers and rates keep it, not the decoded strings
                entries[writer] = kept
                if not server:
                    writers.append(writer)
                    gained[writer] = fields
                continue
            writer = old.writer
            entries[writer] = old if old.fields is fields and old.time == time else keep_entry(writer, time, fields)
            grew = fields - old.fields if fields is not old.fields else _NO_FIELDS
            if (time > old.time or grew) and not server:
                writers.append(writer)
                if grew:
                    gained[writer] = grew
        return entries, writers, gained

    def _changed_values(self, state: TrackedObject, obj: JSONObject, *, compare: bool = True) -> list[str]:
        """Return the visible leaves whose value changed (or appeared, or vanished).

        Updates the object's value hashes. Without `compare` (a baseline) only the hashes are updated.
        """
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
        """Return the status leaves a write changed, when it changed nothing else visible (`quiet`).

        Else none. The status is kept only from the first quiet write that no managedFields entry explains (the writer
        of the next ones is then the one owner of the status values they change); until then an object's status costs
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
        values: tuple[Values, Values],
    ) -> set[str]:
        """Record leaves a writer gained that another manager owned before and no longer owns.

        Taker by taker (in the order of their entries), path by path (in the order of their names).

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
                    write.handovers.append(_handover(write, path, taker, (loser, taker), values))
                    taken.add(path)
        return taken

    def _losses(
        self, prev: dict[Writer, Entry], entries: dict[Writer, Entry], raw: RawEntries, after: Values
    ) -> list[tuple[Writer, str]]:
        """Return the fields this write removed from the object: (their owner before, path), in the owners' order.

        A field an entry lost that no entry owns now is gone from the object (one another writer took shows in its
        entry), unless its value is still there to see, or the version has no managedFields at all (a client reset
        them: ownership dropped, nothing removed). Checked on every write: an entry whose time did not move may still
        have lost fields (decoded here, from the decoder's cache), as the owner's entry of a field another client
        removed does.
        """
        if not raw:
            return []
        for writer, owned in prev.items():
            if entries.get(writer) is owned:
                self._refresh(entries, writer, raw)
        losses: list[tuple[Writer, str]] = []
        for loser, owned in prev.items():
            if loser.manager in SERVER_MANAGERS:
                continue
            entry = entries.get(loser)
            lost = owned.fields if entry is None else owned.fields - entry.fields
            losses.extend(
                (loser, path)
                for path in sorted(lost)
                if not after.has(path) and not any(path in e.fields for e in entries.values())
            )
        return losses

    @staticmethod
    def _removals(
        write: Write,
        tracked: TrackedObject,
        *,
        prev: dict[Writer, Entry],
        gained: dict[Writer, frozenset[str]],
        losses: list[tuple[Writer, str]],
        taken: set[str],
        values: tuple[Values, Values],
    ) -> None:
        """Record the fields a write removed from their owner, and those set again after such a removal.

        A write that removes a field another manager owns (a three-way merge patch that resets it, a JSON patch
        `remove`, a status rewritten whole) takes it from that owner as surely as one that sets another value: a
        handover from the owner to the write's writer (the unattributed writer when managedFields do not name it, as
        they do not for a write that only removes: its writer's entry is not stamped). The remover is remembered
        (`removed`), so that whoever sets the field again takes it back from the remover: a field set again after
        every removal is fought over.
        """
        for taker, paths in gained.items():  # set again after a removal: taken back from the remover
            for path in sorted(paths):
                if path in taken or any(path in e.fields for w, e in prev.items() if w != taker):
                    continue
                remover = _pop_removed(tracked, path)
                if remover is None or remover.manager == taker.manager:
                    continue
                write.handovers.append(_handover(write, path, taker, (remover, taker), values))
                taken.add(path)
        remover = write.writers[0] if len(write.writers) == 1 else UNATTRIBUTED
        for loser, path in losses:
            if path in taken or remover.manager == loser.manager:
                continue  # (a manager removing its own field hands nothing over)
            write.handovers.append(_handover(write, path, remover, (loser, remover), values))
            taken.add(path)
            _note_removed(tracked, path, remover)

    def _owner_of_changes(self, entries: dict[Writer, Entry], changed: list[str], raw: RawEntries) -> list[Writer]:
        """Attribute a write no entry explains to the one writer that owns every field it changed.

        A manager that rewrites fields it already owns leaves managedFields as they were: its set does not change
        and (at least up to v1.20) neither does its time. Only the owner can have changed those fields, as any other
        recorded writer would have taken them, except through the scale subresource, which on servers before 1.22
        writes `spec.replicas` without a trace: a change of it alone stays unattributed. Two owners (shared
        server-side-apply ownership) or none also leave the write unattributed.
        """
        if changed == [_UNTRACED] and not self.stamped:
            return []
        owners = []
        for writer, entry in list(entries.items()):
            if writer.manager in SERVER_MANAGERS:
                continue
            if entry.fields.issuperset(changed) and self._refresh(entries, writer, raw).fields.issuperset(changed):
                owners.append(writer)
        return owners if len(owners) == 1 else []

    @staticmethod
    def _stamped_in(
        entries: dict[Writer, Entry], newest: str, changed: list[str], *, spec: bool | None
    ) -> list[Writer]:
        """Attribute a write nothing else explains to the one entry stamped in the write's second.

        On a server that stamps every write's writer (`_note_server`), that is the newest second: a writer that wrote
        earlier in that second leaves its entry as it was. When several were stamped in that second, those that own a
        field the write changed (if any does); then, of those, the writer through the status subresource when the
        generation stayed (`spec` False), the others when it moved (True). None, or several: unattributed.
        """
        latest = stamp(newest)
        if not latest:
            return []
        found = [w for w, e in entries.items() if e.time == latest and w.manager not in SERVER_MANAGERS]
        if len(found) > 1 and changed:
            owning = [w for w in found if any(p in entries[w].fields for p in changed)]
            found = owning or found
        if len(found) > 1 and spec is not None:
            found = [w for w in found if (w.subresource == "status") != spec]
        return found if len(found) == 1 else []

    def _refresh(self, entries: dict[Writer, Entry], writer: Writer, raw: RawEntries) -> Entry:
        """Return what `writer` owns now.

        An entry kept from the previous version may since have lost fields.
        """
        entry = entries[writer]
        fresh = decode(self._fields, raw[writer][1])
        if fresh is not entry.fields:
            entry = entries[writer] = Entry(entry.writer, entry.time, fresh)
        return entry


def _handover(
    write: Write, path: str, by: Writer, parties: tuple[Writer, Writer], values: tuple[Values, Values]
) -> Handover:
    """Return an ownership handover of `path` in this write, with its values where they are visible.

    `parties`: who lost it, who took it.
    """
    was, now = values
    visible = was.has(path) or now.has(path)
    before, after = parties
    return Handover(
        write.at,
        write.seq,
        path,
        by,
        before=before,
        after=after,
        was=was.get(path) if visible else None,
        now=now.get(path) if visible else None,
    )


def _note_removed(tracked: TrackedObject, path: str, remover: Writer) -> None:
    """Remember who removed a field (the oldest remembered is forgotten beyond MAX_REMOVED)."""
    kept = tuple(item for item in tracked.removed if item[0] != path)
    tracked.removed = (*kept[-(MAX_REMOVED - 1) :], (path, remover))


def _pop_removed(tracked: TrackedObject, path: str) -> Writer | None:
    """Return who removed a field, and forget it (it is set again); None when no write removed it."""
    removed = tracked.removed
    for i, (removed_path, remover) in enumerate(removed):
        if removed_path == path:  # (by index, not identity: compiled, a tuple's items may be boxed anew)
            tracked.removed = removed[:i] + removed[i + 1 :]
            return remover
    return None
