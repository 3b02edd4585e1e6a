"""The engine on captures recorded from real kube-apiservers while real clients fought (or did not): the current
release's, and v1.20's (compatibility fixtures), on both attribution implementations."""

from __future__ import annotations

import orjson
import pytest

from tests.expectations import RELEASE_BENIGN, RELEASE_FINDINGS, assert_found, status_as_one
from tests.unit.captures import CAPTURES, IMPLEMENTATIONS, RELEASES, analyse, capture, events
from tests.unit.captures import event as make_event
from watcher.config import Config, parse_config
from watcher.detection.engine import Engine
from watcher.detection.events import event_object
from watcher.model import SERVER_MANAGERS, Finding, FindingType, Writer
from watcher.sources.capture import ReadStats, read_capture

SCENARIOS = [(release, scenario) for release in RELEASES for scenario in sorted(RELEASE_FINDINGS[release])]
BENIGN = [(release, scenario) for release in RELEASES for scenario in RELEASE_BENIGN[release]]


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize(("release", "scenario"), SCENARIOS)
def test_finds_exactly_the_injected_fight_or_hot_loop(release: str, scenario: str, engine: str) -> None:
    findings, analysis = analyse(scenario, engine=engine, release=release)
    assert analysis.implementation == engine
    assert_found(scenario, findings, release)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize(("release", "scenario"), BENIGN)
def test_benign_churn_is_not_flagged(release: str, scenario: str, engine: str) -> None:
    findings, analysis = analyse(scenario, engine=engine, release=release)
    assert analysis.stats.writes > 0  # the capture does contain writes
    assert findings == []


