"""The watch and API requests (audit events) of one cluster, joined: each side's findings told what the other knows.

- A watch finding (fight, hot loop) gets the clients that wrote its object as audit events name them (user, pod,
  User-Agent, manager, conflicts, successful writes), the users behind each of its writers, and its conflicts. A
  writer is a managedFields entry: a manager's writes to the object itself, or to one subresource (`status`,
  `scale`); its users are those whose requests went there under that manager. kube-controller-manager's controllers
  all write as `kube-controller-manager`, each with its own service account: the HorizontalPodAutoscaler's
  `scale` writes are told from the deployment controller's `status` writes by the subresource. Servers before 1.22
  record a subresource's writes without naming it: there the users of those writes show on no named writer.
  The unattributed writer gets the users of the clients whose writes the watch could not attribute: those that
  wrote the object under a manager no managedFields entry of the finding names (the scale subresource on servers
  before 1.22, managedFields reset by a client).
- A write the watch could not attribute (the API server stamps no managedFields entry for a write that only removes
  fields) is named from the successful write request to its object closest in time (within `MATCH_SECONDS`, each
  request matched once: requests for writes the watch did attribute are taken by those first): a watch finding's
  unattributed writer is shown as the writer the requests name for most (`DOMINANT`) of its recent writes
  (`named_from: audit`), with its users, and its summary and hint are told again with it (`diagnosis.describe`).
- A conflict storm is told the fields a fight on the same object contests (it is the fight's failed half), or that
  the watch saw the object written without a fight (contention over different fields).
- A conflict storm on an object with an active fight follows from that fight (its failed half); one on an object whose
  controller (its `ownerReferences` entry with `controller: true`) has an active fight or hot loop follows from that
  (a ReplicaSet's conflicts while its Deployment is fought over): the storm is linked to that finding (`related`) and is
  not a root cause of its own (not delivered, no finding series).

Objects are matched by API group, resource, namespace and name: the watch knows an object's kind, a request its
resource; `resource_of` maps one to the other (discovery, live; the API server's own guess offline).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace

from watcher.detection import diagnosis
from watcher.detection.attribution import Write
from watcher.detection.engine import Engine
from watcher.detection.events import ObjectEvent, controller, object_ref
from watcher.detection.ignore import resource_of
from watcher.detection.request_engine import RequestEngine
from watcher.detection.request_state import ObjectKey
from watcher.detection.requests import Request
from watcher.model import ChangeKind, Client, Finding, FindingChange, FindingType, ObjectRef, Writer, WriterCount

MAX_SEEN = 100_000  # objects the watch saw written, remembered for the hint of a storm on them (oldest go first)
# A write request and a watch write of one object this close in time are one write (the request's stageTimestamp is
# the API server's, a watch event's time the watcher's: they differ by the delivery, and by the two clocks).
MATCH_SECONDS = 2.0
PENDING = 16  # recent write requests, and watch writes, kept per object to be matched (the oldest go first)
MAX_MATCHED = 2_000  # objects whose recent writes are kept (the least recently written go first)
DOMINANT = 0.75  # of an object's unattributed writes the requests name, one writer's share that names them all
Seen = dict[ObjectKey, tuple[tuple[str, ...], ObjectRef]]  # objects the watch saw written: fought-over fields, name


def guessed_resource(ref: ObjectRef) -> str:
    return ref.resource or resource_of(ref.kind)


class Joined:
    """Both engines fed in time order; their findings, each told what the other side knows."""

    def __init__(
        self,
        watch: Engine,
        requests: RequestEngine,
        *,
        resource: Callable[[ObjectRef], str] = guessed_resource,
        max_resolved: int = 10_000,
    ) -> None:
        self.watch = watch
        self.requests = requests
        self._resource = resource
        # Objects the watch saw written -> the fields fought over there, and how the watch names them (kind, uid).
        self._seen: Seen = {}
        # Objects with conflicts -> their controller's key (None: none), read from the watch once they conflicted.
        self._owners: dict[ObjectKey, ObjectKey | None] = {}
        self._open: dict[ObjectKey, Finding] = {}  # the watch's active findings by object (the last opened)
        # Objects the audit events show several users writing as one manager, before the watch saw them written.
        self._shared_pending: dict[ObjectKey, set[tuple[str, str]]] = {}
        self._resolved: deque[Finding] = deque(maxlen=max_resolved)
        self._writes: dict[ObjectKey, _Writes] = {}  # per object: requests and watch writes, matched one to one
        requests.watch = _contested_in(self._seen)  # (not a bound method: no reference cycle through the engines)

    def key(self, ref: ObjectRef) -> ObjectKey:
        return (ref.group, self._resource(ref), ref.namespace or "", ref.name)

    def process(self, event: ObjectEvent) -> list[FindingChange]:
        """Hand a watch event to the watch engine; its findings told what the audit requests know."""
        writes = self.watch.stats.writes
        changes = self.watch.process(event)
        if self.watch.stats.writes != writes:
            ref = object_ref(event)
            key = self.key(ref)
            self._saw(key, (), ref)
            at = event.time if event.time is not None else self.watch.now
            if (write := self.watch.last_write) is not None:
                self._matched(key).watched(at, write)
            for manager, subresource in self._shared_pending.pop(key, ()):
                self.watch.note_shared(ref.uid, manager, subresource)
            if key not in self._owners and self.requests.conflicted(key):
                self._owners[key] = _controller(event, key, self._resource)
                if len(self._owners) > MAX_SEEN:
                    del self._owners[next(iter(self._owners))]
        return [self._told(c) for c in changes]

    def process_request(self, request: Request) -> list[FindingChange]:
        """Hand an audit request to the request engine; the watch's findings told of its conflicts."""
        changes = [self._linked(c) for c in self.requests.process(request)]
        if request.is_write and request.succeeded and request.manager:
            self._note_shared(request)
            if request.verb in ("update", "patch") and request.object.name:
                obj = request.object
                self._matched((obj.api_group, obj.resource, obj.namespace, obj.name)).requested(request)
        if request.version_conflict or request.apply_conflict:  # a failed write, on the timeline of a watch finding
            found = self._open.get(
                (request.object.api_group, request.object.resource, request.object.namespace, request.object.name)
            )
            if found is not None:
                self.watch.note_conflict(found.id, request.time, request.manager or request.user)
        return changes

    def _note_shared(self, request: Request) -> None:
        """Tell the watch engine of a field manager that more than one user writes an object as.

        That is the evidence a fight of one manager needs (`rules.FightRule`); told once the watch has seen the object
        (its uid).
        """
        obj = request.object
        key = (obj.api_group, obj.resource, obj.namespace, obj.name)
        writer = (request.manager, obj.subresource)  # (as a managedFields entry keys its writer)
        if len(self.requests.users(key).get(writer, ())) < 2:
            return
        seen = self._seen.get(key)
        if seen is not None and seen[1].uid:
            self.watch.note_shared(seen[1].uid, *writer)
        else:
            self._shared_pending.setdefault(key, set()).add(writer)
            if len(self._shared_pending) > MAX_SEEN:
                del self._shared_pending[next(iter(self._shared_pending))]

    def _matched(self, key: ObjectKey) -> _Writes:
        found = self._writes.pop(key, None)
        if found is None:
            found = _Writes()
        self._writes[key] = found  # (most recently written last: the oldest go first)
        if len(self._writes) > MAX_MATCHED:
            del self._writes[next(iter(self._writes))]
        return found

    def advance(self, now: float) -> list[FindingChange]:
        return [self._told(c) for c in self.watch.advance(now)] + [self._linked(c) for c in self.requests.advance(now)]

    def active(self) -> list[Finding]:
        return [self.enrich(f) for f in self.watch.active()] + [self.named(f) for f in self.requests.active()]

    def resolved(self) -> list[Finding]:
        return list(self._resolved) + [self.named(f) for f in self.requests.resolved()]

    def findings(self) -> list[Finding]:
        """Active, then resolved."""
        return self.active() + self.resolved()

    def named(self, finding: Finding) -> Finding:
        """Name a finding over requests with what the watch saw of its object.

        Its object's kind, apiVersion and uid, where the watch saw it, and, for a conflict storm, a link to the active
        finding on the object's controller it follows from.
        """
        ref = finding.object
        key = self.key(ref)
        seen = self._seen.get(key)
        if seen is not None and not ref.kind:
            watched = seen[1]
            named = replace(ref, kind=watched.kind, api_version=watched.api_version, uid=watched.uid, api_group=None)
            finding = replace(finding, object=named)
        if finding.type is not FindingType.CONFLICT_STORM or finding.related is not None:
            return finding
        here = self._open.get(key)
        owner = self._owners.get(key)
        upstream = self._open.get(owner) if owner is not None else None
        if here is not None and here.type is FindingType.FIGHT:  # (its failed half)
            upstream, what = here, f"the fight on the same object ({here.object.display()})"
        elif upstream is not None:
            what = f"the {upstream.type.label} on its controller {upstream.object.display()}"
        else:
            return finding
        return replace(
            finding,
            related=upstream.id,
            summary=f"{finding.summary}; it follows from {what} (finding {upstream.id})",
            hint=f"These conflicts follow from {what}: stop that {upstream.type.label} and they stop with it. "
            f"{upstream.hint}",
        )

    def _linked(self, change: FindingChange) -> FindingChange:
        named = self.named(change.finding)
        return change if named is change.finding else replace(change, finding=named)

    def enrich(self, finding: Finding) -> Finding:
        """Add to a watch finding what requests tell of its object.

        Clients, the users behind its writers, conflicts. Unchanged when no request to it was seen.
        """
        key = self.key(finding.object)
        clients = self.requests.clients(key)
        if not clients:
            return finding
        by_writer = self.requests.users(key)
        matched = self._writes.get(key)
        if matched is not None and any(c.writer.manager is None for c in finding.writers):
            finding = _named_unattributed(finding, matched.named())
        named = {c.writer.manager for c in finding.writers if c.writer.manager is not None}
        writers = tuple(_with_users(c, clients, named, by_writer) for c in finding.writers)
        conflicts = sum(c.conflicts for c in clients)
        summary, hint = finding.summary, finding.hint
        shared = [(c.writer.manager, c.users) for c in writers if c.writer.manager is not None and len(c.users) > 1]
        for manager, users in shared:
            summary += f"; {len(users)} users write as {manager!r}: {', '.join(users)}"
        if shared and finding.type is FindingType.FIGHT and len(named) == 1:
            hint = (
                f"The audit events name the writers the watch cannot tell apart: {', '.join(shared[0][1])} all write "
                f"as field manager {shared[0][0]!r}. Give each controller a field manager of its own "
                "(controller-runtime `client.FieldOwner`, client-go `FieldManager`), then decide which owns the fields."
            )
        if conflicts:
            losers = ", ".join(sorted({_loser(c, clients) for c in clients if c.conflicts}))
            summary += f"; {conflicts} of their writes failed with 409 Conflict ({losers})"
        return replace(
            finding,
            object=replace(finding.object, resource=key[1]),
            writers=writers,
            clients=clients,
            conflicts=conflicts,
            summary=summary,
            hint=hint,
        )

    def _told(self, change: FindingChange) -> FindingChange:
        """Note a change of a watch finding and tell it what requests know.

        The change comes from an event or the clock; noted are a fight's fields and the findings open by object.
        """
        finding = change.finding
        key = self.key(finding.object)
        if finding.type is FindingType.FIGHT:
            self._saw(key, finding.fields, finding.object)
        if change.kind is ChangeKind.RESOLVED:
            if (known := self._open.get(key)) is not None and known.id == finding.id:
                del self._open[key]
        else:
            self._open[key] = finding
        enriched = self.enrich(finding)
        if change.kind is ChangeKind.RESOLVED:
            self._resolved.append(enriched)
        return replace(change, finding=enriched)

    def _saw(self, key: ObjectKey, fields: tuple[str, ...], ref: ObjectRef) -> None:
        known = self._seen.pop(key, None)
        self._seen[key] = (tuple(sorted(set(fields) | set(known[0] if known else ()))), ref)
        if len(self._seen) > MAX_SEEN:
            del self._seen[next(iter(self._seen))]


