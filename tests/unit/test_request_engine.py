"""The request engine on audit events recorded from a real kube-apiserver (tests/fixtures/audit: the current
release at every audit level recorded, and v1.20's for compatibility): what it finds, whom it names, and what it
leaves alone. Times are shifted (never invented) to test rates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from tests.unit.audit_recordings import CURRENT, SCENARIOS, V1_20
from watcher.config import Config, DetectionSettings, IgnoreRule
from watcher.detection.ignore import ObjectRules
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request, parse_apply_conflict
from watcher.model import Finding, FindingState, FindingType, Writer
from watcher.sources.audit import AuditStats, read_audit_log

# (recording, audit level): the current release at Metadata, RequestResponse, and RequestResponse without
# managedFields; v1.20 at the first two
RECORDINGS = [
    *((CURRENT, level) for level in ("metadata", "request-response", "omit-managed-fields")),
    *((V1_20, level) for level in ("metadata", "request-response")),
]
EVERY_RECORDING = pytest.mark.parametrize(
    ("recording", "level"), RECORDINGS, ids=[f"{r.name if r is V1_20 else 'current'}-{lv}" for r, lv in RECORDINGS]
)
GITOPS = "system:serviceaccount:argocd:argocd-application-controller"
LABELER = "system:serviceaccount:ops:labeler"
ANNOTATOR = "system:serviceaccount:ops:annotator"
DEPLOYER = "system:serviceaccount:ci:deployer"
SYNC = "system:serviceaccount:ops:settings-sync"
HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
DEPLOYMENT_CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"
SUFFIXES = {"metadata": "", "request-response": "-full", "omit-managed-fields": "-omf"}  # a level's namespace
# the pods the current recordings' clients' tokens are bound to (v1.20's clients had static tokens: no pods)
PODS = {
    GITOPS: "argocd/argocd-application-controller-0",
    LABELER: "ops/labeler-6d9c7f5b4-qx2lp",
    ANNOTATOR: "ops/annotator-5f8b6c9d7-m4tzr",
    DEPLOYER: "ci/deploy-pipeline-28340520-4k7xp",
    SYNC: "ops/settings-sync-7b5d8c6f9-w2vjn",
    "system:serviceaccount:ops:app-renderer": "ops/app-renderer-58f9d6c7b-r8wxt",
}


def requests(scenario: str, level: str, recording: Path = CURRENT) -> list[Request]:
    return list(read_audit_log(str(recording / f"{scenario}.{level}.jsonl"), stats=AuditStats()))


def pod(recording: Path, user: str) -> str:
    return PODS[user] if recording is CURRENT else ""


def analyse(items: list[Request], settings: DetectionSettings | None = None) -> tuple[RequestEngine, list[Finding]]:
    engine = RequestEngine(settings or Config().detection)
    for request in items:
        engine.process(request)
    return engine, engine.active() + engine.resolved()


def the_finding(scenario: str, type_: FindingType, *, level: str, recording: Path) -> Finding:
    """The one finding of a recorded scenario, of this type."""
    _, findings = analyse(requests(scenario, level, recording))
    (finding,) = findings
    assert finding.type is type_
    return finding


@EVERY_RECORDING
def test_a_stale_read_modify_write_fight_is_a_conflict_storm_naming_loser_and_winner(
    recording: Path, level: str
) -> None:
    storm = the_finding("rmw-fight", FindingType.CONFLICT_STORM, level=level, recording=recording)
    assert (storm.object.resource, storm.object.name) == ("configmaps", "settings")
    assert storm.conflicts == 12
    by_user = {c.user: c for c in storm.clients}
    assert by_user[LABELER].conflicts == 12
    assert by_user[LABELER].manager == "labeler"  # derived from "labeler/0.3.1 (linux/amd64)"
    assert by_user[LABELER].user_agent == "labeler/0.3.1 (linux/amd64)"
    assert (by_user[GITOPS].conflicts, by_user[GITOPS].writes) == (0, 12)
    assert {c.user: c.pod for c in storm.clients} == {u: pod(recording, u) for u in (LABELER, GITOPS)}
    assert storm.clients[0].user == LABELER  # the most conflicts first
    assert "meanwhile argocd-application-controller" in storm.summary
    # audit alone cannot tell a fight from contention over different fields: it says how to find out
    assert "--audit" in storm.hint


@EVERY_RECORDING
def test_a_client_retrying_with_the_same_stale_version_is_told_to_re_read(recording: Path, level: str) -> None:
    storm = the_finding("storm-fields", FindingType.CONFLICT_STORM, level=level, recording=recording)
    assert [(c.user, c.conflicts) for c in storm.clients if c.conflicts] == [(ANNOTATOR, 30)]
    assert "same stale resourceVersion" in storm.hint


@EVERY_RECORDING
def test_an_applier_without_force_rejected_every_time_is_stuck(recording: Path, level: str) -> None:
    stuck = the_finding("apply-stuck", FindingType.APPLY_CONFLICT, level=level, recording=recording)
    assert [(c.user, c.manager, c.conflicts, c.pod) for c in stuck.clients] == [
        (DEPLOYER, "kubectl", 6, pod(recording, DEPLOYER))
    ]
    # the API server's message names the owner and the fields: v1.20 logged it only with the response body,
    # current releases at Metadata level too
    if level != "metadata" or recording is CURRENT:
        assert stuck.fields == ("data.mode",)
        assert {w.writer.manager for w in stuck.writers} == {"kubectl", "helm"}
        assert "'helm' owns data.mode" in stuck.hint
    else:  # v1.20's Metadata level records no message
        assert stuck.fields == ()
        assert "--dry-run=server" in stuck.hint


@EVERY_RECORDING
def test_updates_that_change_nothing_are_a_no_op_loop(recording: Path, level: str) -> None:
    noop = the_finding("noop-loop", FindingType.NOOP_WRITES, level=level, recording=recording)
    (client,) = noop.clients
    assert (client.user, client.manager, client.pod) == (SYNC, "settings-sync", pod(recording, SYNC))
    # 15 updates carry one resourceVersion: with responses logged each says so itself; at Metadata level an
    # update is known to have changed nothing when the next one carries its version too (the last one is not)
    assert client.noop_writes == (14 if level == "metadata" else 15)
    assert noop.writes == client.noop_writes


@EVERY_RECORDING
def test_benign_traffic_is_not_reported(recording: Path, level: str) -> None:
    engine, findings = analyse(requests("benign", level, recording))
    assert findings == []
    # (so that this could fail: there were conflicts, no-op writes and many writers)
    assert engine.stats.conflicts >= 2
    assert engine.stats.noop_writes >= 1
    assert engine.stats.writes >= 50


def test_the_same_conflicts_spread_over_time_are_not_a_storm() -> None:
    recorded = requests("rmw-fight", "metadata")
    start = recorded[0].time
    # the recorded requests, one every 30 seconds: two conflicts a minute at most, under the default rate of six
    spread = [replace(r, time=start + 30.0 * i) for i, r in enumerate(recorded)]
    _, findings = analyse(spread)
    assert findings == []


def test_a_storm_resolves_after_its_quiet_period() -> None:
    recorded = requests("rmw-fight", "metadata")
    engine, _ = analyse(recorded)
    (storm,) = engine.active()
    changes = engine.advance(storm.last_seen + Config().detection.resolve.after)
    assert [(c.kind.value, c.finding.state) for c in changes] == [("resolved", FindingState.RESOLVED)]
    assert engine.active() == []


def test_a_stuck_applier_is_resolved_when_its_apply_succeeds() -> None:
    recorded = requests("apply-stuck", "request-response")
    engine, _ = analyse(recorded)
    assert len(engine.active()) == 1
    rejected = [r for r in recorded if r.code == 409][-1]
    assert rejected.apply_conflict
    later = recorded[-1].time + 1
    changes = engine.process(replace(rejected, code=200, reason="", message="", time=later))
    assert [c.finding.state for c in changes] == [FindingState.RESOLVED]
    assert engine.active() == []


def test_ignore_rules_match_requests_by_resource() -> None:
    config = Config.model_validate({"detection": {"ignore": [{"kind": "ConfigMap", "namespace": "rmw-fight"}]}})
    engine, findings = analyse(requests("rmw-fight", "metadata"), config.detection)
    assert findings == []
    assert engine.stats.ignored > 0


def test_a_manager_rule_leaves_that_clients_writes_out() -> None:
    config = Config.model_validate({"detection": {"ignore": [{"manager": "labeler"}]}})
    _, findings = analyse(requests("rmw-fight", "metadata"), config.detection)
    assert findings == []  # only the labeler's writes conflicted


def test_a_manager_rule_is_matched_per_manager_and_remembered() -> None:
    rules = ObjectRules((), (IgnoreRule(manager="label*"), IgnoreRule(manager="helm", fields=("data",))))
    asked = ["labeler", "argocd", "helm", "labeler", "argocd", "helm"]
    # (a rule with fields leaves fields out, not the manager's writes)
    assert [rules.ignores_manager(m) for m in asked] == [True, False, False, True, False, False]
    assert [rules.manager_ignored(Writer(m)) for m in asked] == [True, False, False, True, False, False]


def test_clients_beyond_the_limit_are_counted_together() -> None:
    config = Config.model_validate({"detection": {"max_clients": 1}})
    _, findings = analyse(requests("rmw-fight", "metadata"), config.detection)
    (storm,) = findings
    # the labeler created the object: the first client; the GitOps controller's writes go to the rest
    assert [(c.user, c.conflicts, c.writes) for c in storm.clients] == [(LABELER, 12, 13), ("(other clients)", 0, 12)]


def test_finding_ids_are_the_same_in_every_run() -> None:
    recorded = requests("storm-fields", "metadata")
    assert [f.id for f in analyse(recorded)[1]] == [f.id for f in analyse(recorded)[1]]


@pytest.mark.parametrize(
    ("message", "owners", "fields"),
    [
        (
            'Apply failed with 1 conflict: conflict with "helm" using v1: .data.mode',
            ["helm"],
            ["data.mode"],
        ),
        (
            'Apply failed with 3 conflicts: conflicts with "helm" using apps/v1 at 2026-11-24T03:33:13Z:\n'
            '- .spec.replicas\n- .spec.template.spec.containers[name="web"].image\n'
            'conflicts with "argocd":\n- .metadata.labels.app',
            ["helm", "argocd"],
            ["spec.replicas", 'spec.template.spec.containers[name="web"].image', "metadata.labels.app"],
        ),
        ('Operation cannot be fulfilled on configmaps "x": the object has been modified', [], []),
        ("", [], []),
    ],
)
def test_apply_conflict_messages_name_owners_and_fields(message: str, owners: list[str], fields: list[str]) -> None:
    assert parse_apply_conflict(message) == (owners, fields)


def test_recorded_apply_conflict_message_is_the_form_parsed() -> None:
    (message,) = {r.message for r in requests("apply-stuck", "request-response") if r.code == 409}
    assert parse_apply_conflict(message) == (["helm"], ["data.mode"])


@pytest.mark.parametrize(("level", "suffix"), SUFFIXES.items())
def test_kube_controller_managers_controllers_write_as_one_manager_with_users_of_their_own(
    level: str, suffix: str
) -> None:
    # hpa-fight: the real kube-controller-manager (--use-service-account-credentials), its HPA against kubectl apply
    engine, findings = analyse(requests("hpa-fight", level))
    assert findings == []  # no failed or no-op writes to report: the fight is the watch's to see
    key = ("apps", "deployments", "hpa-fight" + suffix, "web")
    assert engine.users(key) == {
        ("kube-controller-manager", "scale"): {HPA},  # its writes of spec.replicas
        ("kube-controller-manager", "status"): {DEPLOYMENT_CONTROLLER},
        ("kubectl-client-side-apply", ""): {DEPLOYER},
    }
    (hpa,) = [c for c in engine.clients(key) if c.user == HPA]
    # client-go's User-Agent of a controller: kube-controller-manager's, then the service account it writes as
    assert hpa.user_agent.startswith("kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/")
    assert hpa.user_agent.endswith(f"/{HPA}")
    assert (hpa.manager, hpa.pod) == ("kube-controller-manager", "")  # (its token is bound to no pod)


def _signature(finding: Finding) -> tuple[object, ...]:
    """A finding without what differs between two namespaces of one run: ids, times, the namespace."""
    return (
        finding.type,
        finding.object.resource,
        finding.object.name,
        finding.fields,
        finding.writes,
        finding.conflicts,
        tuple((w.writer, w.writes, w.users) for w in finding.writers),
        finding.clients,
    )


@pytest.mark.parametrize("scenario", SCENARIOS[CURRENT])
def test_every_finding_is_the_same_with_omit_managed_fields(scenario: str) -> None:
    """`omitManagedFields: true` in an audit policy drops managedFields from the logged bodies: nothing the reader
    keeps comes from there (a response's resourceVersion, a 409's message)."""
    full = (CURRENT / f"{scenario}.request-response.jsonl").read_bytes()
    omitted = (CURRENT / f"{scenario}.omit-managed-fields.jsonl").read_bytes()
    assert b'"managedFields"' not in omitted
    bodies = [orjson.loads(line).get("responseObject") or {} for line in full.splitlines()]
    assert any("managedFields" in (b.get("metadata") or {}) for b in bodies)  # (so that this could fail)
    with_them = [_signature(f) for f in analyse(requests(scenario, "request-response"))[1]]
    without = [_signature(f) for f in analyse(requests(scenario, "omit-managed-fields"))[1]]
    assert with_them == without
