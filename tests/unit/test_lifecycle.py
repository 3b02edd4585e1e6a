"""Finding lifecycle: open, update, resolve after the quiet period, reopen; deletion; determinism; bounds (on both
attribution implementations)."""

from __future__ import annotations

import pytest

from tests.unit.captures import IMPLEMENTATIONS, again, analyse, events
from tests.unit.captures import event as make_event
from watcher.config import Config, DetectionSettings, parse_config
from watcher.detection.attribution import Decoder
from watcher.detection.engine import Engine
from watcher.detection.events import ObjectEvent, event_object
from watcher.model import ChangeKind, FindingState
from watcher.rendering.output import finding_json
from watcher.sources.capture import event_time

pytestmark = pytest.mark.parametrize("implementation", IMPLEMENTATIONS)


def _settings(**detection: object) -> DetectionSettings:
    return parse_config({"detection": detection}, source="test").detection


def _replay(engine: Engine, name: str) -> list[ChangeKind]:
    kinds = []
    for event in events(name, engine.decode):
        kinds += [c.kind for c in engine.process(event)]
    return kinds


def test_a_fight_opens_once_and_updates_as_it_goes_on(implementation: str) -> None:
    kinds = _replay(Engine(Config().detection, attribution=implementation), "fight-three-writers")
    assert kinds[0] is ChangeKind.OPENED
    assert kinds.count(ChangeKind.OPENED) == 1
    assert ChangeKind.UPDATED in kinds
    assert ChangeKind.RESOLVED not in kinds


def test_resolves_after_the_default_quiet_period_of_15_minutes(implementation: str) -> None:
    engine = Engine(Config().detection, attribution=implementation)
    _replay(engine, "fight-data")
    (active,) = engine.active()
    assert engine.advance(active.last_seen + 899) == []
    (change,) = engine.advance(active.last_seen + 900)
    assert change.kind is ChangeKind.RESOLVED
    assert change.finding.state is FindingState.RESOLVED
    assert change.finding.resolved_at == active.last_seen + 900
    assert engine.active() == []
    assert [f.id for f in engine.resolved()] == [active.id]


def test_the_quiet_period_grows_with_a_slow_flip_period(implementation: str) -> None:
    engine = Engine(_settings(resolve={"after": "30s", "flip_periods": 3}), attribution=implementation)
    _replay(engine, "fight-slow")
    (active,) = engine.active()
    assert active.flip_period is not None
    assert active.flip_period >= 45
    quiet = 3 * active.flip_period
    assert engine.advance(active.last_seen + quiet - 1) == []
    assert [c.kind for c in engine.advance(active.last_seen + quiet)] == [ChangeKind.RESOLVED]


def test_a_hot_loop_resolves_when_the_writes_stop(implementation: str) -> None:
    engine = Engine(_settings(resolve={"after": "2m"}), attribution=implementation)
    _replay(engine, "hot-loop-timestamp")
    (active,) = engine.active()
    assert [c.kind for c in engine.advance(active.last_seen + 120)] == [ChangeKind.RESOLVED]


def test_a_resolved_fight_that_starts_again_is_a_new_finding(implementation: str) -> None:
    engine = Engine(_settings(resolve={"after": "10s", "flip_periods": 1}), attribution=implementation)
    captured = [e for e in events("fight-update-vs-update-label", engine.decode) if e.name == "settings"]
    for event in captured:
        engine.process(event)
    (first,) = engine.active()
    engine.advance(first.last_seen + 60)
    assert engine.active() == []
    # The same writes again, an hour later: new resourceVersions, same object.
    offset = 3600.0
    for n, event in enumerate(captured[2:]):  # A takes the label back from B, and so on
        obj = event_object(event)
        obj = dict(obj, metadata=dict(obj["metadata"], resourceVersion=f"9{n:04d}"))
        engine.process(make_event(engine.decode, event.type, obj, (event.observed_at or 0) + offset))
    (second,) = engine.active()
    assert second.id != first.id
    assert second.first_seen > first.last_seen


def test_deleting_the_object_resolves_its_findings_and_forgets_it(implementation: str) -> None:
    engine = Engine(Config().detection, attribution=implementation)
    captured = list(events("fight-data", engine.decode))
    for event in captured:
        engine.process(event)
    (active,) = engine.active()
    last = captured[-1]
    target = next(e for e in reversed(captured) if e.uid == active.object.uid)
    before = engine.tracked_objects
    changes = engine.process(again(engine.decode, target, event_type="DELETED", at=(last.observed_at or 0) + 1))
    assert [c.kind for c in changes] == [ChangeKind.RESOLVED]
    assert engine.tracked_objects == before - 1
    assert not engine.tracks(target)


def test_replay_is_deterministic(implementation: str) -> None:
    first, _ = analyse("fight-apply-vs-update-replicas", engine=implementation)
    second, _ = analyse("fight-apply-vs-update-replicas", engine=implementation)
    assert [finding_json(f) for f in first] == [finding_json(f) for f in second]


