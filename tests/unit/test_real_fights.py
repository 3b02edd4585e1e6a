"""Fights and benign patterns played by real programs (cert-manager's cainjector, Flux's kustomize-controller, Helm 3
and 4, kube-controller-manager's controllers, kubectl, curl) on kube-apiserver v1.37.2, recorded with the watch and the
audit log (tests/fixtures/real, `scripts/record_real_fights.py`): what fightwatch says of each, on both engines, from
the watch alone (full objects, and metadata only as `fightwatch run` watches) and with the audit log joined."""

from __future__ import annotations

import io
from collections.abc import Generator
from pathlib import Path

import orjson
import pytest

from harness.stage import PERSON
from tests.expectations import REAL_BENIGN, REAL_FIGHTS, UNNAMED, Party, RealFight
from tests.unit.captures import IMPLEMENTATIONS
from watcher.config import Config, parse_config
from watcher.delivery.alertmanager import alert
from watcher.delivery.kube_events import note
from watcher.detection.engine import Engine
from watcher.detection.events import ObjectEvent
from watcher.detection.incidents import group
from watcher.detection.join import Joined
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request
from watcher.model import Finding, FindingType, Writer
from watcher.rendering.output import finding_json, write_table
from watcher.rendering.page import render_findings
from watcher.sources.audit import AuditStats, read_audit_logs
from watcher.sources.capture import ReadStats, merged, read_capture

REAL = Path(__file__).parents[1] / "fixtures" / "real"
MODES = ("watch", "metadata", "audit")


def watch_events(
    name: str, engine: Engine, *, metadata_only: bool = False, root: Path = REAL
) -> Generator[ObjectEvent, None, None]:
    """The recording's watch events; metadata only: as `fightwatch run` watches (PartialObjectMetadata)."""
    if not metadata_only:
        yield from read_capture(str(root / f"{name}.watch.jsonl"), engine.decode, stats=ReadStats())
        return
    for line in (root / f"{name}.watch.jsonl").read_bytes().splitlines():
        doc = orjson.loads(line)
        obj = doc["object"]
        doc["object"] = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": obj["metadata"]}
        event = engine.decode(orjson.dumps(doc))
        assert event is not None
        yield event


def analyse(
    name: str, mode: str, engine: str, settings: Config | None = None, *, root: Path = REAL
) -> tuple[list[Finding], Engine]:
    """Replay a recording in a mode (`MODES`) on an engine: its findings (active, then resolved), and the watch's
    engine."""
    detection = (settings or Config()).detection
    watch = Engine(detection, attribution=engine)
    if mode != "audit":
        for event in watch_events(name, watch, metadata_only=mode == "metadata", root=root):
            watch.process(event)
        return watch.active() + watch.resolved(), watch
    joined = Joined(watch, RequestEngine(detection))
    requests = read_audit_logs([str(root / f"{name}.audit.jsonl")], stats=AuditStats())
    streams: list[Generator[ObjectEvent | Request, None, None]] = [watch_events(name, watch, root=root), requests]
    for item in merged(streams, lambda i: i.time or 0.0):
        if isinstance(item, Request):
            joined.process_request(item)
        else:
            joined.process(item)
    return joined.active() + joined.resolved(), watch


def party(writer: Writer) -> Party:
    return (writer.manager, writer.operation, writer.subresource)


def fights_of(findings: list[Finding], expected: RealFight) -> list[Finding]:
    return [
        f
        for f in findings
        if f.type is FindingType.FIGHT
        and f.object.kind == expected.kind
        and (not expected.name or f.object.name == expected.name)
    ]


FIGHTS = sorted(REAL_FIGHTS)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", FIGHTS)
def test_each_real_fight_is_found_with_its_writers_its_driver_and_the_projects_fix(
    scenario: str, mode: str, engine: str
) -> None:
    expected = REAL_FIGHTS[scenario]
    findings, _ = analyse(scenario, mode, engine)
    fights = fights_of(findings, expected)
    assert len(fights) == expected.findings, [f.summary for f in findings]
    for found in fights:
        assert set(found.fields) == expected.fields
        writers = {party(c.writer) for c in found.writers}
        assert writers == (expected.audited if mode == "audit" else expected.watch), found.summary
        assert expected.hint in found.hint, found.hint
        for phrase in expected.never:
            assert phrase not in found.hint, found.hint
        if expected.restores is not None:
            (restorer,) = [c for c in found.writers if c.restores]
            assert party(restorer.writer) == expected.restores
            assert found.writers[-1].restores  # (named after the writers that drive it)
        if expected.drives is not None:
            assert party(found.writers[0].writer) == expected.drives
            assert found.summary.startswith(found.writers[0].writer.display() + " keeps changing")
        assert ("reported although a default ignore rule leaves this out" in found.summary) == expected.ignored
        assert found.handovers >= 3


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", sorted(REAL_BENIGN))
def test_benign_patterns_of_real_clusters_are_not_flagged(scenario: str, mode: str, engine: str) -> None:
    findings, watch = analyse(scenario, mode, engine)
    assert watch.stats.writes > 0 or scenario == "benign-control-plane"
    expected = REAL_BENIGN[scenario] if mode == "audit" else ()
    assert sorted(f.type for f in findings) == sorted(expected), [f.summary for f in findings]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", [*FIGHTS, *sorted(REAL_BENIGN)])
