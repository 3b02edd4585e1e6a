"""The detection engine: watch events in, finding changes out. Pure and deterministic; time is an argument.

For every write (a MODIFIED event) the engine
1. attributes it and records *handovers* (`attribution`): a leaf field owned by writer A before and by B != A
   (and no longer A) after, or a visible value changed by the write,
2. calls a fight when one field changed hands >= `min_handovers` times within the window and came *back* to an
   earlier owner or value at least `min_handovers - 1` times (A->B->A->B): so a single correction (A->B->A) or an
   ownership migration (A->B->C) is not a fight,
3. feeds a per-writer exponentially decaying write rate and calls a hot loop when it stays high,
4. resolves findings after their quiet period (`advance`).

State per object is small and bounded (see `attribution.ObjectState`): the last ownership per writer (shared,
interned field sets), a hash per visible value, a ring of recent handovers and a rate per writer. The number of
objects is bounded too: objects are kept in the order they were last written (or first seen), an object idle
for `idle_after` is let go, and beyond `max_objects` the least recently written are let go first. An object
with an open finding is never let go (it goes when its finding resolves), so the engine holds at most
`max_objects` plus the number of active findings. An object let go is simply seen anew: its next event is a
baseline (counted as `new_objects`), not a write.

With `native=True` the events come parsed by the native front end (`watcher._native`, Rust), which also keeps the
attribution state and attributes each write (`process_parsed`); the detectors below are the same. The Python
attribution (`attribution.py`) is its reference.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from watcher.config import DetectionSettings
from watcher.detection.attribution import Attribution, ObjectState, Write, version_key
from watcher.detection.findings import (
    OpenFinding,
    Rate,
    absorb,
    flip_period,
    notable,
    note_hot_evidence,
    owned_fields,
    snapshot,
)
from watcher.detection.handovers import Handover, HandoverLog
from watcher.detection.ignore import RuleBook
from watcher.detection.managed_fields import newest_time, raw_entries
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
    parse_time,
)

if TYPE_CHECKING:
    from watcher._native import Front, Parsed


def native_available() -> bool:
    """Whether the native front end (`watcher._native`, built from `native/` where Rust was there) is installed."""
    return importlib.util.find_spec("watcher._native") is not None


class EventError(ValueError):
    """An event whose object lacks what every Kubernetes object has."""


@dataclass(slots=True)
class Stats:
    """Counts of what the engine did. Every event processed ends as exactly one of: a write, a new or a resynced
    object, a duplicate, ignored, a deletion (of a tracked object or not), or invalid (`process` raised)."""

    events: int = 0
    writes: int = 0
    unattributed_writes: int = 0
    ignored_events: int = 0
    duplicate_events: int = 0
    deleted_objects: int = 0
    without_managed_fields: int = 0  # e.g. `kubectl get` without --show-managed-fields
    untimed_events: int = 0  # neither observedAt nor a managedFields time: no rate can be measured
    resynced_objects: int = 0  # ADDED again with a new resourceVersion (relisted): re-read, not a write
    new_objects: int = 0  # first seen (or seen again after being let go): its baseline taken
    untracked_deletions: int = 0  # DELETED for an object not tracked (never seen, or let go when idle)
    # Objects let go (not event outcomes): idle for `idle_after`, or the least recently written at `max_objects`.
    evicted_idle: int = 0
    evicted_capacity: int = 0


class Engine:
    """Turn watch events into finding changes. Feed events in time order; `advance` resolves quiet findings."""

    def __init__(
        self,
        settings: DetectionSettings,
        *,
        max_resolved: int = 10_000,
        on_write: Callable[[ObjectRef, Sequence[Writer]], None] | None = None,
        native: bool = False,
    ) -> None:
        """`on_write` is told of every write and its writers (e.g. to count writes per manager). `native`: events
        come parsed by the native front end (`front.parse`, then `process_parsed`), which keeps the attribution
        state; see `native_available`."""
        self.settings = settings
        self._on_write = on_write
        self.stats = Stats()
        self.now = -math.inf
        self._objects: dict[int, ObjectState] = {}
        self._attribution = Attribution()
        self._active: dict[str, tuple[OpenFinding, ObjectState]] = {}
        self._resolved: deque[Finding] = deque(maxlen=max_resolved)
        self._next_deadline = math.inf  # no active finding can resolve before this
        # Objects with a write rate by last write, oldest first: idle ones give up their rates.
        self._rated: dict[int, ObjectState] = {}
        self._next_eviction = -math.inf
        # `_objects` itself is kept in order of last write (first sight for objects never written): the front
        # is the least recently used, gives up its handover history when idle for the window, and is let go when
        # idle for `idle_after` or when there are over `max_objects`.
        self._idle_after = settings.idle_seconds
        self._max_objects = settings.max_objects
        self._rules = RuleBook(settings.ignore_rules)
        self._front: Front | None = None
        if native:
            from watcher import _native  # noqa: PLC0415 - built only where Rust was there to build it

            self._front = _native.Front(Writer, Handover, UNATTRIBUTED)
        self._obj: JSONObject = {}
        self._meta: JSONObject = {}
        self._parsed: Parsed | None = None
        hot = settings.hot_loop
        self._tau = hot.time_constant
        self._rate_unit = 60.0 / hot.time_constant

    # ----------------------------------------------------------------------------------------------- public

    @property
    def native(self) -> bool:
        return self._front is not None

    @property
    def front(self) -> Front:
        """The native front end (`native=True` only): `front.parse(text)` reads an event for `process_parsed`."""
        if self._front is None:
            raise TypeError("this engine was made without the native front end")
        return self._front

    @property
    def tracked_objects(self) -> int:
        return len(self._objects)

    def tracks(self, uid: str) -> bool:
        """Whether the object with this uid is tracked (has state here)."""
        return (hash(uid) if self._front is None else self._front.key(uid)) in self._objects

    def process(self, event: WatchEvent) -> list[FindingChange]:
        self.stats.events += 1
        obj = event.object
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not meta.get("uid") or not meta.get("name"):
            raise EventError("the object has no metadata.uid or metadata.name")
        self._obj, self._meta, self._parsed = obj, meta, None
        # Objects are keyed by a hash of their uid, not its 36 characters: two uids of one cluster share a 64-bit
        # hash with a probability of about 2**-64 per pair.
        key = hash(meta["uid"])
        state = self._objects.get(key)
        rules = state.rules if state is not None else self._rules.for_object(obj, meta)
        if rules is None:
            self.stats.ignored_events += 1
            return []
        managed = meta.get("managedFields") or ()
        if not managed:
            self.stats.without_managed_fields += 1
        raw = raw_entries(managed)
        newest = newest_time(raw)
        time = event.observed_at if event.observed_at is not None else parse_time(newest) if newest else None
        at, timed = self._event_time(time)
        changes = self.advance(at)
        if state is not None and key not in self._objects:  # let go by this very advance (idle): seen anew
            state = None
        now = self.now
        if event.type is EventType.DELETED:
            changes += self._deleted(key, state, now)
            return changes
        if state is None:
            self._first_seen(key, self._attribution.baseline(obj, meta, raw, rules), now)
            return changes
        version = meta.get("resourceVersion") or ""
        if self._repeated(state, version_key(version)):
            return changes
        if event.type is EventType.ADDED:  # listed again (a relist after a gap): its state now, not a write
            self._attribution.resync(state, obj, meta, raw)
            self.stats.resynced_objects += 1
            return changes
        write = self._attribution.attribute(state, obj, raw, newest, now)
        changes += self._written(key, state, write, timed, version)
        return changes

    def process_parsed(self, event: Parsed) -> list[FindingChange]:
        """`process` for an event parsed by the native front end (`native=True`): the same steps, with the
        attribution state kept natively (see `watcher._native`)."""
        front = self._front
        if front is None:
            raise TypeError("this engine was made without the native front end")
        self.stats.events += 1
        self._parsed = event
        key = event.key
        state = self._objects.get(key)
        rules = (
            state.rules
            if state is not None
            else self._rules.for_ref(event.api_version, event.kind, event.namespace, event.name)
        )
        if rules is None:
            self.stats.ignored_events += 1
            return []
        if not event.has_managed_fields:
            self.stats.without_managed_fields += 1
        at, timed = self._event_time(event.time)
        changes = self.advance(at)
        if state is not None and key not in self._objects:  # let go by this very advance (idle): seen anew
            state = None
        now = self.now
        if event.type == "DELETED":
            changes += self._deleted(key, state, now)
            return changes
        if state is None:
            front.baseline(event)
            self._first_seen(key, ObjectState(event.rv, rules), now)
            return changes
        if self._repeated(state, event.rv):
            return changes
        if event.type == "ADDED":
            front.resync(event)
            self.stats.resynced_objects += 1
            return changes
        writers, changed, handovers, seq = front.attribute(event, now)
        state.seq = seq
        write = Write(now, writers or [UNATTRIBUTED], changed)
        write.handovers = handovers
        changes += self._written(key, state, write, timed, event.resource_version)
        return changes

    def _deleted(self, key: int, state: ObjectState | None, now: float) -> list[FindingChange]:
        if state is None:
            self.stats.untracked_deletions += 1
            return []
        self.stats.deleted_objects += 1
        return self._forget(key, state, now)

    def _repeated(self, state: ObjectState, rv: int) -> bool:
        """Whether this version (`version_key`) was seen already (a duplicate event); else it becomes the
        object's version."""
        if rv and rv == state.rv:
            self.stats.duplicate_events += 1
            return True
        state.rv = rv
        return False

    def _written(self, key: int, state: ObjectState, write: Write, timed: bool, version: str) -> list[FindingChange]:
        """Count a write and run the detectors on it."""
        self.stats.writes += 1
        if self._on_write is not None:
            self._on_write(self._current_ref(), write.writers)
        if write.writers[0] is UNATTRIBUTED:
            self.stats.unattributed_writes += 1
        write.timed = timed
        write.version = version
        changes = self._detect(state, write)
        state.last_write = self.now
        self._touch(key, state)
        return changes

    def _current_ref(self) -> ObjectRef:
        """The reference of the object of the event being processed."""
        parsed = self._parsed
        if parsed is None:
            return self._attribution.object_ref(self._obj, self._meta)
        namespace = parsed.namespace
        return ObjectRef(
            api_version=sys.intern(parsed.api_version),
            kind=sys.intern(parsed.kind),
            namespace=sys.intern(namespace) if namespace else None,
            name=parsed.name,
            uid=parsed.uid,
        )

    def _current_object(self) -> JSONObject:
        """The object of the event being processed (decoded from its text when the native front end read it)."""
        parsed = self._parsed
        if parsed is None:
            return self._obj
        doc = orjson.loads(parsed.data)
        found = doc.get("object") if "object" in doc else doc
        return found if isinstance(found, dict) else {}

    def _first_seen(self, key: int, state: ObjectState, now: float) -> None:
        """Track a new object (or one let go before): its baseline, at the back of the queue; keep to the cap."""
        self._objects[key] = state
        state.last_write = now
        self.stats.new_objects += 1
        if self._max_objects is not None and len(self._objects) > self._max_objects:
            self._evict_over_capacity(self._max_objects)

    def _event_time(self, time: float | None) -> tuple[float, bool]:
        """When the event happened, and whether that is known: its time (see capture.py's `event_time`), else
        (untimed) the engine's clock."""
        if time is not None:
            return time, True
        self.stats.untimed_events += 1
        return (self.now if self.now > -math.inf else 0.0), False

    def advance(self, now: float) -> list[FindingChange]:
        """Move the clock (never backwards), resolve findings quiet long enough, and let idle objects go."""
        self.now = max(self.now, now)
        if self.now >= self._next_eviction:
            self._evict_idle(self.now)
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

    def _touch(self, key: int, state: ObjectState) -> None:
        """Keep the objects and the rate-eviction queue ordered by last write (move to the end)."""
        objects = self._objects
        del objects[key]
        objects[key] = state
        if state.rates is not None:
            self._rated.pop(key, None)
            self._rated[key] = state

    def _evict_idle(self, now: float) -> None:
        """Drop the write rates of objects idle for two time constants (their streak is over, their rate at
        most 14% of what it was), the handovers of objects idle for a whole window (none can count any more), and
        let objects idle for `idle_after` go.

        Handovers are dropped in the pass over the front of `_objects` that finds the objects to let go, not from a
        queue of their own: by default `idle_after` is the window, so an object idle that long is let go anyway,
        and a longer `idle_after` only adds to the pass the objects idle for between the two.
        """
        self._next_eviction = now + self._tau / 2
        for key in _idle(self._rated, now - 2 * self._tau):
            self._rated.pop(key).rates = None
        window, idle_after = now - self.settings.fight.window, now - self._idle_after
        idle = []
        for key, state in self._objects.items():
            if state.last_write >= window:
                break
            if state.last_write < idle_after:
                idle.append(key)
            elif state.fight is None:  # an open fight keeps its handovers until it resolves
                state.history = None
        self.stats.evicted_idle += self._let_go(idle, len(idle))

    def _evict_over_capacity(self, limit: int) -> None:
        """Let the least recently written objects go, down to 1% below `limit` (in one pass, not one per new
        object: taking a dict's first item again and again would skip ever more deleted slots)."""
        excess = len(self._objects) - limit + limit // 100
        self.stats.evicted_capacity += self._let_go(self._objects, excess)

    def _let_go(self, candidates: Iterable[int], count: int) -> int:
        """Forget up to `count` of `candidates` (keys, least recently written first), keeping objects with an open
        finding (they go to the back of the queue); returns how many were let go."""
        objects = self._objects
        chosen: list[int] = []
        kept: list[int] = []
        for key in candidates:
            if len(chosen) >= count:
                break
            state = objects[key]
            (kept if state.fight is not None or state.hot is not None else chosen).append(key)
        for key in chosen:
            self._remove(key)
        for key in kept:
            objects[key] = objects.pop(key)
        return len(chosen)

    def _remove(self, key: int) -> None:
        """Forget an object: out of the objects and the rate-eviction queue."""
        del self._objects[key]
        self._rated.pop(key, None)
        if self._front is not None:
            self._front.forget(key)

    def _track(self, finding: OpenFinding, state: ObjectState) -> None:
        self._active[finding.id] = (finding, state)
        self._next_deadline = min(self._next_deadline, finding.last_seen + self._quiet(finding))

    def active(self) -> list[Finding]:
        return [snapshot(f, s, FindingState.ACTIVE, None) for f, s in self._active.values()]

    def resolved(self) -> list[Finding]:
        return list(self._resolved)

    # -------------------------------------------------------------------------------------------- detectors

    def _detect(self, state: ObjectState, write: Write) -> list[FindingChange]:
        changes: list[FindingChange] = []
        rules = state.rules
        handovers = [h for h in write.handovers if not rules.field_ignored(h.path, h.by, h.before)]
        if handovers:
            changes += self._fight(state, handovers, write)
        counted = [w for w in write.writers if not rules.manager_ignored(w)]
        if write.changed and all(rules.field_ignored(p, w, None) for p in write.changed for w in write.writers):
            counted = []  # the write changed nothing but ignored fields (a leader-election renewal)
        if counted and write.timed:
            changes += self._hot_loop(state, counted, write)
        return changes

    def _fight(self, state: ObjectState, handovers: list[Handover], write: Write) -> list[FindingChange]:
        at = write.at
        history = state.history
        if history is None:
            history = state.history = HandoverLog.empty()
        # A field becomes contested only by coming back to an earlier owner or value: test that cheaply first.
        candidates = [h for h in handovers if history.may_come_back(h)]
        limit = self.settings.history
        history.add(handovers[-limit:])  # (more could not stay: see `trim`)
        history.trim(horizon=at - self.settings.fight.window, limit=limit)
        contested = {h.path for h in candidates if self._contested(history, h.path)}
        finding = state.fight
        if finding is None:
            if not contested:
                return []
            involved = history.of(contested)
            finding = state.fight = OpenFinding(
                FindingType.FIGHT,
                self._current_ref(),
                first_seen=involved[0].at,
                at=at,
                seq=involved[0].seq,
                version=write.version,
            )
            self._track(finding, state)
            absorb(finding, involved)
            return [FindingChange(ChangeKind.OPENED, snapshot(finding, state, FindingState.ACTIVE, None))]
        relevant = [h for h in handovers if h.path in contested or h.path in finding.fields]
        if not relevant:
            return []
        before = (len(finding.fields), len(finding.writer_writes), finding.handovers)
        absorb(finding, relevant)
        finding.last_seen = at
        if not notable(before, (len(finding.fields), len(finding.writer_writes), finding.handovers)):
            return []
        return [FindingChange(ChangeKind.UPDATED, snapshot(finding, state, FindingState.ACTIVE, None))]

    def _owned(self, state: ObjectState, writer: Writer) -> frozenset[str] | None:
        if self._front is None:
            return owned_fields(state, writer)
        return self._front.owned(self._parsed.key if self._parsed is not None else 0, writer)

    def _contested(self, history: HandoverLog, path: str) -> bool:
        """Changed hands and came back to an earlier owner/value often enough (`min_handovers` - 1 times)."""
        return history.backs(path) >= self.settings.fight.min_handovers - 1

    def _rates(
        self, state: ObjectState, writers: list[Writer], at: float, version: str
    ) -> tuple[dict[Writer, Rate], list[Writer]]:
        """Feed each writer's decaying rate; return the rates and the writers that are hot now."""
        settings = self.settings.hot_loop
        rates = state.rates
        if rates is None:
            rates = state.rates = {}
        hot: list[Writer] = []
        for writer in writers:
            rate = rates.get(writer)
            if rate is None:
                rate = rates[writer] = Rate()
            gap = at - rate.last
            rate.rate = rate.rate * math.exp(-gap / self._tau) + self._rate_unit
            if gap > 2 * self._tau:  # a new streak
                rate.streak, rate.start, rate.start_seq, rate.start_version = 0, at, state.seq, version
            rate.streak += 1
            rate.last = at
            if rate.rate >= settings.min_writes_per_minute and rate.streak >= settings.min_writes:
                hot.append(writer)
        return rates, hot

    def _hot_loop(self, state: ObjectState, writers: list[Writer], write: Write) -> list[FindingChange]:
        rates, hot = self._rates(state, writers, write.at, write.version)
        finding = state.hot
        if finding is None:
            if not hot:
                return []
            first = min((rates[w] for w in hot), key=lambda r: r.start_seq)
            # Named after the write that began the streak, not the one that crossed the threshold: the crossing
            # depends on each replica's receive times, the streak's start (after a gap of two time constants) not.
            finding = state.hot = OpenFinding(
                FindingType.HOT_LOOP,
                self._current_ref(),
                first_seen=first.start,
                at=write.at,
                seq=first.start_seq,
                version=first.start_version or write.version,
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
        note_hot_evidence(finding, self._current_object, lambda writer: self._owned(state, writer), write, hot)
        if before is None:
            kind = ChangeKind.OPENED
        elif notable(before, (len(finding.fields), len(finding.writer_writes), state.seq - finding.first_seq)):
            kind = ChangeKind.UPDATED
        else:
            return []
        return [FindingChange(kind, snapshot(finding, state, FindingState.ACTIVE, None))]

    # ------------------------------------------------------------------------------------------- lifecycle

    def _quiet(self, finding: OpenFinding) -> float:
        resolve = self.settings.resolve
        period = flip_period(finding)
        return max(resolve.after, resolve.flip_periods * period) if period else resolve.after

    def _close(self, finding: OpenFinding, state: ObjectState, now: float) -> FindingChange:
        del self._active[finding.id]
        if state.fight is finding:
            state.fight = None
            state.history = None  # the handovers of a resolved fight do not count towards the next one
        if state.hot is finding:
            state.hot = None
        resolved = snapshot(finding, state, FindingState.RESOLVED, now)
        self._resolved.append(resolved)
        return FindingChange(ChangeKind.RESOLVED, resolved)

    def _forget(self, key: int, state: ObjectState, now: float) -> list[FindingChange]:
        self._remove(key)
        return [self._close(f, state, now) for f in (state.fight, state.hot) if f is not None]


def _idle(queue: dict[int, ObjectState], horizon: float) -> list[int]:
    """The objects at the front of a queue ordered by last write that were last written before `horizon`."""
    idle = []
    for key, state in queue.items():
        if state.last_write >= horizon:
            break
        idle.append(key)
    return idle


__all__ = ["Engine", "EventError", "Stats", "native_available"]
