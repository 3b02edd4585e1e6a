"""A version conflict against the client's own write makes no conflict storm, also where another client's write
completed between the two: the audit events of kube-controller-manager's deployment controller on a loaded machine
(tests/fixtures/audit/loaded)."""

from __future__ import annotations

from pathlib import Path

from watcher.config import Config
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request
from watcher.sources.audit import AuditStats, read_audit_log

LOADED = Path(__file__).parents[1] / "fixtures" / "audit" / "loaded"
DEPLOYMENT_CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"
AUTOSCALER = "system:serviceaccount:autoscaling:custom-autoscaler"
HELM = "system:serviceaccount:ci:helm"


def requests() -> list[Request]:
    return list(read_audit_log(str(LOADED / "scale-fight.metadata.jsonl"), stats=AuditStats()))


def against_own_write(recorded: list[Request]) -> list[bool]:
    """For each version conflict of the recording, in order: whether the engine counts it against the client's own
    write."""
    engine = RequestEngine(Config().detection)
    told = []
    for request in recorded:
        before = engine.stats.self_conflicts
        engine.process(request)
        if request.version_conflict:
            told.append(engine.stats.self_conflicts > before)
    return told


def test_a_conflict_carrying_the_version_of_the_clients_own_last_update_is_against_its_own_write() -> None:
    recorded = requests()
    writes = [r for r in recorded if r.is_write]
    conflicts = [r for r in writes if r.version_conflict]
    # the deployment controller's status update from 514 succeeded, Helm's apply completed, and the controller sent
    # 514 again: its own write had made its copy stale
    (own,) = [i for i, r in enumerate(writes) if r.succeeded and r.resource_version == "514"]
    (again,) = [i for i, r in enumerate(writes) if r.version_conflict and r.resource_version == "514"]
    assert [(r.user, r.object.subresource) for r in (writes[own], writes[again])] == [
        (DEPLOYMENT_CONTROLLER, "status")
    ] * 2
    assert [r.user for r in writes[own + 1 : again]] == [HELM]
    assert against_own_write(recorded) == [
        True,  # 447: after its own update from 447, nothing between
        True,  # 514: after its own update from 514, Helm's apply between
        False,  # 536: the autoscaler's update of `scale` from 536 came first
        False,  # 536 again: the autoscaler's write, then Helm's
        True,  # 656
        False,  # the autoscaler's update of `scale` from 760, after the controller's status update from 760
        True,  # 862
        True,  # 886
        False,  # the autoscaler's from 907, after the controller's from 907
        True,  # 1001
    ]
    assert [(r.user, r.resource_version) for r in conflicts][5] == (AUTOSCALER, "760")
