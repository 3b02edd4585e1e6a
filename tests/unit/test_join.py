"""The watch and audit events of one recorded run, joined (`detection.join`): a cascade is linked to the fight it
follows from while that fight is active, and not once it has resolved."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.join import Joined
from watcher.detection.request_engine import RequestEngine
from watcher.model import FindingState, FindingType
from watcher.sources.audit import AuditStats, read_audit_log
from watcher.sources.capture import ReadStats, read_captures

FIXTURES = Path(__file__).parents[1] / "fixtures" / "audit" / "v1.20"


def joined_cascade() -> tuple[Joined, list[object]]:
    settings = Config().detection
    watch = Engine(settings)
    joined = Joined(watch, RequestEngine(settings))
    events = list(read_captures([str(FIXTURES / "cascade.watch.jsonl")], watch.decode, stats=ReadStats()))
    requests = list(read_audit_log(str(FIXTURES / "cascade.metadata.jsonl"), stats=AuditStats()))
    for item in sorted([*events, *requests], key=lambda i: i.time or 0.0):  # type: ignore[attr-defined]
        if item in requests:
            joined.process_request(item)  # type: ignore[arg-type]
        else:
            joined.process_event(item)  # type: ignore[arg-type]
    return joined, requests


def test_a_storm_downstream_of_an_active_fight_is_linked_to_it() -> None:
    joined, _ = joined_cascade()
    active = {(f.type, f.object.namespace, f.object.name): f for f in joined.active()}
    fight = active[FindingType.FIGHT, "cascade", "app"]
    storm = active[FindingType.CONFLICT_STORM, "cascade", "app-rendered"]
    assert storm.related == fight.id


def test_once_the_fight_has_resolved_new_conflicts_are_a_storm_of_their_own() -> None:
    joined, requests = joined_cascade()
    last = max(r.time for r in requests)
    changes = joined.advance(last + 7200)  # both the fight and the storm resolve
    assert {(c.finding.type, c.finding.state) for c in changes} >= {
        (FindingType.FIGHT, FindingState.RESOLVED),
        (FindingType.CONFLICT_STORM, FindingState.RESOLVED),
    }
    for request in requests:  # the renderer's conflicts again, two hours later, with no fight upstream
        joined.process_request(replace(request, time=request.time + 7200))
    (storm,) = [f for f in joined.active() if f.type is FindingType.CONFLICT_STORM]
    assert storm.related is None