def test_both_engines_find_the_same_on_every_real_recording(scenario: str, mode: str) -> None:
    if len(IMPLEMENTATIONS) < 2:
        pytest.skip("FIGHTWATCH_PURE_PYTHON: no native engine")
    said = []
    for engine in IMPLEMENTATIONS:
        findings, _ = analyse(scenario, mode, engine)
        said.append([orjson.dumps(finding_json(f)) for f in findings])
    assert said[0] == said[1]


# ------------------------------------------------------------------------------------------------- who drives


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_client_scaling_a_replicaset_heads_the_incident_and_the_controllers_churn_follows_from_it(
    engine: str,
) -> None:
    """A CronJob scales the ReplicaSet of a Deployment every 2 s; the deployment controller scales it back and rewrites
    the Deployment's status after every change, fast enough for a hot loop. The client is the cause: the incident is
    headed by its fight, and the Deployment's hot loop follows from that fight (not the other way round)."""
    findings, _ = analyse("replicaset-scale", "audit", engine)
    (fight,) = [f for f in findings if f.type is FindingType.FIGHT]
    (deployment_loop,) = [f for f in findings if f.type is FindingType.HOT_LOOP and f.object.kind == "Deployment"]
    assert fight.related is None
    assert deployment_loop.related == fight.id
    assert f"follows from the fight on {fight.object.display()}, which it controls" in deployment_loop.summary
    (incident,) = group(findings)
    assert incident.findings == (fight.id,)
    assert set(incident.consequences) == {f.id for f in findings} - {fight.id}
    assert incident.summary.startswith("kubectl (Update, scale) keeps changing spec.replicas")
    # the controller's own hot loop on the ReplicaSet names the client as what drives it, the controller restoring
    (loop,) = [f for f in findings if f.type is FindingType.HOT_LOOP and f.object.kind == "ReplicaSet"]
    assert loop.summary.startswith("kubectl (Update, scale) keeps changing spec.replicas, kube-controller-manager")
    assert "Find what runs kubectl (Update, scale) that often" in loop.hint


@pytest.mark.parametrize("scenario", [s for s, e in REAL_FIGHTS.items() if e.restores is not None])
def test_kubernetes_own_controllers_are_never_told_to_change(scenario: str) -> None:
    findings, _ = analyse(scenario, "audit", "python")
    for finding in findings:
        if finding.type in (FindingType.FIGHT, FindingType.HOT_LOOP):
            for phrase in ("time.Now()", "stop the other controller", "Decide which one owns"):
                assert phrase not in finding.hint, (finding.summary, finding.hint)


# ------------------------------------------------------------------------------------------ every writer named


def test_helm_removing_the_cabundle_is_named_from_the_audit_events_everywhere_a_finding_is_told() -> None:
    """Helm 3's three-way merge patch resets the chart's empty caBundle: it only removes the field, so the API server
    stamps no managedFields entry for it. From the watch alone it is `(unattributed)`, said why; with the audit log it
    is `helm (Update)`, named from its requests (the closest write request in time, not the cainjector's), in the
    table, the JSON, the page, the Event and the alert alike."""
    (alone,), _ = analyse("cainjector-helm3", "watch", "native")
    assert "(unattributed) is a writer no managedFields entry names" in alone.summary
    (fight,), _ = analyse("cainjector-helm3", "audit", "native")
    helm = next(c for c in fight.writers if c.writer.manager == "helm")
    assert (helm.named_from, helm.users) == ("audit", ("system:serviceaccount:ci:release-pipeline",))
    names = [c.writer.display() for c in fight.writers]
    assert names == ["helm (Update)", "cert-manager-cainjector (Apply)"] or sorted(names) == sorted(
        ["helm (Update)", "cert-manager-cainjector (Apply)"]
    )
    table = _table([fight])
    told = {
        "table": table,
        "json": orjson.dumps(finding_json(fight)).decode(),
        "page": render_findings([fight], now=fight.last_seen),
        "event": note(fight),
        "alert": orjson.dumps(alert(fight, now=fight.last_seen, resend_interval=60)).decode(),
    }
    for where, text in told.items():
        for name in names:
            assert name in text, where
        assert "(unattributed)" not in text, where


def _table(findings: list[Finding]) -> str:
    out = io.StringIO()
    write_table(findings, out, totals="", empty="", width=10_000)
    return out.getvalue()


