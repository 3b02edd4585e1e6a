"""`fightwatch audit` and `fightwatch replay --audit` as a user runs them, on audit events and watch events recorded
together from a real kube-apiserver (tests/fixtures/audit: the current release, and v1.20 for compatibility):
output, exit status, bad input, and no secret value."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.audit_scenarios import SECRET_VALUE
from tests.unit.audit_recordings import CURRENT, LEVELS, SCENARIOS, V1_20

RECORDINGS = pytest.mark.parametrize("recording", [CURRENT, V1_20], ids=["current", "v1.20"])
HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", *args], input=stdin, capture_output=True, check=False, timeout=120
    )


def fixture(name: str, recording: Path = CURRENT) -> str:
    return str(recording / name)


def pod(recording: Path, name: str) -> str | None:
    """The pod of a client of the current recordings (whose tokens are bound to pods), None in v1.20's."""
    return name if recording is CURRENT else None


def scenario(namespace: str) -> str:
    """The scenario a namespace is one of (its level's suffix removed)."""
    return namespace.removesuffix("-full").removesuffix("-omf")


def findings(result: subprocess.CompletedProcess[bytes]) -> list[dict[str, Any]]:
    """The findings of `-o json` output, one JSON document a line (read as JSON: values of any type)."""
    return [orjson.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize(
    ("recording", "level"),
    [(r, level) for r in (CURRENT, V1_20) for level in LEVELS[r]],
    ids=[f"{'current' if r is CURRENT else 'v1.20'}-{level}" for r in (CURRENT, V1_20) for level in LEVELS[r]],
)
def test_audit_finds_storms_stuck_appliers_and_no_op_loops_in_every_scenario_at_once(
    recording: Path, level: str
) -> None:
    logs = (fixture(f"{s}.{level}.jsonl", recording) for s in SCENARIOS[recording])
    result = run("audit", "--output", "json", "--fail-on-findings", *logs)
    assert result.returncode == 3, result.stderr
    found = sorted((f["type"], scenario(f["object"]["namespace"])) for f in findings(result))
    assert found == [
        ("apply_conflict", "apply-stuck"),
        ("conflict_storm", "cascade"),
        ("conflict_storm", "rmw-fight"),
        ("conflict_storm", "storm-fields"),
        ("noop_writes", "noop-loop"),
    ]


@RECORDINGS
def test_audit_json_names_the_object_by_resource_and_every_client(recording: Path) -> None:
    result = run("audit", "-o", "json", fixture("rmw-fight.metadata.jsonl", recording))
    assert result.returncode == 0, result.stderr
    (storm,) = findings(result)
    assert storm["object"] == {
        "apiGroup": "",
        "apiVersion": "v1",
        "kind": None,  # an audit event names the resource, not the kind
        "resource": "configmaps",
        "subresource": None,
        "namespace": "rmw-fight",
        "name": "settings",
        "uid": storm["object"]["uid"],
    }
    assert storm["conflicts"] == 12
    assert {(c["manager"], c["conflicts"], c["writes"]) for c in storm["clients"]} == {
        ("labeler", 12, 13),
        ("argocd-application-controller", 0, 12),
    }
    assert {c["user"]: c["pod"] for c in storm["clients"]} == {
        "system:serviceaccount:ops:labeler": pod(recording, "ops/labeler-6d9c7f5b4-qx2lp"),
        "system:serviceaccount:argocd:argocd-application-controller": pod(
            recording, "argocd/argocd-application-controller-0"
        ),
    }


@pytest.mark.parametrize(
    ("recording", "client"),
    [
        (CURRENT, "settings-sync (system:serviceaccount:ops:settings-sync, pod settings-sync-7b5d8c6f9-w2vjn)"),
        (V1_20, "settings-sync (system:serviceaccount:ops:settings-sync)"),
    ],
    ids=["current", "v1.20"],
)
def test_audit_table_and_totals(recording: Path, client: str) -> None:
    logs = [fixture("noop-loop.metadata.jsonl", recording), fixture("benign.metadata.jsonl", recording)]
    result = run("audit", *logs)
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.decode().split())  # (the table wraps to the terminal)
    assert "no-op writes" in out
    assert f"1. {client} keeps writing it without changing anything" in out
    assert "0 conflict storms, 0 apply conflicts, 1 no-op write loop (1 active)." in out
    events = sum(len(Path(log).read_bytes().splitlines()) for log in logs)
    assert f"Audit: {events} events" in out