class _Writes:
    """One object's recent successful write requests and watch writes, to be matched one to one by time (`named`)."""

    __slots__ = ("requests", "writes")

    def __init__(self) -> None:
        self.requests: deque[tuple[float, Writer]] = deque(maxlen=PENDING)
        # (time, writers, managers that lost a field in it): no writers for an unattributed one
        self.writes: deque[tuple[float, tuple[Writer, ...], frozenset[str]]] = deque(maxlen=PENDING)

    def requested(self, request: Request) -> None:
        """Keep a successful write request (an update: see `_named_unattributed`)."""
        self.requests.append((request.time, Writer(request.manager, "Update", request.object.subresource)))

    def watched(self, at: float, write: Write) -> None:
        """Keep a watch write of the object, with its writers (none when the watch could not attribute it).

        And the managers that lost a field in it: not its writer (a manager removing its own field hands nothing over).
        """
        writers = write.writers
        losers = frozenset(h.before.manager for h in write.handovers if h.before is not None and h.before.manager)
        self.writes.append((at, () if writers[0].manager is None else tuple(writers), losers))

    def named(self) -> dict[Writer, int]:
        """Return the writers the requests name for the unattributed writes, with how many each.

        Each write is matched to the closest request within MATCH_SECONDS not matched before (in either order: a
        request's audit event can be logged after the watch delivered its write): first the attributed writes, each
        to a request of its own writer, then the unattributed ones, to anyone's but a manager that lost a field in it.
        """
        used: set[int] = set()
        for at, writers, _ in self.writes:
            if writers:
                self._closest(at, used, writers, frozenset())
        named: dict[Writer, int] = {}
        for at, writers, losers in self.writes:
            if not writers and (found := self._closest(at, used, None, losers)) is not None:
                named[found] = named.get(found, 0) + 1
        return named

    def _closest(
        self, at: float, used: set[int], writers: tuple[Writer, ...] | None, losers: frozenset[str]
    ) -> Writer | None:
        """Take the closest request not used yet: of one of `writers`; for None, of anyone but `losers`."""
        best = None
        for i, (time, writer) in enumerate(self.requests):
            gap = abs(time - at)
            fits = _same(writer, writers) if writers is not None else writer.manager not in losers
            if i not in used and gap <= MATCH_SECONDS and fits and (best is None or gap < best[0]):
                best = (gap, i, writer)
        if best is None:
            return None
        used.add(best[1])
        return best[2]


