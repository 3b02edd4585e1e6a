"""The engine on captures recorded from a real kube-apiserver v1.20 while real clients fought (or did not)."""

from __future__ import annotations

import pytest

from tests.expectations import BENIGN, FINDINGS, assert_found
from tests.unit.captures import analyse, events
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.model import EventType, WatchEvent


@pytest.mark.parametrize("scenario", sorted(FINDINGS))
def test_finds_exactly_the_injected_fight_or_hot_loop(scenario: str) -> None:
    findings, _ = analyse(scenario)
    assert_found(scenario, findings)


@pytest.mark.parametrize("scenario", BENIGN)
def test_benign_churn_is_not_flagged(scenario: str) -> None:
    findings, engine = analyse(scenario)
    assert engine.stats.writes > 0  # the capture does contain writes
    assert findings == []


def test_slow_fight_is_one_flip_per_45_seconds_or_more() -> None:
    (found,), _ = analyse("fight-slow")
    assert found.flip_period is not None
    assert found.flip_period >= 45


def test_three_writer_rotation_counts_each_writer() -> None:
    (found,), _ = analyse("fight-three-writers")
    assert all(c.writes >= 2 for c in found.writers)


def test_a_fight_is_reported_when_the_third_handover_happens() -> None:
    (found,), _ = analyse("fight-update-vs-update-label")
    assert found.handovers >= 3
    assert found.detected_at < found.last_seen  # detected before the capture ended, then updated


def test_scale_writes_on_v1_20_are_unattributed() -> None:
    _, engine = analyse("fight-scale-vs-apply")
    assert engine.stats.unattributed_writes >= 3


def test_newer_servers_name_the_scale_subresource_writer() -> None:
    """Derived from the real v1.20 capture (see tests/fixtures/captures/README.md)."""
    (found,), engine = analyse("derived-newer-server-scale-subresource")
    writers = {(c.writer.manager, c.writer.operation, c.writer.subresource) for c in found.writers}
    assert writers == {("kubectl", "Apply", ""), ("kube-controller-manager", "Update", "scale")}
    assert found.fields == ("spec.replicas",)
    assert "scale subresource" in found.hint
    assert engine.stats.unattributed_writes < analyse("fight-scale-vs-apply")[1].stats.unattributed_writes


def test_every_write_is_reported_to_on_write_with_its_writers() -> None:
    seen: list[tuple[str, tuple[str | None, ...]]] = []
    engine = Engine(
        Config().detection, on_write=lambda ref, writers: seen.append((ref.name, tuple(w.manager for w in writers)))
    )
    for event in events("fight-update-vs-update-label"):
        engine.process(event)
    assert len(seen) == engine.stats.writes
    managers = {m for _, writers in seen for m in writers}
    assert {"team-a-operator", "team-b-operator"} <= managers


@pytest.mark.parametrize("scenario", ["fight-data", "benign-leader-election", "hot-loop-timestamp", "fight-status"])
def test_every_event_has_exactly_one_outcome(scenario: str) -> None:
    """The live watcher's fightwatch_engine_events_total{outcome} adds up to the events processed."""
    engine = Engine(Config().detection)
    stream = list(events(scenario))
    for event in stream:
        engine.process(event)
    last = next(e for e in reversed(stream) if engine.tracks(e.object["metadata"]["uid"]))  # (not ignored)
    engine.process(last)  # the same version again: a duplicate
    relisted = dict(last.object, metadata={**last.object["metadata"], "resourceVersion": "relisted"})
    engine.process(WatchEvent(EventType.ADDED, relisted, last.observed_at))  # a relist: resynced
    gone = {"metadata": {"name": "gone", "uid": "never-seen"}, "apiVersion": "v1", "kind": "ConfigMap"}
    engine.process(WatchEvent(EventType.DELETED, gone, last.observed_at))  # an untracked deletion
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
