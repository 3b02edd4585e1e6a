"""The detection engine: normalised watch events in, finding changes out.

Pure and deterministic; time is an argument.

`Engine.process(event)` is the one way in, for the live watcher and `replay` alike. For every event it
1. finds the object's state (`state.py`), or takes a baseline of an object first seen,
2. drops duplicates, re-reads relisted objects (a resync) and forgets deleted ones,
3. has the write attributed (`attribution.py`: writers, changed fields, handovers), by the native implementation
   where it is built, else the Python reference,
4. hands the write to the rules (`rules.py`): the fight rule gets its handovers, the hot-loop rule its writers,
   both after the object's ignore rules,
5. resolves findings after their quiet period (`advance`) and lets idle objects go.

Cascades: a finding on an object whose controller (its `ownerReferences` entry with `controller: true`), or an
object its spec names (`scaleTargetRef`: `events.references`), has an active finding of its own follows from it
(`Finding.related`: a ReplicaSet rewritten again and again because its Deployment is fought over, an autoscaler's
churn while the Deployment it scales is); so does a hot loop on an object with a fight (the writes that react to
each flip, such as the Deployment controller's status updates). A finding's cause is a function of what is active,
so the link is the same whichever opens first; it is redone when a finding opens or resolves, each change told as an
update of the finding that follows.

State per object is small and bounded (see `state.ObjectState`). The number of objects is bounded too: objects
are kept in the order they were last written (or first seen), an object idle for `idle_after` is let go, and
beyond `max_objects` the least recently written are let go first. An object with an open finding is never let go
(it goes when its finding resolves), so the engine holds at most `max_objects` plus the number of active
findings. An object let go is simply seen anew: its next event is a baseline (counted as `new_objects`), not a
write.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from watcher.config import DetectionSettings
from watcher.detection.attribution import Attribution, Decoder, Write
from watcher.detection.events import Name, ObjectEvent, controller, name_of, object_ref, references
from watcher.detection.eviction import let_go
from watcher.detection.findings import flip_period, snapshot
from watcher.detection.handovers import Handover
from watcher.detection.ignore import CONFIG, RuleBook
from watcher.detection.native import implementation
from watcher.detection.rules import FightRule, HotLoopRule
from watcher.detection.state import ObjectState, OpenFinding
from watcher.detection.timeline import Record, keep_resolved, quiet_period
from watcher.model import (
    CONFLICT,
    HANDOVER,
    UNATTRIBUTED,
    WRITE,
    ChangeKind,
    Finding,
    FindingChange,
    FindingState,
    FindingType,
    ObjectRef,
    Writer,
)

_K = TypeVar("_K")
OWNER_REFERENCES = "metadata.ownerReferences"  # (one leaf: managed_fields.py keeps the references opaque)
MAX_KINDS = 20  # kinds counted among the events without managedFields (the warning names them)
MAX_SHARED = 10_000  # objects with field managers the audit events show several users behind (`note_shared`)
_NO_MANAGERS: frozenset[tuple[str, str]] = frozenset()


@dataclass(slots=True)
class Stats:
    """Counts of what the engine did.

    Every event processed ends as exactly one of: a write, a new or a resynced object, a duplicate, ignored, a deletion
    (of a tracked object or not), or invalid (`process` raised).
    """

    events: int = 0
    writes: int = 0
    unattributed_writes: int = 0
    ignored_events: int = 0
    duplicate_events: int = 0
    deleted_objects: int = 0
    without_managed_fields: int = 0  # e.g. `kubectl get` without --show-managed-fields
    # of which straight from a watch (they carry the receive time: fightwatch's own recording, or live): the API server
    # sent them so (managedFields reset by a client, an aggregated API that keeps none)
    without_managed_fields_watched: int = 0
    kinds_without_managed_fields: dict[str, int] = field(default_factory=dict)  # (up to MAX_KINDS kinds)
    untimed_events: int = 0  # neither observedAt nor a managedFields time: no rate can be measured
    resynced_objects: int = 0  # ADDED again with a new resourceVersion (relisted): re-read, not a write
    new_objects: int = 0  # first seen (or seen again after being let go): its baseline taken
    untracked_deletions: int = 0  # DELETED for an object not tracked (never seen, or let go when idle)
    # Objects let go (not event outcomes): idle for `idle_after`, or the least recently written at `max_objects`.
    evicted_idle: int = 0
    evicted_capacity: int = 0
    # Fights the user's ignore rules hide (`detection.ignore`): found, not reported (see ignore.py).
    ignored_fights: int = 0


class Engine:
    """Turn watch events into finding changes. Feed events in time order; `advance` resolves quiet findings."""

    def __init__(
        self,
        settings: DetectionSettings,
        *,
        attribution: Attribution | str = "auto",
        max_resolved: int = 10_000,
        on_write: Callable[[ObjectRef, Sequence[Writer]], None] | None = None,
    ) -> None:
        """Make an engine over an attribution implementation.

        `attribution`: an implementation, or the choice of one (`auto`, `native`, `python`: see
        `native.implementation`); events come from its decoder, `decode`. `on_write` is told of every write and its
        writers (e.g. to count writes per manager).
        """
        self.settings = settings
        self._attribution = implementation(attribution) if isinstance(attribution, str) else attribution
        self.decode: Decoder = self._attribution.decode
        self._on_write = on_write
        self.stats = Stats()
        self._uncounted = Stats()  # (the counts of the events of objects the ignore rules leave out: see `process`)
        self.last_write: Write | None = None  # the last write processed (`join.Joined` reads its writers and losers)
        self.now = -math.inf
        self._objects: dict[int, ObjectState] = {}
        self._active: dict[str, tuple[OpenFinding, ObjectState]] = {}
        self._controlled: dict[int, list[OpenFinding]] = {}  # a controller's key -> active findings on its objects
        self._referring: dict[Name, list[OpenFinding]] = {}  # an object's name -> active findings on objects naming it
        self._named: dict[Name, int] = {}  # the names of the objects with an active finding -> their keys
        self._resolved: deque[Finding] = deque(maxlen=max_resolved)
        self._next_deadline = math.inf  # no active finding can resolve before this
        # Objects with a write rate by last write, oldest first: idle ones give up their rates.
        self._rated: dict[int, ObjectState] = {}
        self._removed = 0  # objects forgotten so far (`_remove`), so that `process` looks an object up only once
        self._next_eviction = -math.inf
        # `_objects` itself is kept in order of last write (first sight for objects never written): the front
        # is the least recently used, gives up its handover history when idle for the window, and is let go when
        # idle for `idle_after` or when there are over `max_objects`.
        self._idle_after = settings.idle_seconds
        self._max_objects = settings.max_objects
        self._rules = RuleBook(settings.ignore_rules)
        self._fight = FightRule(settings, self._attribution.new_log)
        self._hot_loop = HotLoopRule(settings)
        self._tau = settings.hot_loop.time_constant
        # Object key -> the writers (manager, subresource) the audit events show several users behind (`note_shared`).
        self._shared: dict[int, frozenset[tuple[str, str]]] = {}

    # ----------------------------------------------------------------------------------------------- public

    @property
    def implementation(self) -> str:
        """Which attribution implementation this engine runs on: `native` or `python`."""
        return self._attribution.name

    @property
    def subresources_seen(self) -> bool:
        """Whether the stream showed a server of 1.22 or later (`Attribution.stamped`).

        Without, writes through the scale subresource and a writer's rewrites of its own fields may stay unattributed.
        """
        return self._attribution.stamped

    @property
    def tracked_objects(self) -> int:
        return len(self._objects)

    def tracks(self, event: ObjectEvent) -> bool:
        """Whether the object of this event is tracked (has state here)."""
        return event.key in self._objects

    def process(self, event: ObjectEvent) -> list[FindingChange]:
        """Analyse one event (from `decode`); the finding changes it causes.

        An object the ignore rules leave out is tracked for fights only (ignore.py), its events counted as ignored:
        their other counts go to `_uncounted`.
        """
        stats = self.stats
        stats.events += 1
        key = event.key
        state = self._objects.get(key)
        rules = (
            state.rules
            if state is not None
            else self._rules.for_ref(event.api_version, event.kind, event.namespace, event.name)
        )
        if rules.left_out:
            stats.ignored_events += 1
            stats = self._uncounted
        if not event.has_managed_fields:
            stats.without_managed_fields += 1
            if event.observed_at is not None:
                stats.without_managed_fields_watched += 1
            kinds = stats.kinds_without_managed_fields
            if event.kind in kinds or len(kinds) < MAX_KINDS:
                kinds[event.kind] = kinds.get(event.kind, 0) + 1
        at, timed = self._event_time(event.time, stats)
        removed = self._removed
        changes = self.advance(at)
        # (let go by this very advance, idle: seen anew; looked up again only when the advance let objects go)
        if state is not None and self._removed != removed and key not in self._objects:
            state = None
        now = self.now
        kind_of_event = event.type
        if kind_of_event == "DELETED":
            changes += self._deleted(key, state, now, stats)
            return changes
        if state is None:
            self._first_seen(key, self._attribution.baseline(event, rules), now, stats)
            return changes
        if self._repeated(state, event.rv, stats):
            return changes
        if kind_of_event == "ADDED":  # listed again (a relist after a gap): its state now, not a write
            self._attribution.resync(state, event)
            stats.resynced_objects += 1
            return changes
        state.seq += 1
        write = self._attribution.attribute(state, event, now)
        write.timed = timed
        write.version = event.resource_version
        self._count(event, write, stats)
        self._detect(key, state, write, event, changes)
        state.last_write = now
        self._touch(key, state)
        return changes

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
                changes += self._close(finding, state, deadline)
            else:  # (later writes only ever move a deadline later, so this stays a lower bound)
                self._next_deadline = min(self._next_deadline, deadline)
        return changes

    def active(self) -> list[Finding]:
        return [snapshot(f, s, FindingState.ACTIVE, None) for f, s in self._active.values() if not f.silenced]

    def resolved(self) -> list[Finding]:
        return list(self._resolved)

    def findings(self) -> list[Finding]:
        """Active, then resolved."""
        return self.active() + self.resolved()

    # ------------------------------------------------------------------------------------------- the steps

    def _deleted(self, key: int, state: ObjectState | None, now: float, stats: Stats) -> list[FindingChange]:
        if state is None:
            stats.untracked_deletions += 1
            return []
        stats.deleted_objects += 1
        return self._forget(key, state, now)

    def _repeated(self, state: ObjectState, rv: int, stats: Stats) -> bool:
        """Tell whether this version (`events.version_key`) was seen already (a duplicate event).

        Else it becomes the object's version.
        """
        if rv and rv == state.rv:
            stats.duplicate_events += 1
            return True
        state.rv = rv
        return False

    def _count(self, event: ObjectEvent, write: Write, stats: Stats) -> None:
        stats.writes += 1
        self.last_write = write
        if write.writers[0] is UNATTRIBUTED:
            stats.unattributed_writes += 1
        if self._on_write is not None and stats is self.stats:
            self._on_write(object_ref(event), write.writers)

    def _first_seen(self, key: int, state: ObjectState, now: float, stats: Stats) -> None:
        """Track a new object (or one let go before): its baseline, at the back of the queue; keep to the cap."""
        self._objects[key] = state
        state.last_write = now
        stats.new_objects += 1
        if self._max_objects is not None and len(self._objects) > self._max_objects:
            self._evict_over_capacity(self._max_objects)

    def _event_time(self, time: float | None, stats: Stats) -> tuple[float, bool]:
        """Return when the event happened, and whether that is known.

        Its time (see `events.ObjectEvent.time`), else (untimed) the engine's clock.
        """
        if time is not None:
            return time, True
        stats.untimed_events += 1
        return (self.now if self.now > -math.inf else 0.0), False

    def _detect(
        self, key: int, state: ObjectState, write: Write, event: ObjectEvent, changes: list[FindingChange]
    ) -> None:
        """Hand the write to the rules, after the object's ignore rules; add the changes they make to `changes`.

        Track what they open.
        """
        rules = state.rules
        handovers = write.handovers  # (all of them: the fight rule sees what the rules leave out, see ignore.py)
        if rules.empty:  # (most objects: no ignore rule applies, nothing to leave out)
            counted = write.writers
        elif rules.left_out:
            counted = []
        else:
            counted = [w for w in write.writers if not rules.manager_ignored(w)]
            if write.changed and all(rules.field_ignored(p, w, None) for p in write.changed for w in write.writers):
                counted = []  # the write changed nothing but ignored fields (a leader-election renewal)
        if handovers:
            shared = self._shared.get(key, _NO_MANAGERS)
            change = self._fight.observe(state, handovers, write, event, shared=shared, rules=rules)
            if change is not None:
                changes += self._track_opened(change, state.fight, state, event)
        if counted and write.timed:
            change = self._hot_loop.observe(state, counted, write, event, self._attribution)
            if change is not None:
                changes += self._track_opened(change, state.hot, state, event)
        for finding in (state.fight, state.hot):
            if finding is not None and finding.record is not None and finding.record.last < write.seq:
                _record(finding, finding.record, write, handovers)

    def note_shared(self, uid: str, manager: str, subresource: str = "") -> None:
        """Tell the engine that more than one user writes an object as one field manager.

        The audit events show more than one user writing the object with this uid as field manager `manager` (to
        `subresource`, "" for the object itself: as managedFields key a writer), from `join.py`: that writer flipping a
        field of it alone is a fight of two writers (`rules.FightRule`). Kept for at most MAX_SHARED objects, the oldest
        told forgotten first.
        """
        key = self._attribution.object_key(uid)
        known = self._shared.pop(key, _NO_MANAGERS)
        self._shared[key] = known | {(manager, subresource)}
        if len(self._shared) > MAX_SHARED:
            del self._shared[next(iter(self._shared))]

    def note_conflict(self, finding_id: str, at: float, manager: str) -> None:
        """Mark a write rejected with 409 Conflict on an active finding's timeline.

        Told by API requests: see `join.py`.
        """
        active = self._active.get(finding_id)
        if active is not None and (record := active[0].record) is not None:
            record.add(at, record.manager_lane(manager), CONFLICT)

    def _track_opened(
        self, change: FindingChange, finding: OpenFinding | None, state: ObjectState, event: ObjectEvent
    ) -> list[FindingChange]:
        """Track a finding a rule just opened, until it resolves; link its cascades.

        Return the change, and the updates of the findings it turned out to cause.
        """
        if finding is not None and finding.silenced:  # (a fight the ignore rules hide: tracked, never told)
            if finding.id not in self._active:
                self._active[finding.id] = (finding, state)
                self._next_deadline = min(self._next_deadline, finding.last_seen + self._quiet(finding))
                self.stats.ignored_fights += finding.silenced == CONFIG
            return []
        if change.kind is not ChangeKind.OPENED or finding is None:
            return [change]
        if finding.id in self._active:  # (told for the first time: a fight no rule leaves out, see `rules.FightRule`)
            self._active[finding.id] = (finding, state)
            return [change]
        self._active[finding.id] = (finding, state)
        self._next_deadline = min(self._next_deadline, finding.last_seen + self._quiet(finding))
        finding.key = event.key
        owner = controller(event)
        uid = owner.get("uid") if owner is not None else None
        if owner is not None:
            finding.controller = (str(owner.get("kind") or ""), str(owner.get("name") or ""))
            finding.controller_writer = self._reference_writer(finding, state, event)
        if isinstance(uid, str) and uid and (owner_key := self._attribution.object_key(uid)) != finding.key:
            finding.owner = owner_key
            self._controlled.setdefault(finding.owner, []).append(finding)
        own = name_of(finding.ref)
        self._named[own] = finding.key
        finding.refs = tuple(n for n in dict.fromkeys(references(event)) if n != own)
        for name in finding.refs:
            self._referring.setdefault(name, []).append(finding)
        finding.cause = self._cause(finding, state)
        if finding.cause is not None or finding.controller is not None:
            change = FindingChange(ChangeKind.OPENED, snapshot(finding, state, FindingState.ACTIVE, None))
        return [change, *(c for c in self._relink(finding, state) if c.finding.id != finding.id)]

    def _reference_writer(self, finding: OpenFinding, state: ObjectState, event: ObjectEvent) -> Writer | None:
        """Return the writer of a finding that set its object's controller reference.

        It owns `ownerReferences`: the controller's own writes (`diagnosis.restorers`).
        """
        for writer in finding.writer_writes:
            owned = self._attribution.owned(state, event, writer)
            if owned is not None and OWNER_REFERENCES in owned:
                return writer
        return None

    def _driven_below(self, finding: OpenFinding) -> OpenFinding | None:
        """Return an active fight on an object `finding`'s object controls, driven against that controller.

        A client writing what a controller maintains: the controller's own churn (its object's status rewritten after
        every change, a hot loop) follows from it, not the other way round.
        """
        for child in self._controlled.get(finding.key, ()):
            if child.type is FindingType.FIGHT and child.controller_writer is not None and child.cause is None:
                return child
        return None

    def _cause(self, finding: OpenFinding, state: ObjectState) -> OpenFinding | None:
        """Return the active finding that `finding` (on the object of `state`) follows from.

        The fight on the same object, for a hot loop (the churn of the writes that react to it); else the finding on its
        controller (its fight, else its hot loop); else the finding on the first object its spec names that has one;
        else none.
        """
        if finding is state.hot and state.fight is not None:
            return state.fight
        if finding.type is FindingType.FIGHT and finding.controller_writer is not None:
            return None  # (driven against its own controller: a root cause, whatever the controller's object shows)
        if finding.type is FindingType.HOT_LOOP and (below := self._driven_below(finding)) is not None:
            return below
        upstream = [finding.owner] if finding.owner else []
        upstream += [key for name in finding.refs if (key := self._named.get(name)) is not None]
        for key in upstream:
            other = self._objects.get(key)
            cause = None if other is None else other.fight or other.hot
            if cause is not None and not _follows(cause, finding):  # (two objects naming each other: no loop)
                return cause
        return None

    def _relink(self, finding: OpenFinding, state: ObjectState) -> list[FindingChange]:
        """Link again the active findings that may follow from those on the object of `finding`.

        The findings on the objects it controls or that name it, and its own hot loop; return an update for each whose
        cause changed.
        """
        changes = []
        named = self._referring.get(name_of(finding.ref), ())
        above = self._objects.get(finding.owner) if finding.owner else None  # (a fight driven here causes its hot loop)
        for child in (*self._controlled.get(finding.key, ()), *named, state.hot, above.hot if above else None):
            if child is None or child.id not in self._active:
                continue
            child_state = self._active[child.id][1]
            cause = self._cause(child, child_state)
            if cause is not child.cause:
                child.cause = cause
                changes.append(
                    FindingChange(ChangeKind.UPDATED, snapshot(child, child_state, FindingState.ACTIVE, None))
                )
        return changes

    # ----------------------------------------------------------------------------------------- memory bounds

    def _touch(self, key: int, state: ObjectState) -> None:
        """Keep the objects and the rate-eviction queue ordered by last write (move to the end)."""
        objects = self._objects
        del objects[key]
        objects[key] = state
        if state.rates is not None:
            rated = self._rated
            if key in rated:  # (not `pop(key, None)`: compiled, a method call)
                del rated[key]
            rated[key] = state

    def _evict_idle(self, now: float) -> None:
        """Drop the write rates, handovers and objects idle for long enough.

        Drop the write rates of objects idle for two time constants (their streak is over, their rate at
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
        self.stats.evicted_idle += let_go(self._objects, idle, len(idle), held=_held, forget=self._remove)

    def _evict_over_capacity(self, limit: int) -> None:
        """Let the least recently written objects go, down to 1% below `limit`.

        In one pass, not one per new object: taking a dict's first item again and again would skip ever more deleted
        slots.
        """
        excess = len(self._objects) - limit + limit // 100
        self.stats.evicted_capacity += let_go(self._objects, self._objects, excess, held=_held, forget=self._remove)

    def _remove(self, key: int) -> None:
        """Forget an object: out of the objects, the rate-eviction queue and the attribution's own state."""
        del self._objects[key]
        self._removed += 1
        self._rated.pop(key, None)
        self._shared.pop(key, None)
        self._attribution.forget(key)

    # ------------------------------------------------------------------------------------------- lifecycle

    def _quiet(self, finding: OpenFinding) -> float:
        return quiet_period(self.settings.resolve, flip_period(finding))

    def _close(self, finding: OpenFinding, state: ObjectState, now: float) -> list[FindingChange]:
        """Resolve a finding.

        Return its change, and the updates of the findings that followed from it (linked to the object's other finding,
        or to none).
        """
        del self._active[finding.id]
        if state.fight is finding:
            state.fight = None
            state.history = None  # the handovers of a resolved fight do not count towards the next one
        if state.hot is finding:
            state.hot = None
        if finding.owner:
            _drop(self._controlled, finding.owner, finding)
        for name in finding.refs:
            _drop(self._referring, name, finding)
        if state.fight is None and state.hot is None:
            self._named.pop(name_of(finding.ref), None)
        if finding.silenced:
            return []
        resolved = snapshot(finding, state, FindingState.RESOLVED, now)
        keep_resolved(self._resolved, resolved, self.settings.timeline.resolved)
        return [FindingChange(ChangeKind.RESOLVED, resolved), *self._relink(finding, state)]

    def _forget(self, key: int, state: ObjectState, now: float) -> list[FindingChange]:
        self._remove(key)
        return [c for f in (state.fight, state.hot) if f is not None for c in self._close(f, state, now)]


def _record(finding: OpenFinding, record: Record, write: Write, handovers: list[Handover]) -> None:
    """Record a write of an object with an open finding on the finding's timeline."""
    record.last = write.seq
    handed = finding.type is FindingType.FIGHT and any(h.path in finding.fields for h in handovers)
    record.add(write.at, record.lane(write.writers[0]), HANDOVER if handed else WRITE)


def _follows(finding: OpenFinding, cause: OpenFinding) -> bool:
    """Whether `finding` already follows from `cause`, directly or down a chain of causes."""
    seen = 0
    link = finding.cause
    while link is not None and seen < 64:  # (chains are short: a Deployment, its ReplicaSet, an autoscaler)
        if link is cause:
            return True
        link, seen = link.cause, seen + 1
    return False


def _drop(links: dict[_K, list[OpenFinding]], key: _K, finding: OpenFinding) -> None:
    """Take a finding out of the links under `key` (the key goes with the last one)."""
    siblings = links[key]
    siblings.remove(finding)
    if not siblings:
        del links[key]


def _idle(queue: dict[int, ObjectState], horizon: float) -> list[int]:
    """Return the objects at the front of a queue that were last written before `horizon`.

    The queue is ordered by last write.
    """
    idle = []
    for key, state in queue.items():
        if state.last_write >= horizon:
            break
        idle.append(key)
    return idle


__all__ = ["Engine", "Stats"]


def _held(state: ObjectState) -> bool:
    """Keep an object with an open fight or hot loop."""
    return state.fight is not None or state.hot is not None
