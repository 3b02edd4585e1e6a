"""Detection over API requests (kube-apiserver audit events): the failed half of a fight.

Pure and deterministic; time is the requests'.

The watch shows only writes that succeeded and changed something. Requests show what it cannot:

- **`conflict_storm`**: an object whose writes keep failing with 409 Conflict because they carry a stale
  resourceVersion. The object's conflicts feed an exponentially decaying rate; a storm is called when it stays at
  or above `conflict_storm.min_conflicts_per_minute` for `min_conflicts` conflicts in a row (no gap longer than two
  time constants), so the occasional conflict every controller sees and retries once is not one. A conflict against
  the client's own write (it wrote again from a copy its own write had made stale: a controller whose cache lags
  behind its writes, as Kubernetes' deployment controller during every rollout) is counted but makes no storm: no
  other client is in its way. Its own write is the object's last successful write, or the client's last successful
  update where the conflict carries the version that update carried (another client's write may have completed
  between the two). It names every
  client that wrote the object (user, its pod, User-Agent, field manager, conflicts, successful writes): the ones
  that keep losing and the ones that won meanwhile.
- **`apply_conflict`**: a server-side applier (one client) whose applies are rejected with field conflicts
  `apply_conflict.min_rejections` times in a row, without a success between: stuck. Where the audit level records
  the API server's message, the finding names the managers that own the fields and the fields.
- **`noop_writes`**: a client writing an object at a sustained rate with writes that change nothing. The API server
  does not bump the resourceVersion of a write that changes nothing, so no watch event shows it; requests do: two
  successful updates that carry the same resourceVersion (the first changed nothing, or the second would have
  failed), or, where responses are logged, a write answered with the version it started from. Its no-op writes feed
  a decaying rate per client, with the thresholds of `noop_writes`.

Findings resolve after the quiet period of `resolve.after`; a stuck applier's finding also when its apply succeeds.
Only write requests to named objects are analysed (reads and collections are counted and skipped), after the ignore
rules (a rule's kind matches the resource it is served as). State is per object, bounded like the watch engine's:
an object without an open finding is let go after `idle_after` without requests, or, beyond `max_objects`, the
least recently requested first; each object counts at most `max_clients` clients by name (the rest together).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

from watcher.config import DetectionSettings
from watcher.detection import hints
from watcher.detection.eviction import let_go
from watcher.detection.findings import notable, request_summary
from watcher.detection.ignore import ObjectRules, RuleBook
from watcher.detection.request_state import (
    OTHER_CLIENTS,
    ClientKey,
    ObjectKey,
    RequestFinding,
    RequestState,
    RequestStats,
    Tally,
    subresources_with,
)
from watcher.detection.requests import Request, parse_apply_conflict, stores_nothing_on_create
from watcher.detection.state import Rate
from watcher.detection.timeline import keep_resolved, new_record
from watcher.model import (
    CONFLICT,
    WRITE,
    ChangeKind,
    Client,
    Finding,
    FindingChange,
    FindingState,
    FindingType,
    ObjectRef,
    Writer,
    WriterCount,
)

# What the watch knows of an object (see `join.py`): the fields a fight contests there (() when it saw writes but no
# fight), or None when it did not see the object.
WatchView = Callable[[ObjectKey], tuple[str, ...] | None]


class RequestEngine:
    """Turn API requests into finding changes. Feed requests in time order; `advance` resolves quiet findings."""

    def __init__(
        self,
        settings: DetectionSettings,
        *,
        max_resolved: int = 10_000,
        on_conflict: Callable[[str, str], None] | None = None,
    ) -> None:
        """Make a request engine.

        `on_conflict` is told of every analysed write rejected with 409: the client's field manager, and
        `version` (a stale resourceVersion) or `apply` (field conflicts); e.g. to count conflicts per manager.
        """
        self.settings = settings
        self._on_conflict = on_conflict
        self.stats = RequestStats()
        self.now = -math.inf
        self.watch: WatchView | None = None  # set by a join with the watch
        self._rules = RuleBook(settings.ignore_rules)
        self._objects: dict[ObjectKey, RequestState] = {}  # in order of last request
        self._active: dict[str, tuple[RequestFinding, RequestState]] = {}
        self._resolved: deque[Finding] = deque(maxlen=max_resolved)
        self._next_deadline = math.inf
        self._next_eviction = -math.inf
        storm, noop = settings.conflict_storm, settings.noop_writes
        self._storm_tau, self._storm_rate, self._storm_min = (
            storm.time_constant,
            storm.min_conflicts_per_minute,
            storm.min_conflicts,
        )
        self._noop_tau, self._noop_rate, self._noop_min = (
            noop.time_constant,
            noop.min_writes_per_minute,
            noop.min_writes,
        )
        self._min_rejections = settings.apply_conflict.min_rejections
        self._quiet = settings.resolve.after
        self._max_clients = settings.max_clients

    # ----------------------------------------------------------------------------------------------- public

    @property
    def tracked_objects(self) -> int:
        return len(self._objects)

    def process(self, request: Request) -> list[FindingChange]:
        """Analyse one completed request; the finding changes it causes."""
        self.stats.requests += 1
        if not self._analysed(request):
            return []
        changes = self.advance(request.time)
        state = self._state(request)
        if state is None:
            self.stats.ignored += 1
            return changes
        client = self._client(state, request)
        tally = state.clients[client]
        if request.object.subresource not in tally.subresources:
            tally.subresources = subresources_with(tally.subresources, request.object.subresource)
        if request.succeeded:
            self.stats.writes += 1
            tally.writes += 1
            changes += self._succeeded(state, request, client, tally)
            state.last_writer = client
        elif request.apply_conflict:
            self.stats.apply_conflicts += 1
            self._rejected(request, tally, "apply")
            changes += self._apply_rejected(state, request, client, tally)
        elif request.version_conflict:
            self.stats.conflicts += 1
            self._rejected(request, tally, "version")
            if _against_own_write(state, client, tally, request):  # (its cache lags behind its writes; it retries)
                self.stats.self_conflicts += 1
            else:
                changes += self._conflict(state, request, tally)
        else:
            self.stats.failed += 1
        if state.storm is not None and not request.version_conflict:
            state.storm.requests += 1
        self._record(state, client, request)
        return changes

    def _record(self, state: RequestState, client: ClientKey, request: Request) -> None:
        """Record a request on the timelines of the findings open on its object that it concerns.

        A storm's timeline takes every client's requests; a stuck applier's or no-op writer's, its own. Not when the
        request opened them (it is in their first bin).
        """
        number = self.stats.requests
        kind = CONFLICT if request.version_conflict or request.apply_conflict else WRITE
        for finding in (state.storm, state.applies.get(client), state.noops.get(client)):
            if finding is not None and (record := finding.record) is not None and record.last < number:
                record.last = number
                record.add(request.time, record.manager_lane(_manager(client)), kind)

    def _rejected(self, request: Request, tally: Tally, reason: str) -> None:
        """Count a write rejected with 409 (`reason`: version or apply).

        Counted for its client, its resource, and `on_conflict`.
        """
        tally.conflicts += 1
        _count(self.stats.conflicts_by_resource, (request.object.api_group, request.object.resource, reason))
        if self._on_conflict is not None:
            self._on_conflict(request.manager, reason)

    def _analysed(self, request: Request) -> bool:
        """Whether a request is one to analyse: a write (not a dry run) to a named object; the rest is counted."""
        stores_nothing = request.verb == "create" and stores_nothing_on_create(request.object)
        if request.is_write and request.object.name and not stores_nothing:
            return True
        if request.dry_run:
            self.stats.dry_run += 1
        elif stores_nothing:
            self.stats.stores_nothing += 1
        elif request.is_write:
            self.stats.without_name += 1
        else:
            self.stats.reads += 1
        return False

    def _state(self, request: Request) -> RequestState | None:
        """Return the state of the request's object.

        Tracked from now on if new, and moved to the back of the queue; None when the ignore rules leave the object or
        the request's manager out.
        """
        obj = request.object
        key = (obj.api_group, obj.resource, obj.namespace, obj.name)
        state = self._objects.pop(key, None)  # (taken out and put back: to the back of the queue, in two lookups)
        if state is None:
            rules = self._rules.for_request(obj.api_group, obj.resource, obj.namespace, obj.name)
            if rules is None:
                return None
            state = self._track(key, request, rules)
        else:
            self._objects[key] = state
        if state.rules.scoped and state.rules.ignores_manager(request.manager):
            return None
        state.last = self.now
        if not state.ref.uid and obj.uid:
            state.ref = _ref(request, uid=obj.uid)
        return state

    def advance(self, now: float) -> list[FindingChange]:
        """Move the clock (never backwards), resolve findings quiet long enough, and let idle objects go."""
        self.now = max(self.now, now)
        if self.now >= self._next_eviction:
            self._evict_idle()
        if self.now < self._next_deadline:
            return []
        changes = []
        self._next_deadline = math.inf
        for finding, state in list(self._active.values()):
            deadline = finding.last_seen + self._quiet
            if self.now >= deadline:
                changes.append(self._close(finding, state, deadline))
            else:
                self._next_deadline = min(self._next_deadline, deadline)
        return changes

    def active(self) -> list[Finding]:
        return [self.snapshot(f, s, FindingState.ACTIVE, None) for f, s in self._active.values()]

    def resolved(self) -> list[Finding]:
        return list(self._resolved)

    def findings(self) -> list[Finding]:
        """Active, then resolved."""
        return self.active() + self.resolved()

    def conflicted(self, key: ObjectKey) -> bool:
        """Whether writes to the object were rejected with 409 (while it is tracked)."""
        state = self._objects.get(key)
        return state is not None and any(t.conflicts for t in state.clients.values())

    def clients(self, key: ObjectKey) -> tuple[Client, ...]:
        """Return the clients that wrote an object (most conflicts first), for a join with the watch.

        () when untracked.
        """
        state = self._objects.get(key)
        return () if state is None else _clients(state, None)

    def users(self, key: ObjectKey) -> dict[tuple[str, str], frozenset[str]]:
        """Return the users that wrote an object, by field manager and subresource.

        By the field manager and the subresource ("" for the object itself) their writes were recorded under, as a
        managedFields entry keys its writer; {} when untracked.
        """
        state = self._objects.get(key)
        if state is None:
            return {}
        found: dict[tuple[str, str], set[str]] = {}
        for (user, _, manager, _), tally in state.clients.items():
            for subresource in tally.subresources:
                found.setdefault((manager, subresource), set()).add(user)
        return {writer: frozenset(users) for writer, users in found.items()}

    # ------------------------------------------------------------------------------------------- the rules

    def _succeeded(self, state: RequestState, request: Request, client: ClientKey, tally: Tally) -> list[FindingChange]:
        """Take a successful write: a stuck applier is unstuck.

        And tell whether it (or the update before it) was a no-op.
        """
        changes = []
        tally.rejections = 0
        stuck = state.applies.get(client)
        if stuck is not None:
            changes.append(self._close(stuck, state, self.now))
        if request.verb not in ("update", "patch"):
            state.version, state.update_version, state.update_client = request.response_version, "", None
            return changes
        sent, returned = request.resource_version, request.response_version
        noop: tuple[ClientKey, float] | None = None
        if returned:
            if returned in (sent if request.verb == "update" else "", state.version):
                noop = (client, request.time)
        elif request.verb == "update" and sent and sent == state.update_version and state.update_client is not None:
            # The update before carried this version too and succeeded, and so does this one: that one changed
            # nothing (a resourceVersion never comes back).
            noop = (state.update_client, state.update_time)
        state.version = returned
        if request.verb == "update":
            state.update_version, state.update_client, state.update_time = sent, client, request.time
            tally.written_from = sent if returned != sent else ""
        if noop is not None:
            changes += self._noop(state, *noop)
        return changes

    def _noop(self, state: RequestState, client: ClientKey, at: float) -> list[FindingChange]:
        self.stats.noop_writes += 1
        ref = state.ref
        _count(self.stats.noop_by_resource, (ref.group, ref.resource))
        tally = state.clients[client]
        tally.noops += 1
        rate = tally.noop_rate
        if rate is None:
            rate = tally.noop_rate = Rate()
        rate.add(at, self._noop_tau)
        finding = state.noops.get(client)
        if finding is None:
            if rate.rate < self._noop_rate or rate.streak < self._noop_min:
                return []
            finding = state.noops[client] = self._open(
                FindingType.NOOP_WRITES, state, client=client, first_seen=rate.start
            )
            finding.requests = rate.streak
            if finding.record is not None:
                lane = finding.record.manager_lane(_manager(client))
                finding.record.fold(rate.start, at, lane, writes=rate.streak)
            return [self._opened(finding, state)]
        before = self._progress(finding)
        finding.requests += 1
        finding.last_seen = self.now
        return self._updated(finding, state, before)

    def _conflict(self, state: RequestState, request: Request, tally: Tally) -> list[FindingChange]:
        """Take a write rejected for a stale resourceVersion.

        Feed the object's conflict rate; open or grow a storm.
        """
        if request.resource_version and request.resource_version == tally.stale_version:
            tally.stale += 1
        tally.stale_version = request.resource_version
        rate = state.conflict_rate
        if rate is None:
            rate = state.conflict_rate = Rate()
        rate.add(request.time, self._storm_tau)
        storm = state.storm
        if storm is None:
            if rate.rate < self._storm_rate or rate.streak < self._storm_min:
                return []
            storm = state.storm = self._open(FindingType.CONFLICT_STORM, state, client=None, first_seen=rate.start)
            storm.conflicts = storm.requests = rate.streak
            if storm.record is not None:  # (which client each conflict of the streak was is not kept)
                storm.record.fold(rate.start, request.time, -1, writes=rate.streak, conflicts=rate.streak)
            self._evidence(storm, state, request)
            return [self._opened(storm, state)]
        before = self._progress(storm)
        storm.conflicts += 1
        storm.requests += 1
        storm.last_seen = self.now
        self._evidence(storm, state, request)
        return self._updated(storm, state, before)

    def _evidence(self, storm: RequestFinding, state: RequestState, request: Request) -> None:
        storm.updates = storm.updates or request.verb == "update"
        storm.stale = storm.stale or any(t.stale >= 2 for t in state.clients.values())

    def _apply_rejected(
        self, state: RequestState, request: Request, client: ClientKey, tally: Tally
    ) -> list[FindingChange]:
        """Take a server-side apply rejected with field conflicts.

        The applier is stuck after enough in a row.
        """
        tally.rejections += 1
        finding = state.applies.get(client)
        if finding is None:
            if tally.rejections < self._min_rejections:
                return []
            finding = state.applies[client] = self._open(
                FindingType.APPLY_CONFLICT, state, client=client, first_seen=request.time
            )
            finding.conflicts = tally.rejections
            if finding.record is not None:
                lane = finding.record.manager_lane(_manager(client))
                finding.record.fold(
                    finding.first_seen, request.time, lane, writes=tally.rejections, conflicts=tally.rejections
                )
            _note_owners(finding, request.message)
            return [self._opened(finding, state)]
        before = self._progress(finding)
        finding.conflicts += 1
        finding.last_seen = self.now
        _note_owners(finding, request.message)
        return self._updated(finding, state, before)

    # ------------------------------------------------------------------------------------------ bookkeeping

    def _track(self, key: ObjectKey, request: Request, rules: ObjectRules) -> RequestState:
        """Track a new object at the back of the queue.

        Beyond `max_objects`, let the least recently requested go first, 1% at a time.
        """
        limit, objects = self.settings.max_objects, self._objects
        if limit is not None and len(objects) >= limit:
            excess = len(objects) + 1 - limit + limit // 100
            self.stats.evicted_capacity += let_go(objects, objects, excess, held=_held, forget=objects.__delitem__)
        state = self._objects[key] = RequestState(_ref(request, uid=request.object.uid), rules)
        return state

    def _client(self, state: RequestState, request: Request) -> ClientKey:
        client = (request.user, request.user_agent, request.manager, request.pod)
        clients = state.clients
        if client not in clients:
            if len(clients) >= self._max_clients:
                client = OTHER_CLIENTS
                if client in clients:
                    return client
            clients[client] = Tally()
        return client

    def _open(
        self, kind: FindingType, state: RequestState, *, client: ClientKey | None, first_seen: float
    ) -> RequestFinding:
        finding = RequestFinding(
            kind, state.ref, client=client, first_seen=first_seen, at=self.now, opened_by=repr(first_seen)
        )
        finding.record = record = new_record(self.settings.timeline, self.settings.resolve)
        if record is not None:
            record.last = self.stats.requests
        return finding

    def _opened(self, finding: RequestFinding, state: RequestState) -> FindingChange:
        self._active[finding.id] = (finding, state)
        self._next_deadline = min(self._next_deadline, finding.last_seen + self._quiet)
        return FindingChange(ChangeKind.OPENED, self.snapshot(finding, state, FindingState.ACTIVE, None))

    @staticmethod
    def _progress(finding: RequestFinding) -> tuple[int, ...]:
        return (len(finding.fields), len(finding.owners), finding.conflicts + finding.requests)

    def _updated(self, finding: RequestFinding, state: RequestState, before: tuple[int, ...]) -> list[FindingChange]:
        if not notable(before, self._progress(finding)):
            return []
        return [FindingChange(ChangeKind.UPDATED, self.snapshot(finding, state, FindingState.ACTIVE, None))]

    def _close(self, finding: RequestFinding, state: RequestState, at: float) -> FindingChange:
        self._active.pop(finding.id, None)
        if finding is state.storm:
            state.storm = None
        elif finding.client is not None:
            for table in (state.applies, state.noops):
                if table.get(finding.client) is finding:
                    del table[finding.client]
        resolved = self.snapshot(finding, state, FindingState.RESOLVED, at)
        keep_resolved(self._resolved, resolved, self.settings.timeline.resolved)
        return FindingChange(ChangeKind.RESOLVED, resolved)

    def _evict_idle(self) -> None:
        """Let objects without an open finding go once idle for `idle_after` (checked every few seconds)."""
        self._next_eviction = self.now + 5.0
        horizon = self.now - self.settings.idle_seconds
        idle = []
        for key, state in self._objects.items():
            if state.last >= horizon:
                break
            idle.append(key)
        objects = self._objects
        self.stats.evicted_idle += let_go(objects, idle, len(idle), held=_held, forget=objects.__delitem__)

    # ------------------------------------------------------------------------------------------ what it says

    def snapshot(
        self, finding: RequestFinding, state: RequestState, status: FindingState, resolved_at: float | None
    ) -> Finding:
        """Return the immutable view of a finding over requests that sinks get."""
        contested = self.watch(_key(state.ref)) if self.watch is not None else None
        clients = _clients(state, finding.client)
        fields = tuple(sorted(finding.fields | set(contested or ())))
        span = max(finding.last_seen - finding.first_seen, 1.0)
        count = finding.conflicts if finding.type is not FindingType.NOOP_WRITES else finding.requests
        writers = _writers(clients, finding)
        evidence = hints.RequestEvidence(
            type=finding.type,
            clients=clients,
            fields=fields,
            owners=tuple(sorted(finding.owners)),
            contested=contested,
            updates=finding.updates,
            stale=finding.stale,
        )
        return Finding(
            id=finding.id,
            type=finding.type,
            state=status,
            object=finding.ref,
            writers=writers,
            fields=fields,
            handovers=0,
            writes=finding.requests if finding.type is not FindingType.APPLY_CONFLICT else finding.conflicts,
            writes_per_minute=round(count * 60.0 / span, 2),
            first_seen=finding.first_seen,
            detected_at=finding.detected_at,
            last_seen=finding.last_seen,
            resolved_at=resolved_at,
            flip_period=None,
            summary=request_summary(evidence, count, span),
            hint=hints.request_hint(evidence),
            clients=clients,
            conflicts=finding.conflicts if finding.type is not FindingType.NOOP_WRITES else 0,
            timeline=finding.record.timeline() if finding.record is not None else None,
        )


def _against_own_write(state: RequestState, client: ClientKey, tally: Tally, request: Request) -> bool:
    """Whether a version conflict is against the client's own write: no other client is in its way.

    So when the object's last successful write was the client's, or when the conflict carries the version the client's
    own last successful update carried (that update made its copy stale, whatever was written after it: the audit
    log's order is the order requests completed in, and another client's write can complete between the two).
    """
    sent = request.resource_version
    return state.last_writer == client or (bool(sent) and sent == tally.written_from)


def _manager(client: ClientKey) -> str:
    """Return a client's lane on a timeline: its field manager, else its user."""
    return client[2] or client[0]