def test_a_writer_that_names_no_field_manager_is_said_to_be_one() -> None:
    (fight,), _ = analyse("flux-curl", "audit", "native")
    assert "curl is the User-Agent of a client that names no field manager of its own" in fight.summary
    (curl,) = [c for c in fight.writers if c.writer.manager == "curl"]
    assert curl.users == ("system:serviceaccount:ops:legacy-sync",)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_restarted_controller_and_a_recreated_object_give_one_finding_per_object(engine: str) -> None:
    """helm3-reinstall: the cainjector is restarted halfway (same manager name, a new Lease holder), then the release is
    uninstalled and installed again: the webhook is deleted and recreated under its name. The first object's fight
    resolves when it is deleted; the new object (another uid) has a fight of its own; each names helm and the
    cainjector."""
    findings, _ = analyse("helm3-reinstall", "audit", engine)
    first, second = sorted((f for f in findings if f.type is FindingType.FIGHT), key=lambda f: f.first_seen)
    assert first.object.uid != second.object.uid
    assert first.resolved_at is not None
    assert second.resolved_at is None
    assert first.resolved_at <= second.first_seen
    for fight in (first, second):
        assert {party(c.writer) for c in fight.writers} == REAL_FIGHTS["helm3-reinstall"].audited


# ------------------------------------------------------------------------------------- defaults hide no fight


def test_a_fight_on_a_kind_the_default_rules_leave_out_is_reported_and_marked() -> None:
    findings, engine = analyse("endpointslice-mirror", "watch", "native")
    (fight,) = findings
    assert "(EndpointSlice: endpoint slices follow pod churn)" in fight.summary
    assert engine.stats.ignored_events > 0  # (its events still count as ignored: no write of it is counted)


def test_the_users_rules_hide_a_fight_but_count_it() -> None:
    config = parse_config(
        {"detection": {"ignore": [{"group": "discovery.k8s.io", "kind": "EndpointSlice", "reason": "ours"}]}},
        source="test",
    )
    findings, engine = analyse("endpointslice-mirror", "watch", "native", config)
    assert findings == []
    assert engine.stats.ignored_fights == 1


def test_one_writers_churn_on_a_kind_the_default_rules_leave_out_is_not_reported() -> None:
    """The control plane's own Leases, renewed by kube-controller-manager and the cainjector: no fight, none counted."""
    findings, engine = analyse("benign-control-plane", "watch", "native")
    assert findings == []
    assert engine.stats.ignored_fights == 0


def test_unnamed_is_the_unattributed_writer() -> None:
    assert party(Writer(None)) == UNNAMED


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_go_client_that_sets_no_field_manager_is_said_to_be_one(engine: str, tmp_path: Path) -> None:
    """A Go program calling the API with net/http and no `fieldManager` is named `Go-http-client` by the API server
    (from its User-Agent `Go-http-client/2.0`). The flux-curl recording with curl's User-Agent replaced by Go's, in
    the watch and the audit log: the same fight, said to be a client that names no field manager, not a controller."""
    for suffix, old, new in (
        ("watch", b'"manager":"curl"', b'"manager":"Go-http-client"'),
        ("audit", b'"userAgent":"curl/7.88.1"', b'"userAgent":"Go-http-client/2.0"'),
    ):
        text = (REAL / f"flux-curl.{suffix}.jsonl").read_bytes()
        assert old in text
        (tmp_path / f"go-client.{suffix}.jsonl").write_bytes(text.replace(old, new))
    (fight,), _ = analyse("go-client", "audit", engine, root=tmp_path)
    assert {c.writer.manager for c in fight.writers} == {"Go-http-client", "kustomize-controller"}
    assert "Go-http-client is the User-Agent of a client that names no field manager of its own" in fight.summary
    (client,) = [c for c in fight.writers if c.writer.manager == "Go-http-client"]
    assert client.users == ("system:serviceaccount:ops:legacy-sync",)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("mode", MODES)
def test_a_person_who_scaled_once_mid_fight_is_no_fighter(engine: str, mode: str) -> None:
    """helm3-hpa: halfway, a person runs `kubectl scale deployment web` once. Their write took spec.replicas (a
    managedFields entry of its own) and lost it to the next `helm upgrade`: it took no part in the alternation, so the
    fight names helm and the HPA alone; with the audit log the person is among the clients that wrote the object."""
    took = [
        entry
        for line in (REAL / "helm3-hpa.watch.jsonl").read_bytes().splitlines()
        for entry in orjson.loads(line)["object"]["metadata"].get("managedFields", [])
        if (entry["manager"], entry.get("subresource")) == ("kubectl", "scale")
        and "f:replicas" in entry["fieldsV1"].get("f:spec", {})
    ]
    assert took
    (fight,), _ = analyse("helm3-hpa", mode, engine)
    assert {party(c.writer) for c in fight.writers} == REAL_FIGHTS["helm3-hpa"].watch
    assert "kubectl" not in fight.summary
    if mode == "audit":
        (person,) = [c for c in fight.clients if c.user == PERSON]
        assert (person.manager, person.writes) == ("kubectl", 1)
