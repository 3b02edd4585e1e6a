"""The detection engine: watch events in, finding changes out. Pure and deterministic; time is an argument.

For every write (a MODIFIED event) the engine
1. attributes it to the managedFields entries that explain it (`_attribute`),
2. records *handovers*: a leaf field owned by writer A before and by B != A (and no longer A) after, or a
   visible value changed by the write (`_handovers`),
3. calls a fight when one field changed hands >= `min_handovers` times within the window and came *back* to an
   earlier owner or value at least `min_handovers - 1` times (A->B->A->B): so a single correction (A->B->A) or an
   ownership migration (A->B->C) is not a fight,
4. feeds a per-writer exponentially decaying write rate and calls a hot loop when it stays high.

State per object is small and bounded: the last ownership per writer (shared, interned field sets), a hash per
visible value, a ring of recent handovers and a rate per writer.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from watcher.config import DetectionSettings, IgnoreRule
from watcher.detection import hints, values
from watcher.detection.managed_fields import Entry, FieldSetCache, decode, raw_entries
from watcher.detection.values import LeafHashes, value_text
from watcher.model import (
    UNATTRIBUTED,
    ChangeKind,
    EventType,
    Finding,
    FindingChange,
    FindingState,
    FindingType,
    JSONObject,
    ObjectRef,
    WatchEvent,
    Writer,
    WriterCount,
    parse_time,
)

_REMOVED = -1  # value hash of a leaf that disappeared
_UNTRACED = "spec.replicas"  # written through the scale subresource without a managedFields entry (< 1.22)


class EventError(ValueError):
    """An event whose object lacks what every Kubernetes object has."""


@dataclass(slots=True)
class Stats:
    events: int = 0
    writes: int = 0
    unattributed_writes: int = 0
    ignored_events: int = 0
    duplicate_events: int = 0
    deleted_objects: int = 0
    without_managed_fields: int = 0  # e.g. `kubectl get` without --show-managed-fields
    untimed_events: int = 0  # neither observedAt nor a managedFields time: no rate can be measured


class _Handover(NamedTuple):
    """One field changing hands in one write.

    Ownership evidence names the owners before and after (managedFields); value evidence the value hashes before
    and after (labels, annotations, fields of full objects). A write may show either or both.
    """

    at: float
    seq: int  # the object's write counter at this write
    path: str
    by: Writer  # who made the write
    before: Writer | None = None  # owner that lost the field
    after: Writer | None = None  # owner that took it
    was: int | None = None  # value hash before
    now: int | None = None  # value hash after


class _Values(NamedTuple):
    """An object's value hashes at one moment: labels/annotations and body kept apart (see values.py)."""

    meta: LeafHashes
    body: LeafHashes

    def get(self, path: str) -> int:
        """The value hash at `path`, or `_REMOVED` when it has none."""
        found = self.meta.get(path)
        if found is None:
            found = self.body.get(path, _REMOVED)
        return found

    def has(self, path: str) -> bool:
        return path in self.meta or path in self.body


class _Rate:
    __slots__ = ("last", "rate", "start", "start_seq", "streak")

    def __init__(self) -> None:
        self.rate = 0.0  # writes per minute, exponentially decaying
        self.last = -math.inf
        self.streak = 0  # writes without a gap longer than two time constants
        self.start = 0.0
        self.start_seq = 0


class _Open:
    """A finding while it is tracked (active), mutable; `snapshot` makes the immutable `Finding`."""

    __slots__ = (
        "by_ownership",
        "detected_at",
        "fields",
        "first_seen",
        "first_seq",
        "handovers",
        "id",
        "last_seen",
        "status_writes",
        "timestamp_values",
        "type",
        "writer_writes",
    )

    def __init__(self, kind: FindingType, ref: ObjectRef, *, first_seen: float, at: float, seq: int) -> None:
        self.type = kind
        self.id = hashlib.blake2b(f"{kind}/{ref.uid}/{at}".encode(), digest_size=8).hexdigest()
        self.first_seen = first_seen
        self.detected_at = at
        self.last_seen = at
        self.first_seq = seq
        self.handovers = 0
        self.fields: set[str] = set()
        self.writer_writes: dict[Writer, int] = {}
        self.by_ownership = False
        self.timestamp_values = False
        self.status_writes = False