def test_history_per_object_is_bounded(implementation: str) -> None:
    engine = Engine(_settings(history=4), attribution=implementation)
    _replay(engine, "fight-three-writers")
    for state in engine._objects.values():
        assert state.history is None or state.history.size() <= 4


@pytest.mark.parametrize(
    ("rule", "expect_found"),
    [
        ({"namespace": "fight-data"}, False),
        ({"kind": "configmap"}, False),
        ({"group": "", "kind": "ConfigMap", "name": "service-*"}, False),
        ({"name": "other-*"}, True),
        ({"fields": ["data."]}, False),
        ({"fields": ["metadata.labels"]}, True),
        ({"manager": "config-injector", "fields": ["data.endpoint"]}, False),
    ],
)
def test_ignore_rules(rule: dict[str, object], expect_found: bool, implementation: str) -> None:
    findings, _ = analyse("fight-data", _settings(ignore=[rule]), engine=implementation)
    assert bool(findings) is expect_found


def test_leases_are_ignored_by_default_and_analysed_when_asked(implementation: str) -> None:
    _, engine = analyse("benign-leader-election", engine=implementation)
    assert engine.stats.ignored_events > 0
    _, everything = analyse("benign-leader-election", _settings(default_ignores=False), engine=implementation)
    assert everything.stats.ignored_events == 0


def test_idle_objects_give_up_rates_then_history(implementation: str) -> None:
    engine = Engine(Config().detection, attribution=implementation)
    _replay(engine, "fight-data")
    (state,) = [s for s in engine._objects.values() if s.fight is not None and s.fight.ref.name == "service-endpoints"]
    assert state.rates is not None
    assert state.history
    engine.advance(engine.now + 3 * 60)  # > two time constants
    assert state.rates is None
    assert state.history  # the fight is still open
    engine.advance(engine.now + 2 * 3600)  # the fight resolves, the window passes
    assert state.history is None
    assert engine.active() == []


def _relisted(decode: Decoder, event: ObjectEvent, at: float) -> ObjectEvent:
    """The object of `event` as a relist after a watch gap returns it: an ADDED event for a known object."""
    return again(decode, event, event_type="ADDED", at=at)


def test_a_relisted_object_is_read_again_not_counted_as_a_write(implementation: str) -> None:
    """A->B seen, B->A missed in a watch gap, the relist shows A again, then A->B: no fight is made up.

    (Were the relist a write, the engine would see A->B, B->A, A->B: a fight that the watch never showed.)
    """
    engine = Engine(Config().detection, attribution=implementation)
    captured = [e for e in events("fight-update-vs-update-label", engine.decode) if e.name == "settings"]
    contested = [e for e in captured if e.name == "settings"]
    for event in captured:
        engine.process(event)
        if event is contested[1]:  # B took the label from A; the next write (A takes it back) is missed
            break
    writes = engine.stats.writes
    at = (contested[2].observed_at or 0) + 0.5
    assert engine.process(_relisted(engine.decode, contested[2], at)) == []  # the relist: A owns the label again
    assert engine.stats.writes == writes
    assert engine.stats.resynced_objects == 1
    assert engine.process(_relisted(engine.decode, contested[2], at + 0.1)) == []  # the same version: a duplicate
    assert engine.stats.resynced_objects == 1
    engine.process(contested[3])  # B takes it from A: the second handover seen, not a fight
    assert engine.active() == []
    assert engine.stats.writes == writes + 1


def test_a_relist_keeps_open_findings_and_raises_none_twice(implementation: str) -> None:
    engine = Engine(Config().detection, attribution=implementation)
    captured = [e for e in events("fight-update-vs-update-label", engine.decode) if e.name == "settings"]
    kinds = _replay(engine, "fight-update-vs-update-label")
    (active,) = engine.active()
    last = captured[-1]
    for event in captured:  # every object listed again, as after 410 Gone
        kinds += [c.kind for c in engine.process(_relisted(engine.decode, event, (last.observed_at or 0) + 1))]
    assert kinds.count(ChangeKind.OPENED) == 1
    assert [f.id for f in engine.active()] == [active.id]


def test_a_hot_loop_has_the_same_id_whichever_write_crossed_the_threshold(implementation: str) -> None:
    """Two replicas receive the same writes at slightly different times, so each one's rate crosses the threshold
    at another write; the finding is named after the streak's first write, so both name it alike."""

    def opened(stretch: float) -> tuple[str, int]:
        engine = Engine(Config().detection, attribution=implementation)
        captured = list(events("hot-loop-timestamp", engine.decode))
        start = event_time(captured[0])
        for event in captured:
            at = start + (event_time(event) - start) * stretch
            for change in engine.process(again(engine.decode, event, at=at)):
                if change.kind is ChangeKind.OPENED and change.finding.type.value == "hot_loop":
                    return change.finding.id, engine.stats.writes
        raise AssertionError("no hot loop")

    (as_recorded, crossed_at), (slower, crossed_later) = opened(1.0), opened(1.5)
    assert crossed_later > crossed_at  # (the slower replica crosses the threshold at a later write)
    assert slower == as_recorded