@RECORDINGS
def test_benign_traffic_passes_the_ci_gate(recording: Path) -> None:
    result = run("audit", "--fail-on-findings", fixture("benign.metadata.jsonl", recording))
    assert result.returncode == 0, result.stderr
    assert "No conflict storms, stuck appliers or no-op write loops found." in result.stdout.decode()


@RECORDINGS
def test_replay_with_audit_names_the_users_behind_a_fights_writers_and_its_conflicts(recording: Path) -> None:
    watch, audit = fixture("rmw-fight.watch.jsonl", recording), fixture("rmw-fight.metadata.jsonl", recording)
    result = run("replay", "-o", "json", watch, "--audit", audit)
    assert result.returncode == 0, result.stderr
    by_type: dict[str, list[dict[str, Any]]] = {}
    for f in findings(result):
        by_type.setdefault(str(f["type"]), []).append(f)
    # the fight in the namespace logged at Metadata level has the audit's clients; its -full twin has none
    fights = {f["object"]["namespace"]: f for f in by_type["fight"]}
    fight, twin = fights["rmw-fight"], fights["rmw-fight-full"]
    assert {w["manager"]: w["users"] for w in fight["writers"]} == {
        "argocd-application-controller": ["system:serviceaccount:argocd:argocd-application-controller"],
        "labeler": ["system:serviceaccount:ops:labeler"],
    }
    assert fight["conflicts"] == 12
    assert fight["object"]["resource"] == "configmaps"
    assert "12 of their writes failed with 409 Conflict (labeler)" in fight["summary"]
    assert (twin["clients"], twin["conflicts"]) == ([], 0)
    # the storm is the fight's failed half: it follows from the fight, and is named as the watch names the object
    (storm,) = by_type["conflict_storm"]
    assert storm["related"] == fight["id"]
    assert storm["hint"].startswith("These conflicts follow from the fight on the same object (ConfigMap rmw-fight/")
    assert storm["fields"] == ["data.mode"]
    assert (storm["object"]["kind"], storm["object"]["uid"]) == ("ConfigMap", fight["object"]["uid"])


@RECORDINGS
def test_replay_with_audit_tells_contention_over_different_fields_from_a_fight(recording: Path) -> None:
    watch, audit = fixture("storm-fields.watch.jsonl", recording), fixture("storm-fields.metadata.jsonl", recording)
    result = run("replay", "-o", "json", watch, "--audit", audit)
    assert result.returncode == 0, result.stderr
    (storm,) = findings(result)
    assert storm["type"] == "conflict_storm"
    assert str(storm["hint"]).startswith("The watch sees no field changing hands")


def test_replay_with_audit_names_the_user_behind_an_unattributed_writer() -> None:
    watch, audit = fixture("scale-fight.watch.jsonl", V1_20), fixture("scale-fight.metadata.jsonl", V1_20)
    result = run("replay", "-o", "json", watch, "--audit", audit)
    assert result.returncode == 0, result.stderr
    fights = {f["object"]["namespace"]: f for f in findings(result) if f["type"] == "fight"}
    fight = fights["scale-fight"]
    assert fight["fields"] == ["spec.replicas"]
    # v1.20 records no managedFields entry for the scale subresource's writes: the watch cannot name that writer, the
    # audit events do (its requests, matched to its writes by time)
    users = {w["manager"]: w["users"] for w in fight["writers"]}
    assert users == {
        "kube-controller-manager": ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"],
        "helm": ["system:serviceaccount:ci:helm"],
    }
    (named,) = [w for w in fight["writers"] if w["named_from"] == "audit"]
    assert (named["manager"], named["subresource"]) == ("kube-controller-manager", "scale")
    # the twin namespace, whose audit log was not given, stays as the watch alone tells it
    assert {w["manager"]: w["users"] for w in fights["scale-fight-full"]["writers"]} == {None: [], "helm": []}


