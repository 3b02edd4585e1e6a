"""The audit scenarios run live on a real kube-apiserver with the audit log backend (the clients of
`harness/audit_scenarios.py`, each a ServiceAccount with a token bound to a Pod of its own, and the real
kube-controller-manager), analysed as they happened: the findings of the recorded fixtures, from events no one has
looked at before, on the current and the oldest supported release."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import audit_scenarios as scenarios
from harness.control_plane import ControlPlane

pytestmark = pytest.mark.integration
NAMES = list(scenarios.SCENARIOS)
Recorded = tuple[ControlPlane, list[bytes], Path]
KUBE_SYSTEM = "system:serviceaccount:kube-system:"


# The scenarios whose Deployment `web` kube-controller-manager's deployment controller writes the status of while the
# scenario fights over its spec, and the users of the fight that can lose a write to it (Helm applies with force: it
# never conflicts; kubectl's client-side apply patches without a resourceVersion: neither).
RACED = {"hpa-fight": frozenset({scenarios.HPA_CONTROLLER}), "scale-fight": frozenset({scenarios.AUTOSCALER.user})}


def raced(finding: dict[str, Any]) -> str | None:
    """The scenario of `RACED` whose namespace the finding's object is in, if any."""
    namespace = finding["object"]["namespace"]
    return next((name for name in RACED if namespace in (name + suffix for suffix in scenarios.VARIANTS)), None)


def place(finding: dict[str, Any]) -> tuple[str, str]:
    return (finding["object"]["namespace"], finding["object"]["name"])


def timed(finding: dict[str, Any]) -> bool:
    """A finding that the deployment controller's writes bring out in a scenario of `RACED`, beside the fight the
    scenario is about: whether its status writes and the fighters' collide often enough to make a conflict storm, and
    whether it is at work while the fight lasts (a hot loop of its reactions), depends on how fast the machine is."""
    return raced(finding) is not None and finding["type"] != "fight"


def check_timed(finding: dict[str, Any], findings: list[dict[str, Any]]) -> None:
    """Such a finding is what the race makes, on the Deployment the fight is over (or on its ReplicaSets): a storm
    whose losers are kube-controller-manager's controllers or the fighters that lose to them; a hot loop of the
    deployment controller's status writes reacting to the fighters'. Where the fight is among `findings` (those of the
    same analysis: with the watch), either follows from it."""
    scenario = raced(finding)
    assert scenario is not None
    assert finding["object"]["name"] == "web" or finding["object"]["name"].startswith("web-")
    fights = [f for f in findings if f["type"] == "fight" and place(f) == place(finding)]
    for fight in fights:
        assert finding["related"] == fight["id"]
    if finding["type"] == "hot_loop":
        assert fights
        assert ("kube-controller-manager", "Update", "status") in [w[:3] for w in writers(finding)]
        return
    assert finding["type"] == "conflict_storm"
    losers = {c["user"] for c in finding["clients"] if c["conflicts"]}
    assert losers
    assert all(user.startswith(KUBE_SYSTEM) or user in RACED[scenario] for user in losers)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Recorded]]:
    """The scenarios on every tested release, run at the same time (each its own control plane): they wait on real
    time far more than they compute."""
    releases = scenarios.tested_releases()
    workdirs = {release: tmp_path_factory.mktemp(f"audit-scenarios-{release}") for release in releases}
    planes = scenarios.start_each(workdirs, NAMES)
    try:

        async def record_all() -> list[tuple[list[dict[str, Any]], object]]:
            return await asyncio.gather(*(scenarios.record(planes[release], NAMES) for release in releases))

        found: dict[str, Recorded] = {}
        for release, (events, _) in zip(releases, asyncio.run(record_all()), strict=True):
            cp = planes[release]
            assert cp.audit_log is not None
            lines = scenarios.wait_for_log(cp.audit_log, NAMES)
            capture = workdirs[release] / "watch.jsonl"
            capture.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
            found[release] = (cp, lines, capture)
        yield found
    finally:
        for cp in planes.values():
            cp.stop()


