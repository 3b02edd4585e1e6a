"""Bounded memory: idle objects are let go, a hard cap lets the least recently written go first, objects with an
open finding stay; finding ids do not depend on when a replica received the events. On both attribution
implementations (the native one keeps its own state per object: it must let go of the same objects)."""

from __future__ import annotations

import random

import pytest

from tests.unit.captures import CAPTURES, IMPLEMENTATIONS, again, events
from watcher.config import ConfigError, parse_config
from watcher.detection.attribution import Decoder
from watcher.detection.engine import Engine
from watcher.detection.events import ObjectEvent
from watcher.detection.native import NativeAttribution
from watcher.model import ChangeKind
from watcher.sources.capture import ReadStats, read_captures

# Every recorded capture but the derived ones (their objects are those of the captures they derive from), merged
# by time.
RECORDED = sorted(str(p) for p in CAPTURES.glob("*.jsonl"))

pytestmark = pytest.mark.parametrize("implementation", IMPLEMENTATIONS)


def _engine(implementation: str, **detection: object) -> Engine:
    return Engine(parse_config({"detection": detection}, source="test").detection, attribution=implementation)


def _merged(decode: Decoder) -> list[ObjectEvent]:
    """Every object the engine tracks (Leases, ignored by default, left out)."""
    return [e for e in read_captures(RECORDED, decode, stats=ReadStats()) if e.kind != "Lease"]


def _holds(engine: Engine) -> int:
    """How many objects the engine holds, checked against the attribution's own state where it keeps one."""
    attribution = engine._attribution
    if isinstance(attribution, NativeAttribution):
        assert attribution.tracked() == engine.tracked_objects
    return engine.tracked_objects


def test_idle_objects_are_let_go_but_not_while_a_finding_is_open(implementation: str) -> None:
    engine = _engine(implementation, resolve={"after": "2h"})
    for event in _merged(engine.decode):
        engine.process(event)
    active = engine.active()
    assert active
    assert _holds(engine) > len({f.object.uid for f in active})
    engine.advance(engine.now + 3600 + 60)  # the default idle_after is the fight window (1 h); findings are open
    assert _holds(engine) == len({f.object.uid for f in active})
    assert engine.stats.evicted_idle > 0
    assert {f.id for f in engine.active()} == {f.id for f in active}  # nothing was closed to let an object go
    engine.advance(engine.now + 3600)  # the findings resolve, then their objects idle for an hour
    engine.advance(engine.now + 3600 + 60)
    assert engine.active() == []
    assert _holds(engine) == 0


def test_idle_after_is_configurable_and_never_shorter_than_the_fight_window(implementation: str) -> None:
    engine = _engine(implementation, idle_after="3h")
    for event in events("benign-normal-rate", engine.decode):
        engine.process(event)
    engine.advance(engine.now + 2 * 3600)
    assert _holds(engine) > 0
    engine.advance(engine.now + 3600 + 60)
    assert _holds(engine) == 0
    with pytest.raises(ConfigError, match="idle_after"):
        _engine(implementation, idle_after="10m")


def test_objects_kept_past_the_window_give_up_their_handovers(implementation: str) -> None:
    """With `idle_after` longer than the fight window, an object idle for the window stays tracked but its
    handovers go (none can count any more); one with an open fight keeps them."""
    engine = _engine(implementation, idle_after="3h", resolve={"after": "2h"})
    for name in ("benign-different-fields", "fight-update-vs-update-label"):
        for event in events(name, engine.decode):
            engine.process(event)
    logged = {key: s.history for key, s in engine._objects.items()}
    assert any(h is not None for h in logged.values())
    fighting = {key for key, s in engine._objects.items() if s.fight is not None}
    assert fighting
    engine.advance(engine.now + 3600 + 60)
    assert engine._objects.keys() == logged.keys()  # still tracked
    assert _holds(engine) == len(logged)
    for key, state in engine._objects.items():
        assert (state.history is not None) == (key in fighting and logged[key] is not None)