def test_replay_with_audit_names_the_user_behind_a_scale_subresource_writer() -> None:
    # current releases record the autoscaler's scale writes in managedFields, with `subresource: scale`
    watch, audit = fixture("scale-fight.watch.jsonl"), fixture("scale-fight.metadata.jsonl")
    result = run("replay", "-o", "json", watch, "--audit", audit)
    assert result.returncode == 0, result.stderr
    fights = {f["object"]["namespace"]: f for f in findings(result) if f["type"] == "fight"}
    fight = fights["scale-fight"]
    assert fight["fields"] == ["spec.replicas"]
    assert [(w["manager"], w["operation"], w["subresource"], w["users"]) for w in fight["writers"]] == [
        ("custom-autoscaler", "Update", "scale", ["system:serviceaccount:autoscaling:custom-autoscaler"]),
        ("helm", "Apply", None, ["system:serviceaccount:ci:helm"]),
    ]
    assert [w["users"] for w in fights["scale-fight-full"]["writers"]] == [[], []]


def test_replay_with_audit_names_the_hpa_behind_kube_controller_managers_scale_writes() -> None:
    """The real HPA against `kubectl apply`: its writer is `kube-controller-manager (Update, scale)`, the manager the
    deployment controller writes the Deployment's status as; the audit events tell their service accounts apart."""
    result = run(
        "replay", "-o", "json", fixture("hpa-fight.watch.jsonl"), "--audit", fixture("hpa-fight.metadata.jsonl")
    )
    assert result.returncode == 0, result.stderr
    (fight,) = [f for f in findings(result) if f["object"]["namespace"] == "hpa-fight"]
    assert (fight["type"], fight["fields"]) == ("fight", ["spec.replicas"])
    assert [(w["manager"], w["operation"], w["subresource"], w["users"]) for w in fight["writers"]] == [
        ("kube-controller-manager", "Update", "scale", [HPA]),
        ("kubectl-client-side-apply", "Update", None, ["system:serviceaccount:ci:deployer"]),
    ]
    clients = {(c["user"], c["manager"], c["pod"]) for c in fight["clients"]}
    assert {
        (HPA, "kube-controller-manager", None),
        ("system:serviceaccount:kube-system:deployment-controller", "kube-controller-manager", None),
        ("system:serviceaccount:ci:deployer", "kubectl-client-side-apply", "ci/deploy-pipeline-28340520-4k7xp"),
    } <= clients
    # the status writes that failed meanwhile were the deployment controller's: named by its user, one manager
    # being several controllers'
    assert (
        "of their writes failed with 409 Conflict "
        "(kube-controller-manager as system:serviceaccount:kube-system:deployment-controller)" in fight["summary"]
    )


@RECORDINGS
def test_conflicts_of_a_controller_follow_from_the_fight_over_the_object_it_controls(recording: Path) -> None:
    watch, audit = fixture("cascade.watch.jsonl", recording), fixture("cascade.metadata.jsonl", recording)
    alone = findings(run("audit", "-o", "json", audit))
    assert [(f["type"], f["object"]["name"], f["related"]) for f in alone] == [("conflict_storm", "app-rendered", None)]
    result = run("replay", "-o", "json", watch, "--audit", audit)
    assert result.returncode == 0, result.stderr
    by_object = {(f["type"], f["object"]["namespace"], f["object"]["name"]): f for f in findings(result)}
    fight = by_object["fight", "cascade", "app"]
    storm = by_object["conflict_storm", "cascade", "app-rendered"]
    assert storm["related"] == fight["id"]
    assert storm["object"]["kind"] == "ConfigMap"
    assert f"follows from the fight on its controller ConfigMap cascade/app (finding {fight['id']})" in storm["summary"]
    assert storm["hint"].startswith("These conflicts follow from the fight on its controller")
    assert [c["user"] for c in storm["clients"] if c["conflicts"]] == ["system:serviceaccount:ops:app-renderer"]
    assert fight["related"] is None


@RECORDINGS
def test_replay_with_audit_tells_apart_the_users_that_share_one_field_manager(recording: Path) -> None:
    watch, audit = fixture("shared-manager.watch.jsonl", recording), fixture("shared-manager.metadata.jsonl", recording)
    result = run("replay", "-o", "json", watch, "--audit", audit)
    assert result.returncode == 0, result.stderr
    fights = {f["object"]["namespace"]: f for f in findings(result)}
    fight = fights["shared-manager"]
    users = ["system:serviceaccount:ops:annotator", "system:serviceaccount:ops:labeler"]
    assert [(w["manager"], w["users"]) for w in fight["writers"]] == [("manager", users)]
    assert fight["hint"].startswith(
        f"The audit events name the writers the watch cannot tell apart: {', '.join(users)}"
    )
    assert "2 users write as 'manager'" in fight["summary"]
    # without the audit log, the watch alone can only suspect it
    assert fights["shared-manager-full"]["hint"].startswith("Two writers stand behind one name: every write is")


