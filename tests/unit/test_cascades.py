"""Cascades (`engine.Engine._cause`) and incidents as delivery sees them (`incidents.IncidentBook`), on the capture
`cascade-replicas`, recorded from a real API server with the real kube-controller-manager: a GitOps tool and an
autoscaler fight over spec.replicas of 2 Deployments; after each flip the Deployment controller rescales the
Deployment's ReplicaSet and rewrites the Deployment's status, which are hot loops of their own that follow from the
fights."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest

from tests.unit.captures import IMPLEMENTATIONS, events
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.events import ObjectEvent
from watcher.detection.incidents import IncidentBook, assign, group, incident_id
from watcher.model import ChangeKind, Finding, FindingChange, FindingState, FindingType

pytestmark = pytest.mark.parametrize("implementation", IMPLEMENTATIONS)


def _run(engine: Engine, stream: Iterable[ObjectEvent]) -> list[FindingChange]:
    return [change for event in stream for change in engine.process(event)]


def _links(findings: Iterable[Finding]) -> dict[tuple[str, str, str], tuple[str, str, str] | None]:
    """(type, kind, name) of each finding -> that of the finding it follows from."""
    by_id = {f.id: f for f in findings}

    def name(f: Finding) -> tuple[str, str, str]:
        # (a ReplicaSet's name ends in its pod template's hash, which differs between releases)
        kind, named = f.object.kind or "", f.object.name
        return (f.type.value, kind, named.rsplit("-", 1)[0] + "-*" if kind == "ReplicaSet" else named)

    return {name(f): None if f.related is None else name(by_id[f.related]) for f in by_id.values()}


EXPECTED = {
    ("fight", "Deployment", "web"): None,
    ("fight", "Deployment", "api"): None,
    # the Deployment controller's status writes after each flip, on the same object
    ("hot_loop", "Deployment", "web"): ("fight", "Deployment", "web"),
    ("hot_loop", "Deployment", "api"): ("fight", "Deployment", "api"),
    # the ReplicaSets it rescales after each flip: their controller is the Deployment fought over
    ("hot_loop", "ReplicaSet", "web-*"): ("fight", "Deployment", "web"),
    ("hot_loop", "ReplicaSet", "api-*"): ("fight", "Deployment", "api"),
}


def test_the_churn_a_fight_causes_is_linked_to_it_not_a_root_cause(implementation: str) -> None:
    engine = Engine(Config().detection, attribution=implementation)
    changes = _run(engine, events("cascade-replicas", engine.decode))
    active = engine.active()
    assert _links(active) == EXPECTED
    fights = [f for f in active if f.type is FindingType.FIGHT]
    for finding in active:
        if finding.related is not None:
            assert "it follows from the fight on " in finding.summary
            assert finding.hint.startswith("This follows from the fight on ")
            assert not [c for c in changes if c.finding.id == finding.id and c.finding.related is None]
    # one incident: the fight on both Deployments, with the four hot loops as its consequences
    (incident,) = group(active)
    assert incident.type is FindingType.FIGHT
    assert set(incident.findings) == {f.id for f in fights}
    assert set(incident.consequences) == {f.id for f in active} - {f.id for f in fights}
    assert incident.objects == 2
    assert "fight over spec.replicas on 2 Deployments in cascade-replicas" in incident.summary
    assert set(assign(active).values()) == {incident.id}


def test_the_link_is_the_same_whichever_finding_opens_first(implementation: str) -> None:
    """A replica that saw the ReplicaSets' writes first: their hot loops open as root causes, then are linked (an
    update each) when the fight on their Deployment opens."""
    in_order = Engine(Config().detection, attribution=implementation)
    _run(in_order, events("cascade-replicas", in_order.decode))
    engine = Engine(Config().detection, attribution=implementation)
    stream = list(events("cascade-replicas", engine.decode))
    changes = _run(engine, [e for e in stream if e.kind == "ReplicaSet"])
    assert {c.finding.object.kind for c in changes if c.kind is ChangeKind.OPENED} == {"ReplicaSet"}
    assert all(c.finding.related is None for c in changes)
    changes = _run(engine, [e for e in stream if e.kind != "ReplicaSet"])
    relinked = [c for c in changes if c.kind is ChangeKind.UPDATED and c.finding.object.kind == "ReplicaSet"]
    assert {c.finding.object.name.rsplit("-", 1)[0] for c in relinked if c.finding.related is not None} == {
        "web",
        "api",
    }
    assert _links(engine.active()) == EXPECTED
    assert {f.id: f.related for f in engine.active()} == {f.id: f.related for f in in_order.active()}


def test_a_resolved_cause_unlinks_what_followed_from_it(implementation: str) -> None:
    engine = Engine(Config().detection, attribution=implementation)
    _run(engine, events("cascade-replicas", engine.decode))
    (web,) = [f for f in engine.active() if f.type is FindingType.FIGHT and f.object.name == "web"]
    status = next(f for f in engine.active() if f.type is FindingType.HOT_LOOP and f.object.name == "web")
    # the fight ends (its object is deleted): the status hot loop on it goes with it; elsewhere nothing changes
    changes = engine.process(_deleted(engine, "Deployment", "web"))
    assert {(c.kind, c.finding.id) for c in changes} >= {
        (ChangeKind.RESOLVED, web.id),
        (ChangeKind.RESOLVED, status.id),
    }
    # the ReplicaSet goes on (until its own quiet period), now a root cause of its own: told as an update
    (replicaset,) = [c for c in changes if c.finding.object.kind == "ReplicaSet"]
    assert replicaset.kind is ChangeKind.UPDATED
    assert replicaset.finding.related is None
    assert "follows from" not in replicaset.finding.summary
    assert _links(engine.active()) == {k: v for k, v in EXPECTED.items() if k[2] != "web" or k[1] == "ReplicaSet"} | {
        ("hot_loop", "ReplicaSet", "web-*"): None
    }


def test_two_objects_that_name_each_other_link_one_way_not_in_a_loop(implementation: str) -> None:
    """Each Deployment's spec names the other (a `peerRef`, as some operators' resources do): the fight opening second
    follows from the first, and the first stays a root cause, so the chain ends and the incident has one root."""
    engine = Engine(Config().detection, attribution=implementation)
    peer = {"web": "api", "api": "web"}
    stream = []
    for recorded in events("cascade-replicas", engine.decode):
        event: ObjectEvent | None = recorded
        if recorded.kind == "Deployment" and recorded.name in peer:
            ref = b'{"apiVersion":"apps/v1","kind":"Deployment","name":"%s"}' % peer[recorded.name].encode()
            data = recorded.data.replace(b'"spec":{', b'"spec":{"peerRef":' + ref + b",", 1)
            assert data != recorded.data
            event = engine.decode(data, observed_at=recorded.observed_at)
        assert event is not None
        stream.append(event)
    _run(engine, stream)
    active = engine.active()
    by_id = {f.id: f for f in active}
    fights = {f.object.name: f for f in active if f.type is FindingType.FIGHT}
    assert set(fights) == {"web", "api"}
    # exactly one fight follows from the other
    assert sorted(f.related is None for f in fights.values()) == [False, True]
    for finding in active:  # every chain of causes ends at a root
        seen, link = {finding.id}, finding.related
        while link is not None:
            assert link not in seen
            seen.add(link)
            link = by_id[link].related
    (incident,) = group(active)
    assert set(incident.findings) | set(incident.consequences) == set(by_id)


def _deleted(engine: Engine, kind: str, name: str) -> ObjectEvent:
    last = None
    for event in events("cascade-replicas", engine.decode):
        if event.kind == kind and event.name == name:
            last = event
    assert last is not None
    data = last.data.replace(b'"type":"MODIFIED"', b'"type":"DELETED"', 1)
    assert data != last.data
    deleted = engine.decode(data, observed_at=(last.observed_at or 0) + 1)
    assert deleted is not None
    return deleted


def test_the_incident_book_opens_grows_shrinks_and_resolves_incidents(implementation: str) -> None:
    engine = Engine(Config().detection, attribution=implementation)
    findings: list[FindingChange] = []
    for name in ("incident-replicas", "fight-data"):
        findings += _run(engine, events(name, engine.decode))
    book = IncidentBook()
    told = [change for step in findings for change in book.apply([step])]
    by_incident: dict[str, list[ChangeKind]] = {}
    for change in told:
        by_incident.setdefault(change.incident.id, []).append(change.kind)
    assert len(by_incident) == 2  # the 6 Deployments, one incident; the unrelated ConfigMap fight, another
    for kinds in by_incident.values():
        assert kinds[0] is ChangeKind.OPENED  # once, then grows (updates)
        assert ChangeKind.OPENED not in kinds[1:]
    big = max(book.active(), key=lambda i: i.objects)
    assert big.objects == 6
    opened = next(c for c in told if c.incident.id == big.id)
    assert opened.incident.objects == 1  # it opened with its first object and grew
    assert [c.incident.objects for c in told if c.incident.id == big.id][-1] == 6

    # shrinks as findings resolve, resolves with the last one; the other incident is left alone
    members = sorted((f for f in engine.active() if incident_id(f) == big.id), key=lambda f: f.object.name)
    shrink = book.apply([FindingChange(ChangeKind.RESOLVED, _resolved(members[0]))])
    assert [(c.kind, c.incident.objects, len(c.findings)) for c in shrink] == [(ChangeKind.UPDATED, 5, 5)]
    last = book.apply([FindingChange(ChangeKind.RESOLVED, _resolved(f)) for f in members[1:]])
    assert [(c.kind, c.incident.id, c.incident.state, c.incident.objects) for c in last] == [
        (ChangeKind.RESOLVED, big.id, FindingState.RESOLVED, 6)  # told as a whole: every object it spanned
    ]
    assert [i.objects for i in book.active()] == [1]

    # a new leader's catch-up: each incident once, marked as catch-up
    book.reset()
    again = book.apply([FindingChange(ChangeKind.OPENED, f, catch_up=True) for f in engine.active()])
    assert len(again) == 2
    assert all(c.catch_up and c.kind is ChangeKind.OPENED for c in again)


def _resolved(finding: Finding) -> Finding:
    return replace(finding, state=FindingState.RESOLVED, resolved_at=finding.last_seen + 60)