def _metadata_only(scenario: str, engine: Engine) -> list[Finding]:
    """A scenario as `fightwatch run` watches by default: metadata only (PartialObjectMetadata: no spec, no status,
    no data), each event's other members cut from the recording."""
    for line in capture(scenario).read_bytes().splitlines():
        doc = orjson.loads(line)
        obj = doc["object"]
        doc["object"] = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": obj["metadata"]}
        event = engine.decode(orjson.dumps(doc))
        assert event is not None
        engine.process(event)
    return engine.active() + engine.resolved()


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("scenario", sorted(RELEASE_FINDINGS["current"]))
def test_current_servers_give_each_finding_from_a_metadata_only_watch(scenario: str, engine: str) -> None:
    """From 1.22 on managedFields name every writer (the scale and status subresources included) and every write
    stamps its writer's entry: the objects' values add nothing to who the writers are."""
    expected = RELEASE_FINDINGS["current"][scenario]
    (found,) = _metadata_only(scenario, Engine(Config().detection, attribution=engine))
    assert (found.type, found.object.kind, found.object.name) == (expected.type, expected.kind, expected.name)
    assert {c.writer.manager for c in found.writers} == expected.managers
    if expected.driver is not None:
        assert found.writers[0].writer.manager == expected.driver
        assert set(found.writers[0].fields) == expected.fields
    (full,), _ = analyse(scenario, engine=engine)
    assert status_as_one(found.fields) == status_as_one(full.fields)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_hot_loop_names_the_status_a_writer_also_writes_where_the_watch_cannot_see_it(engine: str) -> None:
    """hot-loop-rollout-restart as `fightwatch run` recorded it (metadata only). The deployment controller writes
    the revision annotation and the status through its status entry: its first write in the loop changed the
    annotation, the next ones only the status, which the watch does not carry. The loop names both, as on full
    objects."""
    analysis = Engine(Config().detection, attribution=engine)
    recording = CAPTURES / "metadata-only" / "hot-loop-rollout-restart.jsonl"
    for event in read_capture(str(recording), analysis.decode, stats=ReadStats()):
        analysis.process(event)
    (found,) = analysis.active() + analysis.resolved()
    (controller,) = [c for c in found.writers if c.writer.manager == "kube-controller-manager"]
    assert "status" in controller.fields
    assert "metadata.annotations[deployment.kubernetes.io/revision]" in controller.fields
    (full,), _ = analyse("hot-loop-rollout-restart", engine=engine)
    assert set(found.fields) == status_as_one(full.fields)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_status_loop_is_attributed_from_a_metadata_only_watch_through_its_status_entry(engine: str) -> None:
    """hot-loop-status, metadata only: five status writes a second, most in the same second as the one before (the
    entry keeps that second): each is put to the one entry stamped in it, the status subresource's."""
    analysis = Engine(Config().detection, attribution=engine)
    (found,) = _metadata_only("hot-loop-status", analysis)
    assert found.type is FindingType.HOT_LOOP
    assert [c.writer.display() for c in found.writers] == ["widget-status-reconciler (Update, status)"]
    assert analysis.stats.unattributed_writes == 0


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("scenario", ["hot-loop-status", "benign-status-vs-spec", "hot-loop-rollout-restart"])
def test_current_servers_leave_no_write_unattributed(scenario: str, engine: str) -> None:
    """Writes in the same second as their writer's previous one (a status loop, the deployment controller's status
    updates during a rollout) are named too: by the one entry stamped in that second."""
    _, analysis = analyse(scenario, engine=engine)
    assert analysis.stats.writes > 100 if scenario != "benign-status-vs-spec" else analysis.stats.writes > 20
    assert analysis.stats.unattributed_writes == 0


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_v1_20_names_the_writer_of_a_status_loop_from_its_second_write(engine: str) -> None:
    """hot-loop-status on v1.20: 150 status writes by one controller that managedFields never show (its entry keeps
    its first write's time). The first is not attributed (the object's status is kept from then on), the rest are."""
    named, analysis = _writes("hot-loop-status", engine, release="v1.20")
    assert [managers for _, _, managers in named].count(("widget-status-reconciler",)) == len(named) - 1 >= 140
    assert analysis.stats.unattributed_writes == 1


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_v1_20_names_most_of_the_controller_managers_status_updates_and_no_finding(engine: str) -> None:
    """benign-status-vs-spec on v1.20: kube-controller-manager updates the Deployment's and ReplicaSets' status as
    an image is rolled out (its entry's time moves only when its field set does)."""
    named, analysis = _writes("benign-status-vs-spec", engine, release="v1.20")
    assert analysis.active() + analysis.resolved() == []
    assert [(kind, managers) for kind, _, managers in named].count(("Deployment", ("kube-controller-manager",))) >= 10
    assert analysis.stats.unattributed_writes < analysis.stats.writes // 3


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
    _, analysis = analyse("fight-scale-vs-apply", engine=engine, release="v1.20")
    assert analysis.stats.unattributed_writes >= 3


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_current_servers_name_the_scale_subresource_writer_with_its_subresource(engine: str) -> None:
    """`kubectl scale` writes through the scale subresource: its entry takes spec.replicas and is shown with it."""
    (found,), analysis = analyse("fight-scale-vs-apply", engine=engine)
    writers = {(c.writer.manager, c.writer.operation, c.writer.subresource) for c in found.writers}
    assert writers == {("kubectl-client-side-apply", "Update", ""), ("kubectl", "Update", "scale")}
    assert "kubectl (Update, scale)" in found.summary
    assert analysis.stats.unattributed_writes == 0


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_the_real_hpa_fight_names_the_autoscaler_by_its_scale_writes(engine: str) -> None:
    (found,), _ = analyse("fight-hpa-vs-apply", engine=engine)
    assert sorted(c.writer.display() for c in found.writers) == [
        "kube-controller-manager (Update, scale)",
        "kubectl-client-side-apply (Update)",
    ]
    assert found.summary.startswith("kube-controller-manager (Update, scale) and kubectl-client-side-apply (Update)")
    assert "HorizontalPodAutoscaler" in found.hint


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_the_hpas_churn_while_its_deployment_is_fought_over_follows_from_that_fight(engine: str) -> None:
    """With thresholds low enough for the HPA's own status writes (one per sync, every 15 s) to make a hot loop, that
    hot loop follows from the fight on the Deployment its scaleTargetRef names: a consequence, not a root cause."""
    low = {"detection": {"hot_loop": {"min_writes_per_minute": 2, "min_writes": 3}}}
    settings = parse_config(low, source="test").detection
    findings, _ = analyse("fight-hpa-vs-apply", settings, engine=engine)
    (fight,) = [f for f in findings if f.type is FindingType.FIGHT]
    (hpa,) = [f for f in findings if f.object.kind == "HorizontalPodAutoscaler"]
    assert hpa.related == fight.id
    assert f"follows from the fight on {fight.object.display()}, which it refers to" in hpa.summary


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_the_api_servers_own_managers_are_never_writers_and_are_explained(engine: str) -> None:
    """ancient-changes (the update managers merged beyond 10) and before-first-apply (the fields an object had
    before its first apply) are entries the API server writes: no write is theirs, they show with what they are, and
    one that lost a field once took no part in the fight (it is not listed as a fighter)."""
    for scenario in ("fight-ancient-changes", "fight-before-first-apply"):
        named, _ = _writes(scenario, engine)
        assert not {m for _, _, managers in named for m in managers} & set(SERVER_MANAGERS), scenario
    (found,), _ = analyse("fight-ancient-changes", engine=engine)
    assert {c.writer.manager for c in found.writers} == {"team-b-operator", "tier-operator"}
    assert Writer("ancient-changes", "Update").display() == f"ancient-changes ({SERVER_MANAGERS['ancient-changes']})"


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
    # (not ignored: a Lease, which the default rules leave out, is tracked for fights, its events counted as ignored)
    last = next(e for e in reversed(stream) if engine.tracks(e) and e.kind != "Lease")
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


def _writes(
    capture: str, implementation: str, *, release: str = "current"
) -> tuple[list[tuple[str, str, tuple[str | None, ...]]], Engine]:
    """Every write of a capture as `on_write` is told of it (kind, name, managers), and the engine."""
    seen: list[tuple[str, str, tuple[str | None, ...]]] = []
    engine = Engine(
        Config().detection,
        attribution=implementation,
        on_write=lambda ref, writers: seen.append((ref.kind, ref.name, tuple(w.manager for w in writers))),
    )
    for event in events(capture, engine.decode, release=release):
        engine.process(event)
    return seen, engine