@RECORDINGS
def test_no_secret_value_reaches_any_output(recording: Path) -> None:
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    for level in LEVELS[recording][1:]:
        raw = (recording / f"benign.{level}.jsonl").read_text()
        assert encoded in raw  # the log holds it (so this test could fail) ...
    logs = [fixture(f"{s}.{level}.jsonl", recording) for s in SCENARIOS[recording] for level in LEVELS[recording]]
    captures = [fixture(f"{s}.watch.jsonl", recording) for s in SCENARIOS[recording]]
    for args in (
        ("audit", *logs),
        ("audit", "-o", "json", *logs),
        ("replay", *captures, "--audit", *logs),
        ("replay", "-o", "json", *captures, "--audit", *logs),
    ):
        result = run(*args)
        assert result.returncode == 0, result.stderr
        for text in (result.stdout, result.stderr):  # ... no output does
            assert SECRET_VALUE.encode() not in text
            assert encoded.encode() not in text


@RECORDINGS
def test_a_truncated_log_keeps_what_was_read_and_names_file_and_line(recording: Path, tmp_path: Path) -> None:
    data = (recording / "rmw-fight.metadata.jsonl").read_bytes()
    last = len(data.splitlines())
    cut = tmp_path / "audit.log"
    cut.write_bytes(data[: len(data) - 200])  # the last event broken off
    result = run("audit", str(cut))
    assert result.returncode == 2
    assert "1 conflict storm" in result.stdout.decode()  # what was read before is analysed and printed
    err = result.stderr.decode()
    assert f"{cut}:{last}: not valid JSON" in err
    assert f"the findings above cover the {last - 1} events read before this point" in err


@RECORDINGS
def test_a_bad_event_is_named_by_file_and_line_and_can_be_skipped(recording: Path, tmp_path: Path) -> None:
    lines = (recording / "noop-loop.metadata.jsonl").read_bytes().splitlines()
    lines[3] = b'{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"Sideways"}'
    lines[5] = b"not json"
    broken = tmp_path / "audit.log"
    broken.write_bytes(b"\n".join(lines) + b"\n")
    result = run("audit", str(broken))
    assert result.returncode == 2
    assert f"{broken}:4: unknown stage 'Sideways'" in result.stderr.decode()
    skipped = run("audit", "--skip-invalid", str(broken))
    assert skipped.returncode == 0, skipped.stderr
    assert "2 invalid events skipped." in skipped.stdout.decode()
    assert "1 no-op write loop" in skipped.stdout.decode()


def test_audit_reads_standard_input() -> None:
    result = run("audit", "-o", "json", "-", stdin=(CURRENT / "apply-stuck.request-response.jsonl").read_bytes())
    assert result.returncode == 0, result.stderr
    assert [f["type"] for f in findings(result)] == ["apply_conflict"]


def test_audit_takes_the_config_thresholds_and_ignore_rules(tmp_path: Path) -> None:
    config = tmp_path / "fightwatch.yaml"
    config.write_text(
        "detection:\n"
        "  conflict_storm: {min_conflicts: 100}\n"  # more than the scenario's 12
        "  ignore:\n"
        "    - {kind: ConfigMap, namespace: noop-loop}\n"
    )
    logs = [fixture("rmw-fight.metadata.jsonl"), fixture("noop-loop.metadata.jsonl")]
    assert len(findings(run("audit", "-o", "json", *logs))) == 2
    result = run("audit", "-o", "json", "--config", str(config), *logs)
    assert result.returncode == 0, result.stderr
    assert findings(result) == []
    broken = tmp_path / "broken.yaml"
    broken.write_text("detection:\n  conflict_storm: {min_conflict: 3}\n")
    bad = run("audit", "--config", str(broken), *logs)
    assert bad.returncode == 2
    assert "min_conflict" in bad.stderr.decode()