def _same(writer: Writer, writers: tuple[Writer, ...]) -> bool:
    return any(writer.manager == w.manager and writer.subresource == w.subresource for w in writers)


def _named_unattributed(finding: Finding, named: dict[Writer, int]) -> Finding:
    """Show a finding's unattributed writer as the writer the audit events name for those writes, where they name one.

    Its writes were updates (a write that applies stamps its applier's entry), to the subresource the requests went
    to; a writer of the finding with that manager and subresource is the same writer: their writes are added up."""
    unattributed = next((c for c in finding.writers if c.writer.manager is None), None)
    if unattributed is None or not named:
        return finding
    found, count = max(named.items(), key=lambda item: (item[1], item[0].manager or ""))
    if count < DOMINANT * sum(named.values()):
        return finding  # (several writers: which of them made which write is not told)
    same = next(
        (c for c in finding.writers if c.writer.manager == found.manager and c.writer.subresource == found.subresource),
        None,
    )
    if same is not None:
        merged = replace(
            same,
            writes=same.writes + unattributed.writes,
            fields=tuple(sorted({*same.fields, *unattributed.fields})),
            named_from="audit",
        )
        writers = tuple(merged if c is same else c for c in finding.writers if c is not unattributed)
    else:
        writers = tuple(
            replace(c, writer=found, named_from="audit") if c is unattributed else c for c in finding.writers
        )
    timeline = finding.timeline
    if timeline is not None:  # (its lane too)
        timeline = replace(timeline, lanes=tuple(found if w.manager is None else w for w in timeline.lanes))
    return diagnosis.describe(replace(finding, writers=writers, timeline=timeline))


