"""The harness's control plane is a real, secured API server that records managedFields."""

from __future__ import annotations

import aiohttp
import pytest

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, ApiError, Kube

NAMESPACE = "test-control-plane"


async def _status(control_plane: ControlPlane, path: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    connector = aiohttp.TCPConnector(ssl=control_plane.tls_context())
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(control_plane.url + path, headers=headers) as response,
    ):
        return response.status


async def test_unknown_token_is_unauthorized(control_plane: ControlPlane) -> None:
    assert await _status(control_plane, "/api/v1/namespaces", "not-a-known-token") == 401


async def test_anonymous_request_is_refused(control_plane: ControlPlane) -> None:
    assert await _status(control_plane, "/api/v1/namespaces", None) in {401, 403}


async def test_admin_token_is_authorized(control_plane: ControlPlane) -> None:
    assert await _status(control_plane, "/api/v1/namespaces", control_plane.token) == 200


async def test_admin_creates_and_reads_a_configmap(kube: Kube) -> None:
    await kube.ensure_namespace(NAMESPACE)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "created"}, "data": {"k": "v"}}
    await kube.create(CONFIGMAPS.path(NAMESPACE), body, manager="test-creator")

    read = await kube.get(CONFIGMAPS.path(NAMESPACE, "created"))

    assert read["data"] == {"k": "v"}
    with pytest.raises(ApiError) as missing:
        await kube.get(CONFIGMAPS.path(NAMESPACE, "absent"))
    assert missing.value.status == 404


async def test_update_is_recorded_in_managed_fields(kube: Kube) -> None:
    await kube.ensure_namespace(NAMESPACE)
    path = CONFIGMAPS.path(NAMESPACE, "managed")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "managed"}, "data": {"a": "1"}}
    await kube.create(CONFIGMAPS.path(NAMESPACE), body, manager="test-creator")

    def set_b(obj: dict[str, object]) -> None:
        obj["data"] = {"a": "1", "b": "2"}

    updated = await kube.read_modify_write(path, set_b, manager="test-updater")

    entries = {entry["manager"]: entry for entry in updated["metadata"]["managedFields"]}
    assert entries["test-updater"]["operation"] == "Update"
    assert entries["test-updater"]["fieldsV1"] == {"f:data": {"f:b": {}}}
    assert "f:a" in entries["test-creator"]["fieldsV1"]["f:data"]


def test_etcdctl_reads_the_apiservers_etcd(control_plane: ControlPlane) -> None:
    keys = control_plane.run_etcdctl("get", "/registry/namespaces/default", "--keys-only")

    assert keys.split() == ["/registry/namespaces/default"]
