"""The watcher in a pod's shoes: in-cluster credentials of a ServiceAccount that may watch only some kinds.

The token is a real one (TokenRequest), mounted where the watcher is told its service account lives, with
KUBERNETES_SERVICE_HOST/PORT set as in a pod. Forbidden kinds are skipped and reported (once in the log, in
/readyz and /metrics) without holding readiness back; the allowed ones are watched and fights there are found.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from kubernetes_asyncio.client import ApiClient

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, JSON, Kube
from harness.watcher import Watcher

NAMESPACE = "fightwatch-rbac"
SERVICE_ACCOUNT = "fightwatch-limited"
GRANTED = {"configmaps", "namespaces", "deployments.apps"}  # what the role of SERVICE_ACCOUNT lets it list and watch
ALLOWED = [
    {"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
]
REVIEWS = [  # what it needs to authenticate and authorize its callers (cluster-wide, as the chart grants it)
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]


async def _service_account_token(kube: Kube, account: str, *, bound_in: str | None = None) -> str:
    """A token of a new ServiceAccount allowed ALLOWED cluster-wide, or only in namespace `bound_in` (as the
    chart's `rbac.namespaces` binds it: the ClusterRole through a RoleBinding there)."""
    await kube.ensure_namespace(NAMESPACE)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}
    await kube.ensure(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", sa, manager="test")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": account},
        "rules": ALLOWED,
    }
    await kube.ensure("/apis/rbac.authorization.k8s.io/v1/clusterroles", role, manager="test")
    reviews = {**role, "metadata": {"name": f"{account}-reviews"}, "rules": REVIEWS}
    await kube.ensure("/apis/rbac.authorization.k8s.io/v1/clusterroles", reviews, manager="test")
    review_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{account}-reviews"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{account}-reviews"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
    }
    await kube.ensure("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", review_binding, manager="test")
    binding: JSON = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding" if bound_in is None else "RoleBinding",
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
    }
    if bound_in is None:
        await kube.ensure("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, manager="test")
    else:
        await kube.ensure_namespace(bound_in)
        path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{bound_in}/rolebindings"
        await kube.ensure(path, binding, manager="test")
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = await kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token", body=request)
    token: str = answer["status"]["token"]
    return token


async def _may_list(kube: Kube, user: str, resource: str) -> bool:
    """A SubjectAccessReview: may `user` list `resource` (plural.group) cluster-wide?"""
    plural, _, group = resource.partition(".")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "resourceAttributes": {"verb": "list", "group": group, "resource": plural},
        },
    }
    answer = await kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(answer.get("status", {}).get("allowed"))


def _mount(control_plane: ControlPlane, directory: Path, token: str) -> tuple[Path, dict[str, str]]:
    """A service-account mount (token, ca.crt) and the environment a pod has."""
    directory.mkdir()
    (directory / "token").write_text(token)
    shutil.copy(control_plane.ca_file, directory / "ca.crt")
    host, port = control_plane.url.removeprefix("https://").rsplit(":", 1)
    return directory, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


async def _fight(kube: Kube, namespace: str) -> None:
    path = CONFIGMAPS.path(namespace, "contested")

    def create() -> JSON:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "contested", "namespace": namespace}}

    for _ in range(3):
        await kube.read_modify_write(path, _label("a"), manager="team-a-operator", create=create)
        await kube.read_modify_write(path, _label("b"), manager="team-b-operator")


def _label(value: str) -> Callable[[JSON], None]:
    def mutate(obj: JSON) -> None:
        obj["metadata"].setdefault("labels", {})["owner"] = value

    return mutate


