"""Audit events of a real kube-apiserver's log backend, read by `watcher.sources.audit`.

Two clients with identities of their own (ServiceAccounts with tokens bound to Pods of their own) and User-Agents
of their own race over one ConfigMap: a stale read-modify-write that fails with 409 Conflict, its retry, a write
that names its field manager and one that lets the API server derive it from the User-Agent, and a no-op update.
One namespace is audited at `Metadata` level, the other at `RequestResponse` level, where the log holds bodies: a
Secret's value there must not reach a decoded request.

With `$FIGHTWATCH_RECORD_AUDIT` naming a directory, the module writes the events its tests read back there as
`configmap-race.jsonl` (the fixture of tests/unit/test_audit_reader.py): the first two completed non-resource
requests, then every event of the two clients on ConfigMaps, every stage.
"""

from __future__ import annotations

import base64
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from harness.control_plane import ControlPlane, start_control_plane
from harness.identities import Identity, provision
from harness.kube import CONFIGMAPS, JSON, ROLE_BINDINGS, ROLES, SECRETS, ApiError, Kube, new_api_client
from watcher.detection.requests import Request
from watcher.sources.audit import AuditStats, read_audit_log

pytestmark = pytest.mark.integration

METADATA_NS = "audit-metadata"
BODIES_NS = "audit-bodies"
POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "rules": [
        {"level": "RequestResponse", "namespaces": [BODIES_NS]},
        {"level": "Metadata"},
    ],
}
TEAM_A, TEAM_B = "team-a-operator", "team-b-operator"  # their field managers (and User-Agents' products)
IDENTITY_A = Identity("team-a", TEAM_A, "team-a-operator-7f9c6d5b8-2kq4n")
IDENTITY_B = Identity("team-b", TEAM_B, "team-b-operator-5d8b7c6f9-x7wzp")
USER_A, USER_B = IDENTITY_A.user, IDENTITY_B.user
SECRET_VALUE = secrets.token_hex(12)  # a value no decoded request may hold, plain or base64-encoded
LOG_DEADLINE = 30.0


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = start_control_plane(tmp_path_factory.mktemp("audited"), audit_policy=POLICY)
    try:
        yield cp
        if out := os.environ.get("FIGHTWATCH_RECORD_AUDIT"):
            assert cp.audit_log is not None
            (Path(out) / "configmap-race.jsonl").write_bytes(_recording(cp.audit_log))
    finally:
        cp.stop()


def _recording(log: Path) -> bytes:
    """The events the tests read back: the log's first two completed non-resource requests, then the clients' on
    ConfigMaps."""
    lines = log.read_bytes().splitlines()
    events = [orjson.loads(line) for line in lines]
    unrelated = [
        line for line, e in zip(lines, events, strict=True) if "objectRef" not in e and e["stage"] == "ResponseComplete"
    ][:2]
    read = [
        line
        for line, e in zip(lines, events, strict=True)
        if e.get("objectRef", {}).get("resource") == "configmaps" and e["user"]["username"] in (USER_A, USER_B)
    ]
    return b"".join(line + b"\n" for line in unrelated + read)


@dataclass
class Clients:
    admin: Kube
    a: Kube
    b: Kube


@pytest.fixture(scope="module")
async def clients(audited: ControlPlane) -> AsyncIterator[Clients]:
    made: list[ApiClient] = []
    try:
        admin_client = await new_api_client(audited.kubeconfig)
        admin_client.user_agent = "fightwatch-test-admin/1.0"
        made.append(admin_client)
        tokens = await provision(Kube(admin_client), (IDENTITY_A, IDENTITY_B))
        for identity, agent in (
            (IDENTITY_A, "team-a-operator/v1.4.2 (linux/amd64) example.com/abc123"),
            (IDENTITY_B, "team-b-operator/v0.9.0"),
        ):
            client = await new_api_client(audited.kubeconfig_with_token(identity.user, tokens[identity]))
            client.user_agent = agent
            made.append(client)
        admin, a, b = (Kube(c) for c in made)
        for ns in (METADATA_NS, BODIES_NS):
            await admin.ensure_namespace(ns)
            # (not the aggregated `edit` ClusterRole: without the controller manager it holds no rules)
            role = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "writer", "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["*"]}],
            }
            await admin.ensure(ROLES.path(ns), role, manager="fightwatch-harness")
            for identity in (IDENTITY_A, IDENTITY_B):
                binding = {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": identity.name, "namespace": ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
                    "subjects": [{"kind": "ServiceAccount", "name": identity.name, "namespace": identity.namespace}],
                }
                await admin.ensure(ROLE_BINDINGS.path(ns), binding, manager="fightwatch-harness")
        yield Clients(admin, a, b)
    finally:
        for client in made:
            await client.close()


