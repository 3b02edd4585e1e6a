"""The harness's control plane is a real, secured API server that records managedFields."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import aiohttp
import pytest

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, ApiError, Kube

NAMESPACE = "test-control-plane"
REPO = Path(__file__).resolve().parents[2]


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


# ---------------------------------------------------------------------------------------------------------------
# scripts/control-plane.sh itself: what it does when a build cannot finish (no control plane needed).

SCRIPT = REPO / "scripts" / "control-plane.sh"


def _entries(cache: Path) -> list[str]:
    """The cache entries (a directory per version) under a cache root."""
    return [p.name for p in (cache / "control-plane").iterdir() if p.is_dir() and p.name.startswith("v1.")]


def _control_plane_script(cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TEST_ASSET_", "KUBEBUILDER_ASSETS"))}
    return subprocess.run(
        ["bash", str(SCRIPT), "current"],
        capture_output=True,
        text=True,
        check=False,
        env={**clean, "FIGHTWATCH_CACHE": str(cache), **env},
        timeout=300,
    )


def test_a_module_that_cannot_be_downloaded_is_named_and_stops_the_build(tmp_path: Path) -> None:
    """An empty module cache and no proxy: the first download fails, go names the module, nothing is cached."""
    done = _control_plane_script(
        tmp_path / "cache", GOMODCACHE=str(tmp_path / "modules"), GOPROXY="off", GOFLAGS="-modcacherw"
    )

    assert done.returncode != 0
    assert "k8s.io/kubernetes@v1." in done.stderr
    assert "ERROR" in done.stderr
    assert done.stdout == ""
    assert not _entries(tmp_path / "cache")


def test_an_interrupted_build_leaves_no_cache_entry_and_the_next_run_builds_again(tmp_path: Path) -> None:
    """A `go` that is killed halfway (a stand-in on PATH that kills the script's whole process group, as a
    machine's reboot or a CI timeout would): the cache holds no entry, so the next run starts the build again
    (the stand-in tells it started) rather than printing a directory of missing binaries."""
    fake = tmp_path / "bin"
    fake.mkdir()
    started = tmp_path / "go-started"
    (fake / "go").write_text(f'#!/bin/sh\necho "$@" >>{started}\nkill -KILL -- -$(ps -o pgid= $$ | tr -d " ")\n')
    (fake / "go").chmod(0o755)
    cache = tmp_path / "cache"
    path = f"{fake}:{os.environ['PATH']}"

    first = subprocess.run(
        ["setsid", "bash", str(SCRIPT), "current"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "FIGHTWATCH_CACHE": str(cache), "PATH": path},
        timeout=60,
    )
    assert first.returncode != 0
    assert not _entries(cache)
    (fake / "go").write_text(f'#!/bin/sh\necho "$@" >>{started}\nexit 1\n')

    second = _control_plane_script(cache, PATH=path)

    assert second.returncode != 0
    assert len(started.read_text().splitlines()) == 2  # the second run went to go again
    assert not _entries(cache)
    assert not [p.name for p in (cache / "control-plane").iterdir() if p.name.startswith(".build")]