class _Tracked:
    __slots__ = (
        "body_digest",
        "body_values",
        "controlled",
        "entries",
        "fight",
        "history",
        "hot",
        "meta_digest",
        "meta_values",
        "rates",
        "ref",
        "rules",
        "rv",
        "seq",
    )

    def __init__(self, ref: ObjectRef, rv: str, rules: tuple[IgnoreRule, ...]) -> None:
        self.ref = ref
        self.rv = rv
        self.rules = rules
        self.entries: dict[Writer, Entry] = {}
        self.meta_digest = 0
        self.meta_values: LeafHashes = values.NO_LEAVES
        self.body_digest = 0
        self.body_values: LeafHashes = values.NO_LEAVES
        self.seq = 0  # writes seen
        self.history: list[_Handover] | None = None  # a ring: bounded by `history` and the window
        self.rates: dict[Writer, _Rate] | None = None
        self.fight: _Open | None = None
        self.hot: _Open | None = None
        self.controlled = False  # has a controller ownerReference


@dataclass(slots=True)
class _Write:
    """What one write did, as the detectors need it."""

    at: float
    writers: list[Writer]
    handovers: list[_Handover] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    timed: bool = True  # the write's time is known (rates need it)


class Engine:
    """Turn watch events into finding changes. Feed events in time order; `advance` resolves quiet findings."""

    def __init__(self, settings: DetectionSettings, *, max_resolved: int = 10_000) -> None:
        self.settings = settings
        self.stats = Stats()
        self.now = -math.inf
        self._objects: dict[str, _Tracked] = {}
        self._fields = FieldSetCache()
        self._active: dict[str, tuple[_Open, _Tracked]] = {}
        self._resolved: deque[Finding] = deque(maxlen=max_resolved)
        self._next_deadline = math.inf  # no active finding can resolve before this
        self._rules = _RuleBook(settings.ignore_rules)
        hot = settings.hot_loop
        self._tau = hot.time_constant
        self._rate_unit = 60.0 / hot.time_constant

    # ----------------------------------------------------------------------------------------------- public

    @property
    def tracked_objects(self) -> int:
        return len(self._objects)

    def process(self, event: WatchEvent) -> list[FindingChange]:
        self.stats.events += 1
        obj = event.object
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not meta.get("uid") or not meta.get("name"):
            raise EventError("the object has no metadata.uid or metadata.name")
        uid: str = meta["uid"]
        state = self._objects.get(uid)
        rules = state.rules if state is not None else self._rules.for_object(obj, meta)
        if rules is None:
            self.stats.ignored_events += 1
            return []
        managed = meta.get("managedFields") or ()
        if not managed:
            self.stats.without_managed_fields += 1
        raw = raw_entries(managed)
        newest = max((t for t, _ in raw.values()), default="")
        at = event.observed_at
        timed = True
        if at is None:
            if newest:
                at = parse_time(newest)
            else:
                self.stats.untimed_events += 1
                timed = False
                at = self.now if self.now > -math.inf else 0.0
        changes = self.advance(at)
        now = self.now
        if event.type is EventType.DELETED:
            if state is not None:
                self.stats.deleted_objects += 1
                changes += self._forget(state, now)
            return changes
        if state is None:
            self._objects[uid] = self._baseline(obj, meta, raw, rules)
            return changes
        rv = meta.get("resourceVersion") or ""
        if rv and rv == state.rv:
            self.stats.duplicate_events += 1
            return changes
        state.rv = rv
        write = self._attribute(state, obj, raw, newest, now)
        write.timed = timed
        changes += self._detect(state, obj, write)
        return changes

    def advance(self, now: float) -> list[FindingChange]:
        """Move the clock (never backwards) and resolve findings that have been quiet long enough."""
        self.now = max(self.now, now)
        if self.now < self._next_deadline:
            return []
        changes = []
        self._next_deadline = math.inf
        for finding, state in list(self._active.values()):
            deadline = finding.last_seen + self._quiet(finding)
            if self.now >= deadline:
                changes.append(self._close(finding, state, deadline))
            else:  # (later writes only ever move a deadline later, so this stays a lower bound)
                self._next_deadline = min(self._next_deadline, deadline)
        return changes

    def _track(self, finding: _Open, state: _Tracked) -> None:
        self._active[finding.id] = (finding, state)
        self._next_deadline = min(self._next_deadline, finding.last_seen + self._quiet(finding))

    def active(self) -> list[Finding]:
        return [self._snapshot(f, s, FindingState.ACTIVE, None) for f, s in self._active.values()]

    def resolved(self) -> list[Finding]:
        return list(self._resolved)

    # ------------------------------------------------------------------------------------------ attribution

    def _baseline(
        self,
        obj: JSONObject,
        meta: JSONObject,
        raw: dict[Writer, tuple[str, object]],
        rules: tuple[IgnoreRule, ...],
    ) -> _Tracked:
        ref = ObjectRef(
            api_version=sys.intern(obj.get("apiVersion") or ""),
            kind=sys.intern(obj.get("kind") or ""),
            namespace=sys.intern(meta["namespace"]) if meta.get("namespace") else None,
            name=meta["name"],
            uid=meta["uid"],
        )
        state = _Tracked(ref, meta.get("resourceVersion") or "", rules)
        state.entries = {w: Entry(w, t, decode(self._fields, f)) for w, (t, f) in raw.items()}
        self._changed_values(state, obj)
        state.controlled = any(isinstance(o, dict) and o.get("controller") for o in meta.get("ownerReferences") or ())
        return state

    def _attribute(
        self, state: _Tracked, obj: JSONObject, raw: dict[Writer, tuple[str, object]], newest: str, now: float
    ) -> _Write:
        """Find the writer(s) of this write and the fields that changed hands or value."""
        entries, writers, gained = self._entries(state.entries, raw, newest)
        before = _Values(state.meta_values, state.body_values)
        changed = self._changed_values(state, obj)
        if not writers and changed:
            writers = self._owner_of_changes(entries, changed, raw)
        state.seq += 1
        self.stats.writes += 1
        if not writers:
            self.stats.unattributed_writes += 1
        write = _Write(now, writers or [UNATTRIBUTED], changed=changed)
        after = _Values(state.meta_values, state.body_values)
        taken = self._ownership_handovers(
            state, write, entries=entries, gained=gained, raw=raw, before=before, after=after
        )
        if not (state.controlled and len(writers) == 1):
            # (A single writer flipping values of an object another controller owns is an echo of that owner's
            # state, e.g. a ReplicaSet following its Deployment; a fight there is found on the owner.)
            for path in changed:
                if path not in taken:
                    by = next((w for w in writers if path in entries[w].fields), UNATTRIBUTED)
                    # An unattributed change of a field someone owns names that owner as a party to the flip.
                    owner = None if writers else next((w for w, e in entries.items() if path in e.fields), None)
                    was, now_ = before.get(path), after.get(path)
                    write.handovers.append(_Handover(now, state.seq, path, by, before=owner, was=was, now=now_))
        state.entries = entries
        return write

    def _entries(
        self, prev: dict[Writer, Entry], raw: dict[Writer, tuple[str, object]], newest: str
    ) -> tuple[dict[Writer, Entry], list[Writer], dict[Writer, frozenset[str]]]:
        """The new entries, the writers they show (time advanced, new, or field set grown) and what each gained.

        An entry not stamped in the newest second cannot have written now (a write stamps the current time), so
        its trie is not even decoded; it may have *lost* fields, which `_ownership_handovers` checks lazily.
        """
        entries: dict[Writer, Entry] = {}
        writers: list[Writer] = []
        gained: dict[Writer, frozenset[str]] = {}
        for writer, (time, fields_v1) in raw.items():
            old = prev.get(writer)
            if old is not None and old.time == time and time != newest:
                entries[writer] = old
                continue
            fields = decode(self._fields, fields_v1)
            if old is None:
                entries[writer] = Entry(writer, time, fields)
                writers.append(writer)
                gained[writer] = fields
                continue
            entries[writer] = old if old.fields is fields and old.time == time else Entry(writer, time, fields)
            grew = fields - old.fields
            if time > old.time or grew:
                writers.append(writer)
                if grew:
                    gained[writer] = grew
        return entries, writers, gained

    @staticmethod
    def _changed_values(state: _Tracked, obj: JSONObject) -> list[str]:
        """Visible leaves whose value changed (or appeared, or vanished); updates the object's value hashes."""
        changed: list[str] = []
        meta = obj["metadata"]
        digest = values.meta_digest(meta)
        if digest != state.meta_digest:
            new = values.meta_leaves(meta)
            changed = values.changed_paths(state.meta_values, new)
            state.meta_values, state.meta_digest = new or values.NO_LEAVES, digest
        digest = values.body_digest(obj)
        if digest != state.body_digest:
            new = values.body_leaves(obj)
            changed += values.changed_paths(state.body_values, new)
            state.body_values, state.body_digest = new or values.NO_LEAVES, digest
        return changed

    def _ownership_handovers(
        self,
        state: _Tracked,
        write: _Write,
        *,
        entries: dict[Writer, Entry],
        gained: dict[Writer, frozenset[str]],
        raw: dict[Writer, tuple[str, object]],
        before: _Values,
        after: _Values,
    ) -> set[str]:
        """Record leaves a writer gained that another manager owned before and no longer owns.

        The loser's entry may be gone altogether (it owned nothing else), or kept from the previous version
        without decoding (its time did not move): then what it owns now is decoded here, only when it matters.
        """
        taken: set[str] = set()
        prev = state.entries
        for taker, paths in gained.items():
            for path in paths:
                for loser, owned in prev.items():
                    if loser is taker or path not in owned.fields or loser.manager == taker.manager:
                        continue
                    entry = entries.get(loser)
                    if entry is owned:
                        entry = entries[loser] = Entry(loser, entry.time, decode(self._fields, raw[loser][1]))
                    if entry is not None and path in entry.fields:
                        continue
                    visible = before.has(path) or after.has(path)
                    write.handovers.append(
                        _Handover(
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

    def _owner_of_changes(
        self, entries: dict[Writer, Entry], changed: list[str], raw: dict[Writer, tuple[str, object]]
    ) -> list[Writer]:
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
            if entry.fields.issuperset(changed):
                fresh = decode(self._fields, raw[writer][1])  # an entry kept from before may since have lost fields
                if fresh is not entry.fields:
                    entries[writer] = Entry(writer, entry.time, fresh)
                if fresh.issuperset(changed):
                    owners.append(writer)
        return owners if len(owners) == 1 else []

    # -------------------------------------------------------------------------------------------- detectors

    def _detect(self, state: _Tracked, obj: JSONObject, write: _Write) -> list[FindingChange]:
        changes: list[FindingChange] = []
        handovers = [h for h in write.handovers if not self._ignored_field(state, h.path, h.by, h.before)]
        if handovers:
            changes += self._fight(state, handovers, write.at)
        counted = [w for w in write.writers if not _manager_ignored(state.rules, w)]
        if write.changed and all(self._ignored_field(state, p, w, None) for p in write.changed for w in write.writers):
            counted = []  # the write changed nothing but ignored fields (a leader-election renewal)
        if counted and write.timed:
            changes += self._hot_loop(state, obj, counted, write)
        return changes

    def _fight(self, state: _Tracked, handovers: list[_Handover], at: float) -> list[FindingChange]:
        history = state.history
        if history is None:
            history = state.history = []
        history.extend(handovers)
        horizon = at - self.settings.fight.window
        expired = next((i for i, h in enumerate(history) if h.at >= horizon), len(history))
        expired = max(expired, len(history) - self.settings.history)
        if expired:
            del history[:expired]
        contested = {h.path for h in handovers if self._contested(history, h.path)}
        finding = state.fight
        if finding is None:
            if not contested:
                return []
            involved = [h for h in history if h.path in contested]
            finding = state.fight = _Open(
                FindingType.FIGHT, state.ref, first_seen=involved[0].at, at=at, seq=involved[0].seq
            )
            self._track(finding, state)
            _absorb(finding, involved)
            return [FindingChange(ChangeKind.OPENED, self._snapshot(finding, state, FindingState.ACTIVE, None))]
        relevant = [h for h in handovers if h.path in contested or h.path in finding.fields]
        if not relevant:
            return []
        before = (len(finding.fields), len(finding.writer_writes), finding.handovers)
        _absorb(finding, relevant)
        finding.last_seen = at
        if not _notable(before, (len(finding.fields), len(finding.writer_writes), finding.handovers)):
            return []
        return [FindingChange(ChangeKind.UPDATED, self._snapshot(finding, state, FindingState.ACTIVE, None))]

    def _contested(self, history: Iterable[_Handover], path: str) -> bool:
        """Changed hands often enough, and came back to an earlier owner/value often enough."""
        count = back = 0
        owners: set[Writer] = set()
        values: set[int] = set()
        for h in history:
            if h.path != path:
                continue
            count += 1
            if (h.after is not None and h.after in owners) or (h.now is not None and h.now in values):
                back += 1
            if h.before is not None:
                owners.add(h.before)
            if h.was is not None:
                values.add(h.was)
        needed = self.settings.fight.min_handovers
        return count >= needed and back >= needed - 1

    def _rates(self, state: _Tracked, writers: list[Writer], at: float) -> tuple[dict[Writer, _Rate], list[Writer]]:
        """Feed each writer's decaying rate; return the rates and the writers that are hot now."""
        settings = self.settings.hot_loop
        rates = state.rates
        if rates is None:
            rates = state.rates = {}
        hot: list[Writer] = []
        for writer in writers:
            rate = rates.get(writer)
            if rate is None:
                rate = rates[writer] = _Rate()
            gap = at - rate.last
            rate.rate = rate.rate * math.exp(-gap / self._tau) + self._rate_unit
            if gap > 2 * self._tau:  # a new streak
                rate.streak, rate.start, rate.start_seq = 0, at, state.seq
            rate.streak += 1
            rate.last = at
            if rate.rate >= settings.min_writes_per_minute and rate.streak >= settings.min_writes:
                hot.append(writer)
        return rates, hot

    def _hot_loop(self, state: _Tracked, obj: JSONObject, writers: list[Writer], write: _Write) -> list[FindingChange]:
        rates, hot = self._rates(state, writers, write.at)
        finding = state.hot
        if finding is None:
            if not hot:
                return []
            starts = [rates[w] for w in hot]
            finding = state.hot = _Open(
                FindingType.HOT_LOOP,
                state.ref,
                first_seen=min(r.start for r in starts),
                at=write.at,
                seq=min(r.start_seq for r in starts),
            )
            self._track(finding, state)
            before = None
        else:
            before = (len(finding.fields), len(finding.writer_writes), state.seq - finding.first_seq)
        for writer in writers:
            if writer in hot and writer not in finding.writer_writes:
                finding.writer_writes[writer] = rates[writer].streak
            elif writer in finding.writer_writes:
                finding.writer_writes[writer] += 1
        if hot:
            finding.last_seen = write.at
        _note_hot_evidence(finding, state, obj, write, hot)
        if before is None:
            kind = ChangeKind.OPENED
        elif _notable(before, (len(finding.fields), len(finding.writer_writes), state.seq - finding.first_seq)):
            kind = ChangeKind.UPDATED
        else:
            return []
        return [FindingChange(kind, self._snapshot(finding, state, FindingState.ACTIVE, None))]

    # ------------------------------------------------------------------------------------------- lifecycle

    def _quiet(self, finding: _Open) -> float:
        resolve = self.settings.resolve
        period = _flip_period(finding)
        return max(resolve.after, resolve.flip_periods * period) if period else resolve.after

    def _close(self, finding: _Open, state: _Tracked, now: float) -> FindingChange:
        del self._active[finding.id]
        if state.fight is finding:
            state.fight = None
            state.history = None  # the handovers of a resolved fight do not count towards the next one
        if state.hot is finding:
            state.hot = None
        snapshot = self._snapshot(finding, state, FindingState.RESOLVED, now)
        self._resolved.append(snapshot)
        return FindingChange(ChangeKind.RESOLVED, snapshot)

    def _forget(self, state: _Tracked, now: float) -> list[FindingChange]:
        del self._objects[state.ref.uid]
        return [self._close(f, state, now) for f in (state.fight, state.hot) if f is not None]

    def _snapshot(self, finding: _Open, state: _Tracked, status: FindingState, resolved_at: float | None) -> Finding:
        writers = tuple(
            WriterCount(w, n)
            for w, n in sorted(finding.writer_writes.items(), key=lambda kv: (-kv[1], _sort_key(kv[0])))
        )
        evidence = hints.Evidence(
            type=finding.type,
            writers=frozenset(finding.writer_writes),
            fields=frozenset(finding.fields),
            by_ownership=finding.by_ownership,
            timestamp_values=finding.timestamp_values,
            status_writes=finding.status_writes,
        )
        fields = tuple(sorted(finding.fields))
        writes = state.seq - finding.first_seq + 1
        span = max(finding.last_seen - finding.first_seen, 1.0)
        rate = writes * 60.0 / span
        return Finding(
            id=finding.id,
            type=finding.type,
            state=status,
            object=state.ref,
            writers=writers,
            fields=fields,
            handovers=finding.handovers,
            writes=writes,
            writes_per_minute=round(rate, 2),
            first_seen=finding.first_seen,
            detected_at=finding.detected_at,
            last_seen=finding.last_seen,
            resolved_at=resolved_at,
            flip_period=_flip_period(finding),
            summary=_summary(finding, writers, fields, writes, rate),
            hint=hints.hint(evidence),
        )

    # ---------------------------------------------------------------------------------------------- ignore

    def _ignored_field(self, state: _Tracked, path: str, by: Writer, before: Writer | None) -> bool:
        for rule in state.rules:
            if rule.fields and not any(path.startswith(prefix) for prefix in rule.fields):
                continue
            if rule.manager is None:
                return True
            for writer in (by, before):
                if writer is not None and writer.manager and fnmatch.fnmatchcase(writer.manager, rule.manager):
                    return True
        return False


def _manager_ignored(rules: tuple[IgnoreRule, ...], writer: Writer) -> bool:
    return any(
        r.manager is not None
        and not r.fields
        and writer.manager is not None
        and fnmatch.fnmatchcase(writer.manager, r.manager)
        for r in rules
    )


def _note_hot_evidence(finding: _Open, state: _Tracked, obj: JSONObject, write: _Write, hot: list[Writer]) -> None:
    """What the hot writes change, for the summary and the hint."""
    finding.fields.update(write.changed)
    if not finding.timestamp_values:
        finding.timestamp_values = any(
            hints.looks_like_timestamp(text) for p in write.changed if (text := value_text(obj, p))
        )
    if not finding.status_writes:
        finding.status_writes = any(w.subresource == "status" or _owns_only_status(state.entries.get(w)) for w in hot)


def _owns_only_status(entry: Entry | None) -> bool:
    return (
        entry is not None
        and all(p.startswith(("status", "metadata")) for p in entry.fields)
        and any(p.startswith("status") for p in entry.fields)
    )


def _absorb(finding: _Open, handovers: list[_Handover]) -> None:
    """Add handovers (grouped by write) to a fight."""
    seqs = {h.seq for h in handovers}
    finding.handovers += len(seqs)
    counted: set[tuple[int, Writer]] = set()
    for h in handovers:
        finding.fields.add(h.path)
        if h.after is not None:
            finding.by_ownership = True
        if h.before is not None:
            finding.writer_writes.setdefault(h.before, 0)
        if (h.seq, h.by) not in counted:
            counted.add((h.seq, h.by))
            finding.writer_writes[h.by] = finding.writer_writes.get(h.by, 0) + 1


def _sort_key(writer: Writer) -> tuple[str, str, str]:
    return (writer.manager or "", writer.operation, writer.subresource)


def _notable(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Report an update when fields or writers were added, or a count reached the next power of two."""
    return before[0] != after[0] or before[1] != after[1] or before[2].bit_length() != after[2].bit_length()


def _flip_period(finding: _Open) -> float | None:
    if finding.type is not FindingType.FIGHT or finding.handovers < 2:
        return None
    return max(finding.last_seen - finding.first_seen, 0.0) / (finding.handovers - 1)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _summary(
    finding: _Open, writers: tuple[WriterCount, ...], fields: tuple[str, ...], writes: int, rate: float
) -> str:
    names = [c.writer.display() for c in writers]
    who = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else (names[0] if names else "?")
    what = ", ".join(fields[:3]) + (f" (+{len(fields) - 3} more)" if len(fields) > 3 else "")
    span = _duration(max(finding.last_seen - finding.first_seen, 0.0))
    if finding.type is FindingType.FIGHT:
        period = _flip_period(finding)
        every = f", one every {_duration(period)}" if period else ""
        if len(names) == 1:
            action = f"Writers all recorded as {who} keep flipping {what} back and forth"
        else:
            action = f"{who} keep {'taking' if finding.by_ownership else 'flipping'} {what} from each other"
        return f"{action}: {finding.handovers} handovers in {span}{every}"
    target = f" ({what})" if what else ""
    verb = "rewrites" if len(names) == 1 else "rewrite"
    return f"{who} {verb} the object{target} at {rate:.0f} writes/min: {writes} writes in {span}"


class _RuleBook:
    """Ignore rules, matched once per object against group/kind/namespace/name."""

    def __init__(self, rules: tuple[IgnoreRule, ...]) -> None:
        self._rules = rules
        self._kinds = {
            (r.group, (r.kind or "").lower())
            for r in rules
            if r.whole_objects and r.kind and r.group is not None and r.namespace is None and r.name is None
        }
        self._patterns = [
            (
                r,
                re.compile(fnmatch.translate(r.namespace)) if r.namespace else None,
                re.compile(fnmatch.translate(r.name)) if r.name else None,
            )
            for r in rules
        ]
        self._by_name = any(r.name is not None for r in rules)
        self._cache: dict[tuple[str, str, str | None], tuple[IgnoreRule, ...] | None] = {}

    def for_object(self, obj: JSONObject, meta: JSONObject) -> tuple[IgnoreRule, ...] | None:
        """The field/manager rules that apply to this object, or None when the whole object is ignored."""
        api_version: str = obj.get("apiVersion") or ""
        group = api_version.rpartition("/")[0]
        kind = (obj.get("kind") or "").lower()
        if (group, kind) in self._kinds:
            return None
        namespace = meta.get("namespace")
        if self._by_name:
            return self._match(group, kind, namespace, meta.get("name"))
        key = (group, kind, namespace)
        try:
            return self._cache[key]
        except KeyError:
            found = self._cache[key] = self._match(group, kind, namespace, None)
            return found

    def _match(self, group: str, kind: str, namespace: str | None, name: str | None) -> tuple[IgnoreRule, ...] | None:
        applicable = []
        for rule, ns_pattern, name_pattern in self._patterns:
            if rule.group is not None and rule.group != group:
                continue
            if rule.kind is not None and rule.kind.lower() != kind:
                continue
            if ns_pattern is not None and not ns_pattern.match(namespace or ""):
                continue
            if name_pattern is not None and (name is None or not name_pattern.match(name)):
                continue
            if rule.whole_objects:
                return None
            applicable.append(rule)
        return tuple(applicable)


__all__ = ["Engine", "EventError", "Stats"]
