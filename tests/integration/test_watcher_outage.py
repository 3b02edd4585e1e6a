"""The API server goes away, comes back with a compacted etcd, and the watcher must resume from an expired
resourceVersion: it reconnects, relists (410 Gone) without reporting the relisted objects as writes, keeps its
findings and raises none twice, and /readyz shows the outage while it lasts.

This module starts its own etcd + kube-apiserver, since it stops and restarts the API server.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, JSON, NAMESPACES, Kube, new_api_client
from harness.scenarios import run_scenarios
from harness.watcher import Watcher, recorded
from tests.control_planes import running_control_plane

pytestmark = pytest.mark.integration

GAP_NAMESPACE = "outage-gap"
GAP_OBJECTS = 5


@pytest.fixture(scope="module")
def own_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from running_control_plane(tmp_path_factory, "outage-control-plane")


def _owner(value: str) -> Callable[[JSON], None]:
    def mutate(obj: JSON) -> None:
        obj["metadata"].setdefault("labels", {})["owner"] = value

    return mutate


def _configmap(name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": GAP_NAMESPACE}}


def _gap_events(watcher: Watcher) -> list[dict[str, Any]]:
    assert watcher.recording is not None
    return [
        e
        for e in recorded(watcher.recording)
        if e["object"]["kind"] == "ConfigMap" and e["object"]["metadata"].get("namespace") == GAP_NAMESPACE
    ]


def _seen(watcher: Watcher, names: set[str], owner: str) -> bool | None:
    """Whether the watcher recorded every named object with the label owner=<owner> (None: not yet)."""
    latest = {e["object"]["metadata"]["name"]: e for e in _gap_events(watcher)}
    ok = all(n in latest and (latest[n]["object"]["metadata"].get("labels") or {}).get("owner") == owner for n in names)
    return ok or None


async def test_restart_and_410_keep_findings_and_make_no_phantoms(
    own_control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = own_control_plane
    client = await new_api_client(cp.kubeconfig)
    kube = Kube(client)
    config = {"watch": {"backoff_max": "1s", "discovery_interval": "5s"}}
    try:
        async with Watcher(tmp_path, kubeconfig=cp.kubeconfig, config=config) as watcher:
            await watcher.wait_ready()

            # A real fight, found and logged once.
            await run_scenarios(client, ["fight-update-vs-update-label"])
            fight = await watcher.wait_for_finding(lambda f: f["object"]["name"] == "settings", what="the fight")

            # Objects that change hands once (A -> B) while watched.
            await kube.ensure_namespace(GAP_NAMESPACE)
            names = {f"gap-{n}" for n in range(GAP_OBJECTS)}
            for name in sorted(names):
                path = CONFIGMAPS.path(GAP_NAMESPACE, name)
                create = functools.partial(_configmap, name)
                await kube.read_modify_write(path, _owner("a"), manager="owner-a", create=create)
                await kube.read_modify_write(path, _owner("b"), manager="owner-b")
            await watcher.poll(lambda: _seen(watcher, names, "b"), what="owner=b on every gap object")
            # A write to another kind: the configmaps watch's resourceVersion is now behind the server's.
            await kube.merge_patch(
                NAMESPACES.path(name=GAP_NAMESPACE), {"metadata": {"labels": {"x": "1"}}}, manager="t"
            )

            # The outage: /readyz says so, with the failing resources.
            cp.stop_apiserver()
            outage = await watcher.wait_ready(ready=False)
            assert outage["ready"] is False
            assert any(r.get("failure") == "connection" for r in outage["resources"].values())

            # While the watcher is paused: the server comes back, A takes every object back, one is deleted,
            # and etcd is compacted, so the watcher's resourceVersion has expired when it resumes.
            watcher.pause()
            try:
                cp.start_apiserver()
                for name in sorted(names):
                    await kube.read_modify_write(CONFIGMAPS.path(GAP_NAMESPACE, name), _owner("a"), manager="owner-a")
                await kube.request("DELETE", CONFIGMAPS.path(GAP_NAMESPACE, "gap-0"))
                cp.run_etcdctl("compact", str(cp.etcd_revision()))
            finally:
                watcher.resume()

            await watcher.wait_ready()
            await watcher.poll(lambda: _seen(watcher, names - {"gap-0"}, "a"), what="the relisted gap objects")
            relisted = await watcher.metric(
                "fightwatch_watch_restarts_total", group="", resource="configmaps", reason="expired"
            )
            assert relisted is not None
            assert relisted >= 1
            assert any(e["resource"] == "configmaps" for e in watcher.log("relisting"))
            # Relisted objects reached the engine as ADDED (re-read), the deleted one as DELETED.
            after = _gap_events(watcher)[-GAP_OBJECTS:]
            assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in after) == sorted(
                [("DELETED", "gap-0")] + [("ADDED", n) for n in names - {"gap-0"}]
            )
            resynced = await watcher.metric("fightwatch_engine_events_total", outcome="resynced")
            assert (resynced or 0) >= GAP_OBJECTS - 1

            # B takes each object once more. Seen by the watcher: A->B, then (relist) A->B: no fight. Had the
            # relist counted as a write (B->A), this would be A->B->A->B: a phantom fight.
            for name in sorted(names - {"gap-0"}):
                await kube.read_modify_write(CONFIGMAPS.path(GAP_NAMESPACE, name), _owner("b"), manager="owner-b")
            await watcher.poll(lambda: _seen(watcher, names - {"gap-0"}, "b"), what="owner=b after the relist")

            findings = await watcher.findings()
            assert [f["id"] for f in findings] == [fight["id"]]  # kept, and nothing new
            assert [e["id"] for e in watcher.log("finding opened")] == [fight["id"]]
            assert watcher.log("watch recovered")  # each failing watch logged once, then its recovery
    finally:
        await client.close()
    assert watcher.returncode == 0
    errors = [e for e in watcher.log() if e.get("level") == "error"]
    assert errors == []
