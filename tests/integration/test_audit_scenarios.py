"""The audit scenarios run live on a real kube-apiserver with the audit log backend (the clients of
`harness/audit_scenarios.py`, each with its own identity and User-Agent), analysed as they happened: the findings of
the recorded fixtures, from events no one has looked at before."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from harness import audit_scenarios as scenarios
from harness.control_plane import ControlPlane

pytestmark = pytest.mark.integration
NAMES = list(scenarios.SCENARIOS)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, list[bytes], Path]]:
    workdir = tmp_path_factory.mktemp("audit-scenarios")
    cp = scenarios.start(workdir, NAMES)
    try:
        events, _ = asyncio.run(scenarios.record(cp, NAMES))
        assert cp.audit_log is not None
        lines = scenarios.wait_for_log(cp.audit_log, NAMES)
        capture = workdir / "watch.jsonl"
        capture.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
        yield cp, lines, capture
    finally:
        cp.stop()


def fightwatch(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True, check=False, timeout=120)


def test_the_whole_live_log_gives_each_scenarios_finding_and_nothing_benign(
    recorded: tuple[ControlPlane, list[bytes], Path],
) -> None:
    cp, _, _ = recorded
    assert cp.audit_log is not None
    result = fightwatch("audit", "-o", "json", str(cp.audit_log))
    assert result.returncode == 0, result.stderr
    found = sorted((f["type"], f["object"]["namespace"]) for f in map(orjson.loads, result.stdout.splitlines()))
    expected = [
        ("apply_conflict", "apply-stuck"),
        ("conflict_storm", "cascade"),
        ("conflict_storm", "rmw-fight"),
        ("conflict_storm", "storm-fields"),
        ("noop_writes", "noop-loop"),
    ]
    full = [(kind, ns + scenarios.FULL_SUFFIX) for kind, ns in expected]
    assert found == sorted(expected + full)


def test_live_watch_and_audit_joined_name_the_users_of_the_fight(
    recorded: tuple[ControlPlane, list[bytes], Path],
) -> None:
    cp, _, capture = recorded
    assert cp.audit_log is not None
    result = fightwatch("replay", "-o", "json", str(capture), "--audit", str(cp.audit_log))
    assert result.returncode == 0, result.stderr
    findings = [orjson.loads(line) for line in result.stdout.splitlines()]
    (fight,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "rmw-fight"]
    assert {w["manager"]: w["users"] for w in fight["writers"]} == {
        "argocd-application-controller": [scenarios.GITOPS.user],
        "labeler": [scenarios.LABELER.user],
    }
    assert fight["conflicts"] == 12
    storms = {f["object"]["namespace"]: f for f in findings if f["type"] == "conflict_storm"}
    assert storms["rmw-fight"]["hint"].startswith("This is a fight")
    assert storms["storm-fields"]["hint"].startswith("The watch sees no field changing hands")
    # the autoscaler's scale writes carry no managedFields entry on v1.20: the audit events name it
    (scaled,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "scale-fight"]
    assert {w["manager"]: w["users"] for w in scaled["writers"]} == {
        None: [scenarios.AUTOSCALER.user],
        "helm": [scenarios.HELM.user],
    }
    # the renderer's conflicts follow from the fight over the ConfigMap it renders
    (upstream,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "cascade"]
    (downstream,) = [f for f in findings if f["type"] == "conflict_storm" and f["object"]["namespace"] == "cascade"]
    assert downstream["related"] == upstream["id"]
    # two operators writing as one field manager: the watch sees one manager, the audit events two users
    (shared,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "shared-manager"]
    assert [(w["manager"], w["users"]) for w in shared["writers"]] == [
        ("manager", sorted([scenarios.LABELER.user, scenarios.ANNOTATOR.user]))
    ]
    # a watch finding nowhere else: the benign namespace
    assert not [f for f in findings if f["object"]["namespace"].startswith("benign")]
