"""`serving.access` against a real kube-apiserver: bearer tokens authenticated with TokenReview, access decided with
SubjectAccessReview against real RBAC, answers cached, and cached answers kept while the API server is down."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from harness.control_plane import ControlPlane
from harness.kube import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, ROLE_BINDINGS, ROLES, Kube, new_api_client
from tests.control_planes import running_control_plane
from watcher.serving.access import Access, AccessUnavailableError, Caller
from watcher.serving.access import Resource as Want
from watcher.sources.kube import KubeApi

pytestmark = pytest.mark.integration

TENANT, SCRAPER, NOBODY = "tenant-a", "prometheus-scraper", "nobody"
LIST_CONFIGMAPS_A = Want("list", resource="configmaps", namespace="team-a")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from running_control_plane(tmp_path_factory, "access", users=(TENANT, SCRAPER, NOBODY))


@pytest.fixture(scope="module")
async def admin(plane: ControlPlane) -> AsyncIterator[Kube]:
    client = await new_api_client(plane.kubeconfig)
    kube = Kube(client)
    for ns in ("team-a", "team-b"):
        await kube.ensure_namespace(ns)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "read", "namespace": "team-a"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
    }
    await kube.ensure(ROLES.path("team-a"), role, manager="test")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tenant", "namespace": "team-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}],
    }
    await kube.ensure(ROLE_BINDINGS.path("team-a"), binding, manager="test")
    scrape = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "fightwatch-metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    await kube.ensure(CLUSTER_ROLES.path(), scrape, manager="test")
    scrape_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "fightwatch-metrics-reader"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "fightwatch-metrics-reader",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SCRAPER}],
    }
    await kube.ensure(CLUSTER_ROLE_BINDINGS.path(), scrape_binding, manager="test")
    try:
        yield kube
    finally:
        await client.close()


def access(kube: Kube, clock: Clock | None = None) -> Access:
    api = KubeApi(kube.api_client, request_timeout=5.0)
    return Access(api.create, clock=clock or Clock())


async def test_tokens_are_authenticated_and_unknown_ones_are_not(plane: ControlPlane, admin: Kube) -> None:
    checker = access(admin)
    caller = await checker.authenticate(plane.user_tokens[TENANT])
    assert caller is not None
    assert caller.user == TENANT
    assert "system:authenticated" in caller.groups
    assert await checker.authenticate("not-a-token") is None
    assert await checker.authenticate("not-a-token") is None  # (cached: one review)
    assert checker.stats.token_reviews == 2


async def test_access_follows_the_clusters_rbac(plane: ControlPlane, admin: Kube) -> None:
    checker = access(admin)
    tenant = await checker.authenticate(plane.user_tokens[TENANT])
    scraper = await checker.authenticate(plane.user_tokens[SCRAPER])
    nobody = await checker.authenticate(plane.user_tokens[NOBODY])
    assert tenant is not None
    assert scraper is not None
    assert nobody is not None
    assert await checker.allowed(tenant, LIST_CONFIGMAPS_A)
    assert not await checker.allowed(tenant, Want("list", resource="configmaps", namespace="team-b"))
    assert not await checker.allowed(tenant, Want("list", resource="configmaps"))  # (cluster scope)
    assert not await checker.allowed(nobody, LIST_CONFIGMAPS_A)
    assert await checker.allowed(scraper, Want("get", path="/metrics"))
    assert not await checker.allowed(tenant, Want("get", path="/metrics"))
    reviews = checker.stats.access_reviews
    assert await checker.allowed(tenant, LIST_CONFIGMAPS_A)  # cached
    assert checker.stats.access_reviews == reviews


async def test_cached_answers_outlive_an_api_server_restart(plane: ControlPlane, admin: Kube) -> None:
    clock = Clock()
    checker = access(admin, clock)
    tenant = await checker.authenticate(plane.user_tokens[TENANT])
    assert tenant is not None
    assert await checker.allowed(tenant, LIST_CONFIGMAPS_A)
    clock.now += 3600  # every answer expired
    plane.stop_apiserver()
    try:
        # expired answers serve while the API server is down ...
        assert await checker.authenticate(plane.user_tokens[TENANT]) == tenant
        assert await checker.allowed(tenant, LIST_CONFIGMAPS_A)
        assert checker.stats.stale_answers == 2
        # ... a question never answered cannot be
        with pytest.raises(AccessUnavailableError):
            await checker.allowed(tenant, Want("list", resource="secrets", namespace="team-a"))
        with pytest.raises(AccessUnavailableError):
            await checker.authenticate(plane.user_tokens[SCRAPER])
        # ... nor one answered longer ago than max_stale (an hour) past its expiry
        clock.now += 3600
        with pytest.raises(AccessUnavailableError):
            await checker.allowed(tenant, LIST_CONFIGMAPS_A)
    finally:
        plane.start_apiserver()
    assert await checker.allowed(Caller(user=TENANT, groups=tenant.groups), LIST_CONFIGMAPS_A)
