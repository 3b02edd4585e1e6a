"""The request engine on audit events recorded from a real kube-apiserver (tests/fixtures/audit, both audit levels):
what it finds, whom it names, and what it leaves alone. Times are shifted (never invented) to test rates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from watcher.config import Config, DetectionSettings
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request, parse_apply_conflict
from watcher.model import Finding, FindingState, FindingType
from watcher.sources.audit import AuditStats, read_audit_log

FIXTURES = Path(__file__).parents[1] / "fixtures" / "audit" / "v1.20"
LEVELS = ("metadata", "request-response")
GITOPS = "system:serviceaccount:argocd:argocd-application-controller"
LABELER = "system:serviceaccount:ops:labeler"
ANNOTATOR = "system:serviceaccount:ops:annotator"
DEPLOYER = "system:serviceaccount:ci:deployer"
SYNC = "system:serviceaccount:ops:settings-sync"


def requests(scenario: str, level: str) -> list[Request]:
    return list(read_audit_log(str(FIXTURES / f"{scenario}.{level}.jsonl"), stats=AuditStats()))


def analyse(items: list[Request], settings: DetectionSettings | None = None) -> tuple[RequestEngine, list[Finding]]:
    engine = RequestEngine(settings or Config().detection)
    for request in items:
        engine.process(request)
    return engine, engine.active() + engine.resolved()


@pytest.mark.parametrize("level", LEVELS)
def test_a_stale_read_modify_write_fight_is_a_conflict_storm_naming_loser_and_winner(level: str) -> None:
    _, findings = analyse(requests("rmw-fight", level))
    (storm,) = findings
    assert storm.type is FindingType.CONFLICT_STORM
    assert (storm.object.resource, storm.object.name) == ("configmaps", "settings")
    assert storm.conflicts == 12
    by_user = {c.user: c for c in storm.clients}
    assert by_user[LABELER].conflicts == 12
    assert by_user[LABELER].manager == "labeler"  # derived from "labeler/0.3.1 (linux/amd64)"
    assert by_user[LABELER].user_agent == "labeler/0.3.1 (linux/amd64)"
    assert (by_user[GITOPS].conflicts, by_user[GITOPS].writes) == (0, 12)
    assert storm.clients[0].user == LABELER  # the most conflicts first
    assert "meanwhile argocd-application-controller" in storm.summary
    # audit alone cannot tell a fight from contention over different fields: it says how to find out
    assert "--audit" in storm.hint


@pytest.mark.parametrize("level", LEVELS)
def test_a_client_retrying_with_the_same_stale_version_is_told_to_re_read(level: str) -> None:
    _, findings = analyse(requests("storm-fields", level))
    (storm,) = findings
    assert storm.type is FindingType.CONFLICT_STORM
    assert [(c.user, c.conflicts) for c in storm.clients if c.conflicts] == [(ANNOTATOR, 30)]
    assert "same stale resourceVersion" in storm.hint


@pytest.mark.parametrize("level", LEVELS)
def test_an_applier_without_force_rejected_every_time_is_stuck(level: str) -> None:
    _, findings = analyse(requests("apply-stuck", level))
    (stuck,) = findings
    assert stuck.type is FindingType.APPLY_CONFLICT
    assert [(c.user, c.manager, c.conflicts) for c in stuck.clients] == [(DEPLOYER, "kubectl", 6)]
    if level == "request-response":  # the API server's message names the owner and the fields
        assert stuck.fields == ("data.mode",)
        assert {w.writer.manager for w in stuck.writers} == {"kubectl", "helm"}
        assert "'helm' owns data.mode" in stuck.hint
    else:  # Metadata level records no message
        assert stuck.fields == ()
        assert "--dry-run=server" in stuck.hint


@pytest.mark.parametrize("level", LEVELS)
def test_updates_that_change_nothing_are_a_no_op_loop(level: str) -> None:
    _, findings = analyse(requests("noop-loop", level))
    (noop,) = findings
    assert noop.type is FindingType.NOOP_WRITES
    (client,) = noop.clients
    assert (client.user, client.manager) == (SYNC, "settings-sync")
    # 15 updates carry one resourceVersion: with responses logged each says so itself; at Metadata level an
    # update is known to have changed nothing when the next one carries its version too (the last one is not)
    assert client.noop_writes == (15 if level == "request-response" else 14)
    assert noop.writes == client.noop_writes


@pytest.mark.parametrize("level", LEVELS)
def test_benign_traffic_is_not_reported(level: str) -> None:
    engine, findings = analyse(requests("benign", level))
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
    rejected = recorded[-1]
    assert rejected.code == 409
    changes = engine.process(replace(rejected, code=200, reason="", message="", time=rejected.time + 1))
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