def _count(counts: dict[Any, int], key: Any) -> None:
    counts[key] = counts.get(key, 0) + 1


def _note_owners(finding: RequestFinding, message: str) -> None:
    owners, paths = parse_apply_conflict(message)
    finding.owners.update(owners)
    finding.fields.update(paths)


def _ref(request: Request, *, uid: str) -> ObjectRef:
    obj = request.object
    version = f"{obj.api_group}/{obj.api_version}" if obj.api_group and obj.api_version else obj.api_version
    return ObjectRef(
        api_version=version,
        kind="",
        namespace=obj.namespace or None,
        name=obj.name,
        uid=uid,
        resource=obj.resource,
        api_group=obj.api_group,
    )


def _key(ref: ObjectRef) -> ObjectKey:
    return (ref.group, ref.resource, ref.namespace or "", ref.name)


def _clients(state: RequestState, only: ClientKey | None) -> tuple[Client, ...]:
    """Return the object's clients, most conflicts first, then most writes.

    Only `only`'s, when given.
    """
    items = state.clients.items() if only is None else [(only, state.clients[only])]
    return tuple(
        sorted(
            (
                Client(k[0], k[1], k[2], conflicts=t.conflicts, writes=t.writes, noop_writes=t.noops, pod=k[3])
                for k, t in items
            ),
            key=lambda c: (-c.conflicts, -c.writes, c.manager, c.user, c.user_agent, c.pod),
        )
    )


def _writers(clients: tuple[Client, ...], finding: RequestFinding) -> tuple[WriterCount, ...]:
    """Return the field managers behind the clients, each with its users and their write requests."""
    writes: dict[str, int] = {}
    users: dict[str, set[str]] = {}
    for c in clients:
        writes[c.manager] = writes.get(c.manager, 0) + c.writes + c.conflicts
        users.setdefault(c.manager, set()).add(c.user)
    for owner in finding.owners:
        writes.setdefault(owner, 0)
    return tuple(
        WriterCount(Writer(m), n, tuple(sorted(users.get(m, ())))) for m, n in sorted(writes.items(), key=_busiest)
    )


def _busiest(item: tuple[str, int]) -> tuple[int, str]:
    return (-item[1], item[0])


__all__ = ["RequestEngine", "WatchView"]


def _held(state: RequestState) -> bool:
    """Keep an object with an open storm, stuck applier or no-op loop."""
    return state.storm is not None or bool(state.applies) or bool(state.noops)