async def test_forbidden_kinds_are_reported_and_the_allowed_ones_watched(
    control_plane: ControlPlane, api_client: ApiClient, tmp_path: Path
) -> None:
    kube = Kube(api_client)
    token = await _service_account_token(kube, SERVICE_ACCOUNT)
    mount, env = _mount(control_plane, tmp_path / "serviceaccount", token)
    config = {"kube": {"service_account_dir": str(mount)}, "watch": {"discovery_interval": "5s"}}
    watcher = Watcher(tmp_path, config=config, env=env, token=control_plane.token)
    async with watcher:
        report = await watcher.wait_ready()
        resources = report["resources"]
        for allowed in ("configmaps", "namespaces", "deployments.apps"):
            assert resources[allowed]["state"] == "watching", resources[allowed]
        forbidden = {name for name, r in resources.items() if r["state"] == "forbidden"}
        assert {"secrets", "replicasets.apps", "customresourcedefinitions.apiextensions.k8s.io"} <= forbidden
        # Besides what its role grants, what the API server lets every authenticated user list (its default RBAC:
        # ClusterTrustBundles, public trust anchors, from 1.33 on), asked of the API server itself.
        public = {name for name, r in resources.items() if r["state"] == "watching"} - GRANTED
        for name in public:
            assert await _may_list(kube, f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}", name), name
        assert forbidden == set(resources) - GRANTED - public
        assert "403" in resources["secrets"]["error"]
        secrets = {"group": "", "resource": "secrets"}
        assert await watcher.metric("fightwatch_watches", **secrets, state="forbidden") == 1
        assert await watcher.metric("fightwatch_watch_errors_total", **secrets, code="403") == 1

        async def resources_counted() -> bool | None:  # (set on the watcher's next one-second tick)
            counted = [await watcher.metric("fightwatch_resources", state=s) for s in ("watched", "forbidden")]
            return True if counted == [len(GRANTED | public), len(forbidden)] else None

        await watcher.poll_async(
            resources_counted, what="fightwatch_resources: the granted watched, the rest forbidden"
        )

        await _fight(kube, NAMESPACE)
        finding = await watcher.wait_for_finding(lambda f: f["object"]["name"] == "contested", what="the fight")
        assert {w["manager"] for w in finding["writers"]} == {"team-a-operator", "team-b-operator"}
        assert finding["fields"] == ["metadata.labels.owner"]

    assert watcher.returncode == 0
    (started,) = watcher.log("started")
    assert started["credentials"] == f"in-cluster service account ({mount})"
    logged = [e["resource"] for e in watcher.log("watch forbidden")]
    assert sorted(logged) == sorted(forbidden)  # once per resource, not once per retry
    assert token not in watcher.log_path.read_text()


async def test_rbac_in_some_namespaces_only_is_watched_namespace_by_namespace(
    control_plane: ControlPlane, api_client: ApiClient, tmp_path: Path
) -> None:
    """As the chart deploys it with `rbac.namespaces: [team]` and `config.watch.namespaces: [team]`, and its flags."""
    kube = Kube(api_client)
    team = "fightwatch-rbac-team"
    token = await _service_account_token(kube, "fightwatch-one-namespace", bound_in=team)
    mount, env = _mount(control_plane, tmp_path / "serviceaccount", token)
    config = {
        "kube": {"service_account_dir": str(mount)},
        "watch": {"namespaces": [team], "resources": ["configmaps", "deployments.apps", "namespaces"]},
        "serve": {"port": 8080},  # overridden by --listen
    }
    flags = ("--listen=127.0.0.1:0", "--log-level=debug")
    watcher = Watcher(tmp_path, config=config, env=env, args=flags, token=control_plane.token)
    async with watcher:
        report = await watcher.wait_ready()
        resources = report["resources"]
        assert resources[f"configmaps@{team}"]["state"] == "watching"
        assert resources[f"deployments.apps@{team}"]["state"] == "watching"
        assert resources["namespaces"]["state"] == "forbidden"  # cluster-scoped: a RoleBinding cannot grant it
        assert set(resources) == {f"configmaps@{team}", f"deployments.apps@{team}", "namespaces"}

        await _fight(kube, team)
        finding = await watcher.wait_for_finding(lambda f: f["object"]["namespace"] == team, what="the fight")
        assert finding["object"]["name"] == "contested"
        configmaps = {"group": "", "resource": "configmaps"}
        assert await watcher.metric("fightwatch_watches", **configmaps, state="watching") == 1  # the one in `team`
        assert (await watcher.metric("fightwatch_events_total", **configmaps, type="MODIFIED") or 0) > 0

    assert watcher.returncode == 0
    assert watcher.url.startswith("https://127.0.0.1:")
    assert not watcher.url.endswith(":8080")
    assert watcher.log("watch open")  # debug lines, from --log-level=debug