def test_an_object_let_go_is_a_new_baseline_when_it_is_written_again(implementation: str) -> None:
    engine = _engine(implementation)
    captured = list(events("fight-update-vs-update-label", engine.decode, release="v1.20"))  # (its order of objects)
    engine.process(captured[0])
    engine.process(captured[1])
    writes = engine.stats.writes
    engine.advance((captured[1].observed_at or 0) + 2 * 3600)
    assert _holds(engine) == 0
    later = [again(engine.decode, e, at=(e.observed_at or 0) + 2 * 3600) for e in captured[2:]]
    engine.process(later[0])
    assert engine.stats.writes == writes  # a baseline: what changed while it was let go is unknown
    assert engine.stats.new_objects == 3


def test_an_object_idle_until_its_own_next_event_is_a_new_baseline(implementation: str) -> None:
    """No other event moved the clock: the object's own next event lets it go (idle) and takes it anew."""
    engine = _engine(implementation)
    captured = list(events("fight-update-vs-update-label", engine.decode, release="v1.20"))  # (its order of objects)
    engine.process(captured[0])
    engine.process(captured[1])
    writes, new = engine.stats.writes, engine.stats.new_objects
    late = again(engine.decode, captured[2], at=(captured[2].observed_at or 0) + 2 * 3600)
    assert engine.process(late) == []
    assert engine.stats.writes == writes
    assert engine.stats.new_objects == new + 1
    assert engine.stats.evicted_idle >= 1
    assert _holds(engine) == 1
    assert engine.tracks(late)


def test_the_cap_lets_the_least_recently_written_go_first_and_keeps_objects_with_open_findings(
    implementation: str,
) -> None:
    cap = 32  # (more than the findings open at once, which are never let go)
    # (hot-loop-status was recorded two days after the others: no object is let go for being idle here, so that
    # only the cap lets objects go)
    engine = _engine(implementation, max_objects=cap, idle_after="72h")
    merged = _merged(engine.decode)
    objects = len({e.uid for e in merged})
    assert objects > 2 * cap
    touched: list[str] = []  # uids, most recently written (or first seen) last
    latest: dict[str, ObjectEvent] = {}  # the last event of each object, by uid (`tracks` takes an event)
    for event in merged:
        engine.process(event)
        uid = event.uid
        latest[uid] = event
        if event.type == "DELETED":
            touched = [u for u in touched if u != uid]
        elif event.type == "MODIFIED" or uid not in touched:
            touched = [u for u in touched if u != uid] + [uid]
        pinned = {f.object.uid for f in engine.active()}
        assert _holds(engine) <= cap + len(pinned)
        assert all(engine.tracks(latest[u]) for u in pinned)
        assert engine.tracks(latest[touched[-1]]) or event.type != "MODIFIED"
    assert engine.stats.evicted_capacity > 0
    assert engine.stats.evicted_idle == 0
    recent = [u for u in touched if engine.tracks(latest[u])]
    assert set(touched[-cap // 2 :]) <= set(recent)  # the most recently written are kept


def test_a_cap_above_the_number_of_objects_changes_nothing(implementation: str) -> None:
    bounded, unbounded = _engine(implementation, max_objects=1000), _engine(implementation, max_objects=None)
    for engine in (bounded, unbounded):
        for event in _merged(engine.decode):
            engine.process(event)
    assert [f.id for f in bounded.active()] == [f.id for f in unbounded.active()]
    assert bounded.stats.evicted_capacity == 0
    assert _holds(bounded) == _holds(unbounded)


def test_finding_ids_are_the_same_on_replicas_that_received_the_events_at_other_times(implementation: str) -> None:
    """Two replicas watch the same writes; each stamps its own receive times. The ids (which name the findings'
    Events) must agree, or a failover would start another Event for the same fight."""
    rng = random.Random(6)  # noqa: S311 - jitter of receive times, not cryptography
    here, there = _engine(implementation), _engine(implementation)
    opened_here, opened_there = [], []
    for event in _merged(here.decode):
        late = again(there.decode, event, at=(event.observed_at or 0) + 0.25 + rng.uniform(0, 0.05))
        opened_here += [c.finding.id for c in here.process(event) if c.kind is ChangeKind.OPENED]
        opened_there += [c.finding.id for c in there.process(late) if c.kind is ChangeKind.OPENED]
    assert len(opened_here) >= 10
    assert opened_here == opened_there