def _contested_in(
    seen: dict[ObjectKey, tuple[tuple[str, ...], ObjectRef]],
) -> Callable[[ObjectKey], tuple[str, ...] | None]:
    """Return what the watch knows of an object (`request_engine.WatchView`).

    The fields fought over there, () for none, None when the watch did not see it written.
    """

    def contested(key: ObjectKey) -> tuple[str, ...] | None:
        found = seen.get(key)
        return None if found is None else found[0]

    return contested


def _controller(event: ObjectEvent, key: ObjectKey, resource: Callable[[ObjectRef], str]) -> ObjectKey | None:
    """Return the key of an object's controller (`events.controller`), or None."""
    owner = controller(event)
    if owner is None:
        return None
    ref = ObjectRef(
        str(owner.get("apiVersion", "")), str(owner.get("kind", "")), key[2] or None, str(owner.get("name", "")), ""
    )
    return (ref.group, resource(ref), key[2], ref.name)


def _loser(client: Client, clients: tuple[Client, ...]) -> str:
    """Name a client whose writes failed, by its manager.

    With its user where others write as that manager too
    (`kube-controller-manager as system:serviceaccount:kube-system:deployment-controller`).
    """
    shared = any(c.manager == client.manager and c.user != client.user for c in clients)
    return f"{client.manager} as {client.user}" if shared else client.manager


def _with_users(
    count: WriterCount,
    clients: tuple[Client, ...],
    named: set[str],
    users: dict[tuple[str, str], frozenset[str]],
) -> WriterCount:
    """Return a writer with the users behind it.

    Those that wrote under its manager to its subresource (or to the object itself); for the unattributed writer, those
    that wrote under a manager the finding names nowhere.
    """
    writer = count.writer
    if writer.manager is None:  # the writes the watch could not attribute: clients under a manager it never names
        found = {c.user for c in clients if c.writes and c.manager not in named}
    else:
        found = set(users.get((writer.manager, writer.subresource), ()))
    return replace(count, users=tuple(sorted(found))) if found else count


__all__ = ["Joined", "guessed_resource"]
