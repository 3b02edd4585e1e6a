"""`fightwatch audit` and `fightwatch replay --audit` as a user runs them, on audit events and watch events recorded
together from a real kube-apiserver (tests/fixtures/audit): output, exit status, bad input, and no secret value."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from harness.audit_scenarios import SECRET_VALUE

FIXTURES = Path(__file__).parents[1] / "fixtures" / "audit" / "v1.20"
SCENARIOS = (
    "rmw-fight",
    "storm-fields",
    "apply-stuck",
    "scale-fight",
    "cascade",
    "shared-manager",
    "noop-loop",
    "benign",
)


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", *args], input=stdin, capture_output=True, check=False, timeout=120
    )


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def findings(result: subprocess.CompletedProcess[bytes]) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("level", ["metadata", "request-response"])
def test_audit_finds_storms_stuck_appliers_and_no_op_loops_in_every_scenario_at_once(level: str) -> None:
    result = run("audit", "--output", "json", "--fail-on-findings", *(fixture(f"{s}.{level}.jsonl") for s in SCENARIOS))
    assert result.returncode == 3, result.stderr
    found = sorted((f["type"], f["object"]["namespace"].removesuffix("-full")) for f in findings(result))  # type: ignore[index, union-attr]
    assert found == [
        ("apply_conflict", "apply-stuck"),
        ("conflict_storm", "cascade"),
        ("conflict_storm", "rmw-fight"),
        ("conflict_storm", "storm-fields"),
        ("noop_writes", "noop-loop"),
    ]


def test_audit_json_names_the_object_by_resource_and_every_client() -> None:
    result = run("audit", "-o", "json", fixture("rmw-fight.metadata.jsonl"))
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
        "uid": storm["object"]["uid"],  # type: ignore[index]
    }
    assert storm["conflicts"] == 12
    assert {(c["manager"], c["conflicts"], c["writes"]) for c in storm["clients"]} == {  # type: ignore[attr-defined, index]
        ("labeler", 12, 13),
        ("argocd-application-controller", 0, 12),
    }
    assert {c["user"] for c in storm["clients"]} == {  # type: ignore[attr-defined, index]
        "system:serviceaccount:ops:labeler",
        "system:serviceaccount:argocd:argocd-application-controller",
    }


def test_audit_table_and_totals() -> None:
    result = run("audit", fixture("noop-loop.metadata.jsonl"), fixture("benign.metadata.jsonl"))
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.decode().split())  # (the table wraps to the terminal)
    assert "no-op writes" in out
    assert (
        "1. settings-sync (system:serviceaccount:ops:settings-sync) keeps writing it without changing anything" in out
    )
    assert "0 conflict storms, 0 apply conflicts, 1 no-op write loop (1 active)." in out
    assert "Audit: 112 events" in out


def test_benign_traffic_passes_the_ci_gate() -> None:
    result = run("audit", "--fail-on-findings", fixture("benign.metadata.jsonl"))
    assert result.returncode == 0, result.stderr
    assert "No conflict storms, stuck appliers or no-op write loops found." in result.stdout.decode()


def test_replay_with_audit_names_the_users_behind_a_fights_writers_and_its_conflicts() -> None:
    result = run(
        "replay", "-o", "json", fixture("rmw-fight.watch.jsonl"), "--audit", fixture("rmw-fight.metadata.jsonl")
    )
    assert result.returncode == 0, result.stderr
    by_type: dict[str, list[dict]] = {}  # type: ignore[type-arg]
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
    # the storm is told it is the fight's failed half, and named as the watch names the object
    (storm,) = by_type["conflict_storm"]
    assert storm["hint"].startswith("This is a fight: data.mode keeps changing hands")
    assert storm["fields"] == ["data.mode"]
    assert (storm["object"]["kind"], storm["object"]["uid"]) == ("ConfigMap", fight["object"]["uid"])


def test_replay_with_audit_tells_contention_over_different_fields_from_a_fight() -> None:
    result = run(
        "replay", "-o", "json", fixture("storm-fields.watch.jsonl"), "--audit", fixture("storm-fields.metadata.jsonl")
    )
    assert result.returncode == 0, result.stderr
    (storm,) = findings(result)
    assert storm["type"] == "conflict_storm"
    assert str(storm["hint"]).startswith("The watch sees no field changing hands")


def test_replay_with_audit_names_the_user_behind_an_unattributed_writer() -> None:
    result = run(
        "replay", "-o", "json", fixture("scale-fight.watch.jsonl"), "--audit", fixture("scale-fight.metadata.jsonl")
    )
    assert result.returncode == 0, result.stderr
    fights = {f["object"]["namespace"]: f for f in findings(result) if f["type"] == "fight"}
    fight = fights["scale-fight"]
    assert fight["fields"] == ["spec.replicas"]
    # v1.20 records no managedFields entry for the scale subresource's writes: the watch cannot name that writer
    users = {w["manager"]: w["users"] for w in fight["writers"]}
    assert users == {
        None: ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"],
        "helm": ["system:serviceaccount:ci:helm"],
    }
    # the twin namespace, whose audit log was not given, stays as the watch alone tells it
    assert {w["manager"]: w["users"] for w in fights["scale-fight-full"]["writers"]} == {None: [], "helm": []}


def test_conflicts_of_a_controller_follow_from_the_fight_over_the_object_it_controls() -> None:
    alone = findings(run("audit", "-o", "json", fixture("cascade.metadata.jsonl")))
    assert [(f["type"], f["object"]["name"], f["related"]) for f in alone] == [("conflict_storm", "app-rendered", None)]
    result = run("replay", "-o", "json", fixture("cascade.watch.jsonl"), "--audit", fixture("cascade.metadata.jsonl"))
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


def test_replay_with_audit_tells_apart_the_users_that_share_one_field_manager() -> None:
    result = run(
        "replay",
        "-o",
        "json",
        fixture("shared-manager.watch.jsonl"),
        "--audit",
        fixture("shared-manager.metadata.jsonl"),
    )
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
    assert fights["shared-manager-full"]["hint"].startswith("The values flip back and forth")


def test_no_secret_value_reaches_any_output() -> None:
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    raw = (FIXTURES / "benign.request-response.jsonl").read_text()
    assert encoded in raw  # the log holds it (so this test could fail) ...
    logs = [fixture(f"{s}.{level}.jsonl") for s in SCENARIOS for level in ("metadata", "request-response")]
    captures = [fixture(f"{s}.watch.jsonl") for s in SCENARIOS]
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


def test_a_truncated_log_keeps_what_was_read_and_names_file_and_line(tmp_path: Path) -> None:
    data = (FIXTURES / "rmw-fight.metadata.jsonl").read_bytes()
    cut = tmp_path / "audit.log"
    cut.write_bytes(data[: len(data) - 200])  # the last event broken off
    result = run("audit", str(cut))
    assert result.returncode == 2
    assert "1 conflict storm" in result.stdout.decode()  # what was read before is analysed and printed
    err = result.stderr.decode()
    assert f"{cut}:73: not valid JSON" in err
    assert "the findings above cover the 72 events read before this point" in err


def test_a_bad_event_is_named_by_file_and_line_and_can_be_skipped(tmp_path: Path) -> None:
    lines = (FIXTURES / "noop-loop.metadata.jsonl").read_bytes().splitlines()
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
    result = run("audit", "-o", "json", "-", stdin=(FIXTURES / "apply-stuck.request-response.jsonl").read_bytes())
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
