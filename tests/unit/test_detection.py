"""The engine on captures recorded from a real kube-apiserver v1.20 while real clients fought (or did not), on both
attribution implementations."""

from __future__ import annotations

import pytest

from tests.expectations import BENIGN, DERIVED, FINDINGS, assert_found
from tests.unit.captures import IMPLEMENTATIONS, analyse, events
from tests.unit.captures import event as make_event
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.events import event_object


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("scenario", sorted(FINDINGS))
def test_finds_exactly_the_injected_fight_or_hot_loop(scenario: str, engine: str) -> None:
    findings, analysis = analyse(scenario, engine=engine)
    assert analysis.implementation == engine
    assert_found(scenario, findings)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("capture", sorted(DERIVED))
def test_finds_the_fight_or_hot_loop_in_captures_derived_for_newer_servers(capture: str, engine: str) -> None:
    findings, _ = analyse(capture, engine=engine)
    found = assert_found(capture, findings)
    assert {c.writer.subresource for c in found.writers} == {"status"}


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_the_writer_of_a_status_loop_is_named_from_its_second_write(engine: str) -> None:
    """hot-loop-status: 150 status writes by one controller that managedFields never show (its entry keeps its
    first write's time). The first is not attributed (the object's status is kept from then on), the rest are."""
    named, analysis = _writes("hot-loop-status", engine)
    assert [managers for _, _, managers in named].count(("widget-status-reconciler",)) == len(named) - 1 >= 140
    assert analysis.stats.unattributed_writes == 1


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_the_controller_managers_ordinary_status_updates_are_named_and_no_finding(engine: str) -> None:
    """benign-status-vs-spec: kube-controller-manager updates the Deployment's and ReplicaSets' status as an
    image is rolled out (its entry's time moves only when its field set does): most of these writes are now named,
    and they make no finding."""
    named, analysis = _writes("benign-status-vs-spec", engine)
    assert analysis.active() + analysis.resolved() == []
    assert [(kind, managers) for kind, _, managers in named].count(("Deployment", ("kube-controller-manager",))) >= 10
    assert analysis.stats.unattributed_writes < analysis.stats.writes // 3


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("scenario", BENIGN)
def test_benign_churn_is_not_flagged(scenario: str, engine: str) -> None:
    findings, analysis = analyse(scenario, engine=engine)
    assert analysis.stats.writes > 0  # the capture does contain writes
    assert findings == []


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_slow_fight_is_one_flip_per_45_seconds_or_more(engine: str) -> None:
    (found,), _ = analyse("fight-slow", engine=engine)
    assert found.flip_period is not None
    assert found.flip_period >= 45


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_three_writer_rotation_counts_each_writer(engine: str) -> None:
    (found,), _ = analyse("fight-three-writers", engine=engine)
    assert all(c.writes >= 2 for c in found.writers)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_fight_is_reported_when_the_third_handover_happens(engine: str) -> None:
    (found,), _ = analyse("fight-update-vs-update-label", engine=engine)
    assert found.handovers >= 3
    assert found.detected_at < found.last_seen  # detected before the capture ended, then updated


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_scale_writes_on_v1_20_are_unattributed(engine: str) -> None:
    _, analysis = analyse("fight-scale-vs-apply", engine=engine)
    assert analysis.stats.unattributed_writes >= 3


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_newer_servers_name_the_scale_subresource_writer(engine: str) -> None:
    """Derived from the real v1.20 capture (see tests/fixtures/captures/README.md)."""
    (found,), analysis = analyse("derived-newer-server-scale-subresource", engine=engine)
    writers = {(c.writer.manager, c.writer.operation, c.writer.subresource) for c in found.writers}
    assert writers == {("kubectl", "Apply", ""), ("kube-controller-manager", "Update", "scale")}
    assert found.fields == ("spec.replicas",)
    assert "scale subresource" in found.hint
    v1_20 = analyse("fight-scale-vs-apply", engine=engine)[1]
    assert analysis.stats.unattributed_writes < v1_20.stats.unattributed_writes


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_every_write_is_reported_to_on_write_with_its_writers(implementation: str) -> None:
    seen, engine = _writes("fight-update-vs-update-label", implementation)
    assert len(seen) == engine.stats.writes
    managers = {m for _, _, writers in seen for m in writers}
    assert {"team-a-operator", "team-b-operator"} <= managers


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("scenario", ["fight-data", "benign-leader-election", "hot-loop-timestamp", "fight-status"])
def test_every_event_has_exactly_one_outcome(scenario: str, implementation: str) -> None:
    """The live watcher's fightwatch_engine_events_total{outcome} adds up to the events processed."""
    engine = Engine(Config().detection, attribution=implementation)
    stream = list(events(scenario, engine.decode))
    for event in stream:
        engine.process(event)
    last = next(e for e in reversed(stream) if engine.tracks(e))  # (not ignored)
    engine.process(last)  # the same version again: a duplicate
    obj = event_object(last)
    relisted = dict(obj, metadata={**obj["metadata"], "resourceVersion": "relisted"})
    engine.process(make_event(engine.decode, "ADDED", relisted, last.observed_at))  # a relist: resynced
    gone = {"metadata": {"name": "gone", "uid": "never-seen"}, "apiVersion": "v1", "kind": "ConfigMap"}
    engine.process(make_event(engine.decode, "DELETED", gone, last.observed_at))  # an untracked deletion
    s = engine.stats
    outcomes = (
        s.writes,
        s.new_objects,
        s.resynced_objects,
        s.duplicate_events,
        s.ignored_events,
        s.deleted_objects,
        s.untracked_deletions,
    )
    assert sum(outcomes) == s.events
    assert s.duplicate_events >= 1
    assert s.untracked_deletions == 1
    assert s.resynced_objects == 1


def _writes(capture: str, implementation: str) -> tuple[list[tuple[str, str, tuple[str | None, ...]]], Engine]:
    """Every write of a capture as `on_write` is told of it (kind, name, managers), and the engine."""
    seen: list[tuple[str, str, tuple[str | None, ...]]] = []
    engine = Engine(
        Config().detection,
        attribution=implementation,
        on_write=lambda ref, writers: seen.append((ref.kind, ref.name, tuple(w.manager for w in writers))),
    )
    for event in events(capture, engine.decode):
        engine.process(event)
    return seen, engine