@pytest.fixture(scope="module", params=scenarios.tested_releases())
def recorded(request: pytest.FixtureRequest, recordings: dict[str, Recorded]) -> Recorded:
    return recordings[request.param]


def fightwatch(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True, check=False, timeout=120)


def joined(recorded: Recorded) -> list[dict[str, Any]]:
    """`replay` of the run's watch with its whole audit log."""
    cp, _, capture = recorded
    assert cp.audit_log is not None
    result = fightwatch("replay", "-o", "json", str(capture), "--audit", str(cp.audit_log))
    assert result.returncode == 0, result.stderr
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def writers(finding: dict[str, Any]) -> list[tuple[str | None, str | None, str | None, list[str]]]:
    return [(w["manager"], w["operation"], w["subresource"], w["users"]) for w in finding["writers"]]


def test_the_whole_live_log_gives_each_scenarios_finding_and_nothing_benign(recorded: Recorded) -> None:
    cp, _, _ = recorded
    assert cp.audit_log is not None
    result = fightwatch("audit", "-o", "json", str(cp.audit_log))
    assert result.returncode == 0, result.stderr
    found = [orjson.loads(line) for line in result.stdout.splitlines()]
    for finding in filter(timed, found):
        check_timed(finding, found)
    found = [f for f in found if not timed(f)]
    expected = [
        ("apply_conflict", "apply-stuck"),
        ("conflict_storm", "cascade"),
        ("conflict_storm", "rmw-fight"),
        ("conflict_storm", "storm-fields"),
        ("noop_writes", "noop-loop"),
    ]
    # every audit level finds them: Metadata, RequestResponse, and RequestResponse without managedFields
    every_level = [(kind, ns + suffix) for kind, ns in expected for suffix in scenarios.VARIANTS]
    assert sorted((f["type"], f["object"]["namespace"]) for f in found) == sorted(every_level)
    # each client named with the pod its token is bound to
    storms = {f["object"]["namespace"]: f for f in found if f["type"] == "conflict_storm"}
    assert {(c["user"], c["pod"]) for c in storms["rmw-fight"]["clients"]} == {
        (scenarios.LABELER.user, scenarios.LABELER.pod_ref),
        (scenarios.GITOPS.user, scenarios.GITOPS.pod_ref),
    }
    (stuck,) = [f for f in found if f["type"] == "apply_conflict" and f["object"]["namespace"] == "apply-stuck"]
    assert [(c["user"], c["pod"], c["manager"]) for c in stuck["clients"]] == [
        (scenarios.DEPLOYER.user, scenarios.DEPLOYER.pod_ref, "kubectl")  # the real kubectl apply --server-side
    ]


def test_live_watch_and_audit_joined_name_the_users_of_the_fight(recorded: Recorded) -> None:
    findings = joined(recorded)
    (fight,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "rmw-fight"]
    assert {w["manager"]: w["users"] for w in fight["writers"]} == {
        "argocd-application-controller": [scenarios.GITOPS.user],
        "labeler": [scenarios.LABELER.user],
    }
    assert fight["conflicts"] == 12
    storms = {f["object"]["namespace"]: f for f in findings if f["type"] == "conflict_storm"}
    assert storms["rmw-fight"]["related"] == fight["id"]  # (the fight's failed half)
    assert storms["rmw-fight"]["hint"].startswith("These conflicts follow from the fight on the same object")
    assert storms["storm-fields"]["hint"].startswith("The watch sees no field changing hands")
    # the autoscaler's scale writes have a managedFields entry of their own (subresource scale): the audit events
    # name its user
    (scaled,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "scale-fight"]
    assert writers(scaled) == [
        ("custom-autoscaler", "Update", "scale", [scenarios.AUTOSCALER.user]),
        ("helm", "Apply", None, [scenarios.HELM.user]),
    ]
    # the renderer's conflicts follow from the fight over the ConfigMap it renders
    (upstream,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "cascade"]
    (downstream,) = [f for f in findings if f["type"] == "conflict_storm" and f["object"]["namespace"] == "cascade"]
    assert downstream["related"] == upstream["id"]
    # two operators writing as one field manager: the watch sees one manager, the audit events two users
    (shared,) = [f for f in findings if f["type"] == "fight" and f["object"]["namespace"] == "shared-manager"]
    assert [(w["manager"], w["users"]) for w in shared["writers"]] == [
        ("manager", sorted([scenarios.LABELER.user, scenarios.ANNOTATOR.user]))
    ]
    # a watch finding nowhere else: the benign namespaces
    assert not [f for f in findings if f["object"]["namespace"].startswith("benign")]


