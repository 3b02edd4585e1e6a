"""The watch and audit events of one recorded run, joined (`detection.join`): a cascade is linked to the fight it
follows from while that fight is active, and not once it has resolved; the users behind a fight's writers are told
by field manager and subresource; the join finds the same with and without managedFields in the logged bodies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.audit_recordings import CURRENT, SCENARIOS, V1_20, findings, joined
from watcher.model import Finding, FindingState, FindingType
from watcher.sources.audit import AuditStats, read_audit_log

RECORDINGS = pytest.mark.parametrize("recording", [CURRENT, V1_20], ids=["current", "v1.20"])
HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
DEPLOYMENT_CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"


@RECORDINGS
def test_a_storm_downstream_of_an_active_fight_is_linked_to_it(recording: Path) -> None:
    active = {(f.type, f.object.namespace, f.object.name): f for f in joined("cascade", recording=recording).active()}
    fight = active[FindingType.FIGHT, "cascade", "app"]
    storm = active[FindingType.CONFLICT_STORM, "cascade", "app-rendered"]
    assert storm.related == fight.id


@RECORDINGS
def test_once_the_fight_has_resolved_new_conflicts_are_a_storm_of_their_own(recording: Path) -> None:
    both = joined("cascade", recording=recording)
    requests = list(read_audit_log(str(recording / "cascade.metadata.jsonl"), stats=AuditStats()))
    last = max(r.time for r in requests)
    changes = both.advance(last + 7200)  # both the fight and the storm resolve
    assert {(c.finding.type, c.finding.state) for c in changes} >= {
        (FindingType.FIGHT, FindingState.RESOLVED),
        (FindingType.CONFLICT_STORM, FindingState.RESOLVED),
    }
    for request in requests:  # the renderer's conflicts again, two hours later, with no fight upstream
        both.process_request(replace(request, time=request.time + 7200))
    (storm,) = [f for f in both.active() if f.type is FindingType.CONFLICT_STORM]
    assert storm.related is None


def test_the_hpas_scale_writes_name_its_service_account_not_the_deployment_controllers() -> None:
    """kube-controller-manager's controllers all write as field manager `kube-controller-manager`: the HPA through
    the scale subresource, the deployment controller the status. The fight's writer is the HPA alone."""
    (fight,) = [f for f in findings(joined("hpa-fight")) if f.object.namespace == "hpa-fight"]
    assert (fight.type, fight.fields) == (FindingType.FIGHT, ("spec.replicas",))
    users = {(w.writer.manager, w.writer.operation, w.writer.subresource): w.users for w in fight.writers}
    assert users == {
        ("kube-controller-manager", "Update", "scale"): (HPA,),
        ("kubectl-client-side-apply", "Update", ""): ("system:serviceaccount:ci:deployer",),
    }
    # the deployment controller is one of the object's clients all the same (its status writes), under that manager
    assert {(c.user, c.manager) for c in fight.clients} >= {
        (DEPLOYMENT_CONTROLLER, "kube-controller-manager"),
        (HPA, "kube-controller-manager"),
    }
    assert "2 users write as" not in fight.summary


def _who(finding: Finding) -> tuple[object, ...]:
    """Whom a joined finding names, and what: its type, object, fields, writers with their users, clients."""
    return (
        finding.type,
        finding.object.name,
        finding.fields,
        tuple((w.writer, w.users) for w in finding.writers),
        tuple((c.user, c.pod, c.manager) for c in finding.clients),
        finding.related is not None,
    )


@pytest.mark.parametrize(
    "scenario",
    [s for s in SCENARIOS[CURRENT] if s != "benign"],  # (each has a finding)
)
def test_joined_findings_name_the_same_with_omit_managed_fields(scenario: str) -> None:
    """The `-full` namespace's events carry managedFields in their bodies, the `-omf` namespace's none
    (`omitManagedFields: true`); the watch of both is the same run's."""
    full = [f for f in findings(joined(scenario, "request-response")) if f.object.namespace == f"{scenario}-full"]
    omitted = [f for f in findings(joined(scenario, "omit-managed-fields")) if f.object.namespace == f"{scenario}-omf"]
    assert full  # (each of these scenarios has a finding)
    assert sorted(map(_who, full), key=repr) == sorted(map(_who, omitted), key=repr)
