"""Metrics: finding changes of captures recorded from a real kube-apiserver in, exposition text out.

Each test reads values from a fresh registry (`get_sample_value`) or parses its exposition, so no test depends
on another's counts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.captures import IMPLEMENTATIONS, events
from watcher.config import Config, MetricsSettings
from watcher.detection.engine import Engine
from watcher.detection.incidents import incident_id
from watcher.metrics.exporter import ManagerLabels, Metrics, exposition
from watcher.metrics.families import FAMILIES, PREFIX
from watcher.model import ChangeKind, FindingChange, ObjectRef, Writer

README = Path(__file__).resolve().parents[2] / "README.md"
METRICS_DOC = README.parent / "docs" / "metrics.md"


def _metrics(**settings: object) -> tuple[CollectorRegistry, Metrics]:
    registry = CollectorRegistry()
    return registry, Metrics(registry, MetricsSettings.model_validate(settings))


def _replay(metrics: Metrics, *names: str, follow: bool = True) -> tuple[Engine, list[FindingChange]]:
    engine = Engine(Config().detection)
    if follow:
        metrics.active = engine.active
    changes: list[FindingChange] = []
    for name in names:
        for event in events(name, engine.decode):
            batch = engine.process(event)
            metrics.on_changes(batch)
            changes += batch
    return engine, changes


def _families(registry: CollectorRegistry) -> dict[str, Metric]:
    body, _ = exposition(registry, None)
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def _series(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    body, _ = exposition(registry, None)
    return [dict(s.labels) for f in text_string_to_metric_families(body.decode()) for s in f.samples if s.name == name]


def test_every_family_is_exposed_as_declared_and_nothing_else() -> None:
    registry, metrics = _metrics()
    _replay(metrics, "fight-data", "hot-loop-timestamp")
    metrics.observe_event(("", "configmaps"), "MODIFIED", duration=0.001, lag=0.5)
    metrics.watch_restart(("", "configmaps"), "timeout")
    metrics.watch_error(("", "configmaps"), 500)
    metrics.count_write(ObjectRef("v1", "ConfigMap", "ns", "x", "u"), [Writer("m", "Update")])
    metrics.delivery_queue("webhook:x", lambda: 0)
    exposed = _families(registry)
    declared = {f.name.removesuffix("_total") if f.type == "counter" else f.name: f for f in FAMILIES}
    # (the parser names counter families without _total)
    assert set(exposed) == set(declared)
    for name, family in declared.items():
        assert name.startswith(PREFIX)
        assert exposed[name].type == family.type
        assert exposed[name].documentation == family.help
    assert not [name for name in exposed if name.endswith("_created")]


def test_findings_are_counted_and_exposed_only_while_active() -> None:
    registry, metrics = _metrics()
    engine, changes = _replay(metrics, "fight-data", "hot-loop-timestamp")
    opened = [c for c in changes if c.kind is ChangeKind.OPENED]
    assert len(opened) == 2
    assert (
        registry.get_sample_value("fightwatch_findings_total", {"type": "fight", "group": "", "kind": "ConfigMap"}) == 1
    )
    assert registry.get_sample_value("fightwatch_findings_active", {"type": "hot_loop"}) == 1
    infos = _series(registry, "fightwatch_finding_info")
    fight = next(i for i in infos if i["type"] == "fight")
    assert fight == {
        "type": "fight",
        "group": "",
        "kind": "ConfigMap",
        "namespace": "fight-data",
        "name": "service-endpoints",
        "shard": "0",
        "incident": incident_id(next(f for f in engine.active() if f.type.value == "fight")),
        "writers": "config-injector(Update),gitops-sync(Apply)",
        "fields": "data.endpoint",
    }
    ids = {k: fight[k] for k in ("type", "group", "kind", "namespace", "name", "shard")}
    (finding,) = [f for f in engine.active() if f.type.value == "fight"]
    incident = {"type": "fight", "incident": fight["incident"], "shard": "0"}
    assert registry.get_sample_value("fightwatch_incident_objects", incident) == 1  # one object: an incident still
    assert (
        registry.get_sample_value(
            "fightwatch_incident_info", {**incident, "writers": fight["writers"], "fields": "data.endpoint"}
        )
        == 1
    )
    assert registry.get_sample_value("fightwatch_finding_handovers", ids) == finding.handovers
    assert registry.get_sample_value("fightwatch_finding_writes_per_minute", ids) == finding.writes_per_minute
    assert registry.get_sample_value("fightwatch_finding_hint_info", {**ids, "hint": finding.hint}) == 1

    metrics.on_changes(engine.advance(max(f.last_seen for f in engine.active()) + 3600))
    assert _series(registry, "fightwatch_finding_info") == []
    assert _series(registry, "fightwatch_finding_hint_info") == []
    assert _series(registry, "fightwatch_incident_info") == []
    assert _series(registry, "fightwatch_incident_objects") == []
    assert registry.get_sample_value("fightwatch_findings_active", {"type": "fight"}) == 0
    assert (
        registry.get_sample_value("fightwatch_findings_total", {"type": "fight", "group": "", "kind": "ConfigMap"}) == 1
    )


def test_without_the_engine_the_last_changes_are_exposed() -> None:
    registry, metrics = _metrics()
    engine, changes = _replay(metrics, "fight-data", follow=False)
    last = [c.finding for c in changes][-1]
    ids = {"type": "fight", "group": "", "kind": "ConfigMap", "namespace": "fight-data", "name": "service-endpoints"}
    ids["shard"] = "0"
    assert registry.get_sample_value("fightwatch_finding_handovers", ids) == last.handovers
    metrics.on_changes(engine.advance(last.last_seen + 3600))
    assert _series(registry, "fightwatch_finding_info") == []


def test_per_object_series_are_capped_most_severe_first() -> None:
    registry, metrics = _metrics(max_finding_series=1)
    engine, _ = _replay(metrics, "fight-data", "hot-loop-timestamp")
    infos = _series(registry, "fightwatch_finding_info")
    assert [i["type"] for i in infos] == ["hot_loop"]  # 304 writes/min beats the fight's 54
    assert len(_series(registry, "fightwatch_finding_handovers")) == 1
    assert registry.get_sample_value("fightwatch_finding_series_omitted") == 1
    assert registry.get_sample_value("fightwatch_findings_active", {"type": "fight"}) == 1
    assert len(engine.active()) == 2


def test_one_pattern_on_many_objects_is_one_incident_series_and_incident_series_are_capped() -> None:
    registry, metrics = _metrics()
    _replay(metrics, "incident-replicas", "incident-hot-loop", "fight-data")
    infos = _series(registry, "fightwatch_finding_info")
    assert len(infos) == 6 + 4 + 1  # per object as before, each naming its incident
    incidents = {i["incident"] for i in infos}
    assert len(incidents) == 3
    objects = {s["incident"]: s for s in _series(registry, "fightwatch_incident_objects")}
    assert set(objects) == incidents
    by_incident = {i: [f for f in infos if f["incident"] == i] for i in incidents}
    for incident, members in by_incident.items():
        labels = {"type": members[0]["type"], "incident": incident, "shard": "0"}
        assert registry.get_sample_value("fightwatch_incident_objects", labels) == len(members)
        (info,) = [s for s in _series(registry, "fightwatch_incident_info") if s["incident"] == incident]
        assert (info["writers"], info["fields"]) == (members[0]["writers"], members[0]["fields"])
    assert registry.get_sample_value("fightwatch_incident_series_omitted") == 0
    assert registry.get_sample_value("fightwatch_alerting_info", {"per": "incident"}) == 1

    capped, metrics = _metrics(max_incident_series=1)
    _replay(metrics, "incident-replicas", "incident-hot-loop", "fight-data")
    (kept,) = _series(capped, "fightwatch_incident_objects")
    assert kept["incident"] == max(by_incident, key=lambda i: len(by_incident[i]))  # the most objects first
    assert capped.get_sample_value("fightwatch_incident_series_omitted") == 2
    assert len(_series(capped, "fightwatch_finding_info")) == 11  # (per-object series have their own cap)


def test_the_writers_label_stays_put_while_alternating_writers_lead_in_turn() -> None:
    registry, metrics = _metrics()
    engine = Engine(Config().detection)
    metrics.active = engine.active
    labels = set()
    orders = set()
    for event in events("fight-update-vs-update-label", engine.decode):
        engine.process(event)
        for finding in engine.active():
            orders.add(tuple(c.writer.manager for c in finding.writers))
            labels |= {i["writers"] for i in _series(registry, "fightwatch_finding_info")}
    assert len(orders) == 2  # the engine ranks by writes, and the lead changes hands ...
    assert labels == {"team-a-operator(Update),team-b-operator(Update)"}  # ... the label does not


def test_long_writer_and_field_lists_are_cut() -> None:
    registry, metrics = _metrics(max_label_length=20)
    _replay(metrics, "fight-three-writers")
    (info,) = _series(registry, "fightwatch_finding_info")
    assert len(info["writers"]) == 20
    assert info["writers"].endswith("…")


def test_writes_are_counted_by_manager_and_operation_unattributed_as_empty() -> None:
    registry, metrics = _metrics()
    ref = ObjectRef("apps/v1", "Deployment", "shop", "web", "uid")
    metrics.count_write(ref, [Writer("argocd", "Apply")])
    metrics.count_write(ref, [Writer("argocd", "Apply")])
    metrics.count_write(ref, [Writer(None)])
    labels = {"group": "apps", "kind": "Deployment", "namespace": "shop"}
    assert (
        registry.get_sample_value("fightwatch_writes_total", {**labels, "manager": "argocd", "operation": "Apply"}) == 2
    )
    assert registry.get_sample_value("fightwatch_writes_total", {**labels, "manager": "", "operation": ""}) == 1


def test_the_namespace_label_can_be_switched_off() -> None:
    registry, metrics = _metrics(writes_namespace_label=False)
    for namespace in ("a", "b", None):
        metrics.count_write(ObjectRef("v1", "ConfigMap", namespace, "x", "u"), [Writer("m", "Update")])
    (series,) = _series(registry, "fightwatch_writes_total")
    assert series["namespace"] == ""
    assert registry.get_sample_value("fightwatch_writes_total", series) == 3


def test_managers_beyond_the_top_k_write_as_other_and_a_busier_one_takes_a_place() -> None:
    registry, metrics = _metrics(top_managers=2)
    ref = ObjectRef("v1", "ConfigMap", "ns", "x", "u")
    for manager in ("a", "b", "c", "d"):
        metrics.count_write(ref, [Writer(manager, "Update")])
    managers = {s["manager"] for s in _series(registry, "fightwatch_writes_total")}
    assert managers == {"a", "b", "other"}
    for _ in range(5000):  # c now writes far more than a or b: at a re-ranking it takes the weakest place
        metrics.count_write(ref, [Writer("c", "Update")])
    managers = {s["manager"] for s in _series(registry, "fightwatch_writes_total")}
    assert "c" in managers
    assert len(managers - {"other"}) == 2


def test_manager_labels_stay_bounded_and_keep_similar_managers_in_place() -> None:
    evicted: list[str] = []
    labels = ManagerLabels(3, evicted.append, rerank_every=10)
    for round_ in range(200):
        for manager in (f"m{i}" for i in range(50)):  # 50 managers writing alike
            labels.label(manager)
        assert len(labels.admitted) == 3, round_
    assert evicted == []  # none writes twice as much as an admitted one: no churn
    assert len(labels._counts) <= 12


def test_watch_loop_metrics_use_bounded_label_values() -> None:
    registry, metrics = _metrics()
    cm = ("", "configmaps")
    metrics.watch_restart(cm, "expired")
    metrics.watch_restart(cm, "something new")
    metrics.watch_error(cm, 410)
    metrics.watch_error(cm, None)
    metrics.observe_event(cm, "WEIRD", duration=0.002, lag=-1.0, received_at=1234.5)
    per_resource = [
        ("fightwatch_watch_restarts_total", {"reason": "expired"}),
        ("fightwatch_watch_restarts_total", {"reason": "other"}),
        ("fightwatch_watch_errors_total", {"code": "410"}),
        ("fightwatch_watch_errors_total", {"code": "network"}),
        ("fightwatch_events_total", {"type": "other"}),
    ]
    configmaps = {"group": "", "resource": "configmaps"}
    for name, labels in per_resource:
        assert registry.get_sample_value(name, {**configmaps, **labels}) == 1, (name, labels)
    assert registry.get_sample_value("fightwatch_event_lag_seconds_bucket", {"le": "0.5"}) == 1  # clamped to 0
    assert registry.get_sample_value("fightwatch_last_event_timestamp_seconds", configmaps) == 1234.5
    assert registry.get_sample_value("fightwatch_event_processing_duration_seconds_count") == 1


def test_watched_resources_start_at_zero_and_their_series_go_with_them() -> None:
    registry, metrics = _metrics()
    cm, deploy, secrets = ("", "configmaps"), ("apps", "deployments"), ("", "secrets")
    metrics.set_resources([cm, deploy], [secrets])
    assert registry.get_sample_value("fightwatch_resources", {"state": "watched"}) == 2
    assert registry.get_sample_value("fightwatch_resources", {"state": "forbidden"}) == 1
    assert (
        registry.get_sample_value(
            "fightwatch_events_total", {"group": "apps", "resource": "deployments", "type": "MODIFIED"}
        )
        == 0
    )
    metrics.observe_event(deploy, "MODIFIED", duration=0.001, lag=None)
    metrics.watch_error(deploy, 500)
    metrics.watch_error(secrets, 403)
    metrics.set_resources([cm], [secrets])
    assert {s["resource"] for s in _series(registry, "fightwatch_watch_errors_total")} == {"secrets"}
    metrics.set_resources([cm], [])
    assert {s["resource"] for s in _series(registry, "fightwatch_events_total")} == {"configmaps"}
    assert _series(registry, "fightwatch_watch_errors_total") == []
    assert _series(registry, "fightwatch_last_event_timestamp_seconds") == []


def test_plain_numbers_read_at_scrape_time_fill_the_collected_families() -> None:
    registry, metrics = _metrics()
    state = {"bytes": 100.0}
    cm = ("", "configmaps")
    metrics.read_at_scrape(
        lambda: {
            "fightwatch_watch_received_bytes": [(cm, state["bytes"])],
            "fightwatch_watches": [((*cm, "watching"), 1.0), ((*cm, "retrying"), 0.0)],
            "fightwatch_ready": [((), 1.0)],
        }
    )
    labels = {"group": "", "resource": "configmaps"}
    assert registry.get_sample_value("fightwatch_watch_received_bytes_total", labels) == 100
    state["bytes"] = 250.0
    assert registry.get_sample_value("fightwatch_watch_received_bytes_total", labels) == 250  # read on every scrape
    assert registry.get_sample_value("fightwatch_watches", {**labels, "state": "watching"}) == 1
    assert registry.get_sample_value("fightwatch_ready") == 1
    assert _families(registry)["fightwatch_watch_received_bytes"].type == "counter"


@pytest.mark.parametrize("name", ["fightwatch_watch_state", "fightwatch_events"])  # undeclared; not collected
def test_a_reader_may_only_fill_collected_families_of_the_table(name: str) -> None:
    registry, metrics = _metrics()
    metrics.read_at_scrape(lambda: {name: [((), 1.0)]})
    with pytest.raises(ValueError, match="is not a collected family"):
        exposition(registry, None)


def test_watch_error_codes_are_bounded() -> None:
    registry, metrics = _metrics()
    cm = ("", "configmaps")
    for code in (403, 403, "internal", "unknown", 999, "surprise", None):
        metrics.watch_error(cm, code)
    codes = {s["code"]: registry.get_sample_value("fightwatch_watch_errors_total", s) for s in _errors(registry)}
    assert codes == {"403": 2, "internal": 1, "unknown": 1, "other": 2, "network": 1}


def _errors(registry: CollectorRegistry) -> list[dict[str, str]]:
    return _series(registry, "fightwatch_watch_errors_total")


def test_build_info_and_openmetrics_negotiation() -> None:
    registry, _ = _metrics()
    (info,) = _series(registry, "fightwatch_build_info")
    assert info["version"]
    assert info["python_version"]
    assert info["engine"] == "python"  # (unless told otherwise)
    body, content_type = exposition(registry, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_build_info_names_the_engine_the_watcher_runs_on(engine: str) -> None:
    """`Service` labels it with the attribution implementation its engine runs on."""
    from watcher.service import Service  # noqa: PLC0415 - the composition root, only for its metrics

    service = Service(Config(), kubeconfig=None, context=None, record=None, engine=engine)
    assert service.pipeline.implementation == engine
    (info,) = _series(service.registry, "fightwatch_build_info")
    assert info["engine"] == engine
    assert service.registry.get_sample_value("fightwatch_build_info", info) == 1


def _documented_metrics_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The table under "## Metrics" of docs/metrics.md: exposed name -> (type, labels)."""
    section = METRICS_DOC.read_text().split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        row = re.fullmatch(r"\| `(fightwatch_\w+)` \| (\w+) \|([^|]*)\| .* \|", line)
        if row is not None:
            rows[row[1]] = (row[2], tuple(re.findall(r"`(\w+)`", row[3])))
    return rows


def test_the_documented_metrics_table_is_the_family_table() -> None:
    documented = _documented_metrics_table()
    declared = {f.exposed_name: (f.type, f.labels) for f in FAMILIES}
    assert documented == declared  # every family, with its type and labels in order; nothing else


def test_no_other_fightwatch_metric_name_is_mentioned_in_the_docs() -> None:
    """Names in prose (README, metrics.md, runbook) are names of the table: a renamed family leaves no stale mention."""
    known = {f.exposed_name for f in FAMILIES} | {
        f"{f.name}_{suffix}" for f in FAMILIES if f.type == "histogram" for suffix in ("bucket", "sum", "count")
    }
    for doc in (README, METRICS_DOC, README.parent / "docs" / "runbook.md"):
        mentioned = set(re.findall(r"\b(fightwatch_[a-z_]+[a-z])\b", doc.read_text()))
        assert mentioned - known == set(), doc.name