def test_the_hpa_of_kube_controller_manager_is_told_from_its_deployment_controller(recorded: Recorded) -> None:
    """The real HPA against `kubectl apply`: both kube-controller-manager's HPA and its deployment controller write
    Deployment `web` as field manager `kube-controller-manager`, the HPA through `scale`, the deployment controller
    the `status`, each as its own service account."""
    findings = joined(recorded)
    for ns in ("hpa-fight", "hpa-fight" + scenarios.OMIT_SUFFIX):  # (with and without managedFields in the bodies)
        (fight,) = [f for f in findings if f["object"]["namespace"] == ns and f["type"] == "fight"]
        assert (fight["type"], fight["fields"]) == ("fight", ["spec.replicas"])
        assert writers(fight) == [
            ("kube-controller-manager", "Update", "scale", [scenarios.HPA_CONTROLLER]),
            ("kubectl-client-side-apply", "Update", None, [scenarios.DEPLOYER.user]),
        ]
        clients = {c["user"]: c for c in fight["clients"]}
        assert clients[scenarios.DEPLOYMENT_CONTROLLER]["manager"] == "kube-controller-manager"
        agent = clients[scenarios.HPA_CONTROLLER]["user_agent"]
        assert agent.startswith("kube-controller-manager/v1.")
        assert agent.endswith(f"/{scenarios.HPA_CONTROLLER}")
        assert clients[scenarios.DEPLOYER.user]["pod"] == scenarios.DEPLOYER.pod_ref
        for storm in [f for f in findings if f["object"]["namespace"] == ns and timed(f)]:
            check_timed(storm, findings)
            if storm["type"] == "conflict_storm" and storm["object"]["name"] == "web":  # the fight's failed half
                assert storm["hint"].startswith("This is a fight")


def test_every_joined_finding_is_the_same_without_managed_fields(recorded: Recorded) -> None:
    """`omitManagedFields: true` (the `-omf` namespaces) drops managedFields from the logged bodies: each finding
    of a `-full` namespace has its twin there, naming the same writers, users, clients and pods."""

    def who(finding: dict[str, Any]) -> tuple[object, ...]:
        clients = sorted((c["user"], c["pod"], c["manager"]) for c in finding["clients"])
        return (finding["type"], finding["object"]["name"], finding["fields"], writers(finding), clients)

    every = joined(recorded)
    for finding in filter(timed, every):
        check_timed(finding, every)
    findings = [f for f in every if not timed(f)]
    by_level: dict[str, list[tuple[object, ...]]] = {scenarios.FULL_SUFFIX: [], scenarios.OMIT_SUFFIX: []}
    for f in findings:
        for suffix, found in by_level.items():
            if f["object"]["namespace"].endswith(suffix):
                found.append((f["object"]["namespace"].removesuffix(suffix), *who(f)))
    assert len(by_level[scenarios.FULL_SUFFIX]) >= 10  # (so that this could fail)
    assert sorted(by_level[scenarios.FULL_SUFFIX], key=repr) == sorted(by_level[scenarios.OMIT_SUFFIX], key=repr)
