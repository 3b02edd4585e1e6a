"""The watcher in a pod's shoes: in-cluster credentials of a ServiceAccount that may watch only some kinds.

The token is a real one (TokenRequest), mounted where the watcher is told its service account lives, with
KUBERNETES_SERVICE_HOST/PORT set as in a pod. Forbidden kinds are skipped and reported (once in the log, in
/readyz and /metrics) without holding readiness back; the allowed ones are watched and fights there are found.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, JSON, Kube
from harness.watcher import Watcher
from kubernetes_asyncio.client import ApiClient

NAMESPACE = "fightwatch-rbac"
SERVICE_ACCOUNT = "fightwatch-limited"
ALLOWED = [
    {"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
]


async def _service_account_token(kube: Kube) -> str:
    await kube.ensure_namespace(NAMESPACE)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}}
    await kube.ensure(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", sa, manager="test")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": SERVICE_ACCOUNT},
        "rules": ALLOWED,
    }
    await kube.ensure("/apis/rbac.authorization.k8s.io/v1/clusterroles", role, manager="test")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": SERVICE_ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE_ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
    }
    await kube.ensure("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, manager="test")
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = await kube.request(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token", body=request
    )
    token: str = answer["status"]["token"]
    return token


def _label(value: str) -> Any:
    def mutate(obj: JSON) -> None:
        obj["metadata"].setdefault("labels", {})["owner"] = value

    return mutate


async def test_forbidden_kinds_are_reported_and_the_allowed_ones_watched(
    control_plane: ControlPlane, api_client: ApiClient, tmp_path: Path
) -> None:
    kube = Kube(api_client)
    token = await _service_account_token(kube)
    mount = tmp_path / "serviceaccount"
    mount.mkdir()
    (mount / "token").write_text(token)
    shutil.copy(control_plane.ca_file, mount / "ca.crt")
    host, port = control_plane.url.removeprefix("https://").rsplit(":", 1)
    watcher = Watcher(
        tmp_path,
        config={"kube": {"service_account_dir": str(mount)}, "watch": {"discovery_interval": "5s"}},
        env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
    )
    async with watcher:
        report = await watcher.wait_ready()
        resources = report["resources"]
        for allowed in ("configmaps", "namespaces", "deployments.apps"):
            assert resources[allowed]["state"] == "watching", resources[allowed]
        forbidden = {name for name, r in resources.items() if r["state"] == "forbidden"}
        assert {"secrets", "replicasets.apps", "customresourcedefinitions.apiextensions.k8s.io"} <= forbidden
        assert forbidden == set(resources) - {"configmaps", "namespaces", "deployments.apps"}
        assert "403" in resources["secrets"]["error"]
        assert await watcher.metric("fightwatch_watch_state", resource="secrets", state="forbidden") == 1
        assert (await watcher.metric("fightwatch_watch_errors_total", resource="secrets", failure="forbidden")) == 1

        path = CONFIGMAPS.path(NAMESPACE, "contested")
        create = functools.partial(
            lambda: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "contested", "namespace": NAMESPACE}}
        )
        for _ in range(3):
            await kube.read_modify_write(path, _label("a"), manager="team-a-operator", create=create)
            await kube.read_modify_write(path, _label("b"), manager="team-b-operator")
        finding = await watcher.wait_for_finding(lambda f: f["object"]["name"] == "contested", what="the fight")
        assert {w["manager"] for w in finding["writers"]} == {"team-a-operator", "team-b-operator"}
        assert finding["fields"] == ["metadata.labels.owner"]

    assert watcher.returncode == 0
    (started,) = watcher.log("started")
    assert started["credentials"] == f"in-cluster service account ({mount})"
    logged = [e["resource"] for e in watcher.log("watch forbidden")]
    assert sorted(logged) == sorted(forbidden)  # once per resource, not once per retry
    assert token not in watcher.log_path.read_text()