def _label(obj: JSON, value: str) -> JSON:
    obj["metadata"].setdefault("labels", {})["owner"] = value
    return obj


async def _race(clients: Clients, ns: str) -> None:
    """The requests every test below reads back from the audit log."""
    path = CONFIGMAPS.path(ns, "settings")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns}}
    await clients.a.create(CONFIGMAPS.path(ns), cm, manager=TEAM_A)
    stale = await clients.a.get(path)
    # B updates without naming a field manager: the API server derives it from B's User-Agent
    await clients.b.request("PUT", path, body=_label(await clients.b.get(path), "b"))
    with pytest.raises(ApiError) as conflict:
        await clients.a.replace(path, _label(stale, "a"), manager=TEAM_A)
    assert conflict.value.status == 409
    await clients.a.replace(path, _label(await clients.a.get(path), "a"), manager=TEAM_A)  # the retry
    unchanged = await clients.b.get(path)
    await clients.b.replace(path, unchanged, manager=TEAM_B)  # changes nothing: no new resourceVersion
    await clients.b.replace(path, unchanged, manager=TEAM_B)


def _requests(log: Path, ns: str, resource: str, *, writes: int) -> tuple[list[Request], AuditStats]:
    """The teams' requests on the namespace's `resource`, once the log holds `writes` writes of them (the log
    backend writes an event when its request has completed, which can be after the client has its answer)."""
    give_up = time.monotonic() + LOG_DEADLINE
    while True:
        stats = AuditStats()
        requests = [
            r
            for r in read_audit_log(str(log), stats=stats)
            if r.object.namespace == ns and r.object.resource == resource and r.user in (USER_A, USER_B)
        ]
        if sum(r.is_write for r in requests) >= writes or time.monotonic() > give_up:
            return requests, stats
        time.sleep(0.05)  # poll interval while the log catches up, not a readiness guess


@pytest.mark.parametrize("ns", [METADATA_NS, BODIES_NS])
async def test_audit_events_name_clients_conflicts_and_no_op_writes(
    audited: ControlPlane, clients: Clients, ns: str
) -> None:
    await _race(clients, ns)
    assert audited.audit_log is not None
    requests, stats = _requests(audited.audit_log, ns, "configmaps", writes=6)
    writes = [r for r in requests if r.is_write]
    assert [(r.user, r.verb, r.code) for r in writes] == [
        (USER_A, "create", 201),
        (USER_B, "update", 200),
        (USER_A, "update", 409),
        (USER_A, "update", 200),
        (USER_B, "update", 200),
        (USER_B, "update", 200),
    ]
    # each client's token is bound to its pod: the events name it (user.extra), in the service account's namespace
    assert {r.user: r.pod for r in requests} == {USER_A: IDENTITY_A.pod_ref, USER_B: IDENTITY_B.pod_ref}
    created, derived, conflict, retry, noop1, noop2 = writes
    assert derived.manager == TEAM_B  # from "team-b-operator/v0.9.0", as the API server derives it
    assert derived.user_agent == "team-b-operator/v0.9.0"
    assert conflict.manager == TEAM_A  # the fieldManager query parameter
    assert conflict.reason == "Conflict"
    # the 409's message: v1.20 logged it in the response body only (Request level and up); current releases put it
    # in the responseStatus at every level
    assert "the object has been modified" in conflict.message
    assert conflict.resource_version  # the stale version the client sent
    assert retry.resource_version not in ("", conflict.resource_version)  # re-read: a newer version
    assert created.code == 201
    assert noop1.resource_version == noop2.resource_version  # a no-op update does not bump the version
    assert (conflict.object.api_group, conflict.object.resource, conflict.object.name) == ("", "configmaps", "settings")
    # the log holds every stage; only completed requests are yielded
    assert stats.stages_skipped["RequestReceived"] >= len(requests)


async def test_no_secret_value_reaches_a_decoded_request(audited: ControlPlane, clients: Clients) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "credentials", "namespace": BODIES_NS},
        "stringData": {"password": SECRET_VALUE},
    }
    await clients.a.create(SECRETS.path(BODIES_NS), secret, manager=TEAM_A)
    await clients.a.get(SECRETS.path(BODIES_NS, "credentials"))
    assert audited.audit_log is not None
    requests, _ = _requests(audited.audit_log, BODIES_NS, "secrets", writes=1)
    assert [(r.verb, r.code) for r in requests if r.is_write] == [("create", 201)]
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    raw = audited.audit_log.read_text()
    # the log itself holds the value at RequestResponse level, base64-encoded as the API server stores the
    # stringData it was given (so this test could fail) ...
    assert encoded in raw
    # ... no decoded request does
    everything = list(read_audit_log(str(audited.audit_log), stats=AuditStats()))
    assert all(SECRET_VALUE not in repr(r) and encoded not in repr(r) for r in everything)
