"""CRD churn: a CRD installed after the watcher started is watched (its custom resources' fights are found);
when it is removed, its watch is dropped without errors piling up. kubectl does the writing, as a user would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import yaml

from harness.control_plane import ControlPlane
from harness.watcher import Watcher

GROUP = "fightwatch.example.org"
RESOURCE = f"gadgets.{GROUP}"
NAMESPACE = "crd-churn"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": RESOURCE},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                },
            }
        ],
    },
}
KUBECTL_DEADLINE = 120.0


async def kubectl(cp: ControlPlane, *args: str, stdin: bytes | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(cp.kubectl), "--kubeconfig", str(cp.kubeconfig), *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(KUBECTL_DEADLINE):
        out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {err.decode()}")
    return out.decode()


async def test_a_crd_created_after_start_is_watched_and_dropped_when_removed(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    async with Watcher(
        tmp_path, kubeconfig=control_plane.kubeconfig, config={"watch": {"discovery_interval": "2s"}}
    ) as w:
        await w.wait_ready()
        assert RESOURCE not in (await w.readiness())[1]["resources"]

        await kubectl(control_plane, "apply", "-f", "-", stdin=orjson.dumps(CRD))
        await kubectl(control_plane, "wait", "--for=condition=Established", f"crd/{RESOURCE}", "--timeout=60s")
        await w.wait_for_log(lambda e: e.get("event") == "watching" and e.get("resource") == RESOURCE, what="a watch")
        await w.wait_ready()

        await kubectl(control_plane, "create", "namespace", NAMESPACE)
        gadget = {"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": NAMESPACE}}
        await kubectl(control_plane, "apply", "-f", "-", stdin=yaml.safe_dump(gadget).encode())
        for _ in range(3):
            for team in ("team-a", "team-b"):
                await kubectl(
                    control_plane, "label", "gadget", "g1", "-n", NAMESPACE, f"tier={team}", "--overwrite",
                    f"--field-manager={team}-operator",
                )  # fmt: skip
        finding = await w.wait_for_finding(lambda f: f["object"]["kind"] == "Gadget", what="the Gadget fight")
        assert finding["object"]["apiVersion"] == f"{GROUP}/v1"
        assert finding["fields"] == ["metadata.labels.tier"]
        assert {x["manager"] for x in finding["writers"]} == {"team-a-operator", "team-b-operator"}

        await kubectl(control_plane, "delete", "crd", RESOURCE, "--wait=true", "--timeout=60s")
        await w.wait_for_log(
            lambda e: e.get("event") == "stopped watching" and e.get("resource") == RESOURCE, what="the watch dropped"
        )
        status, report = await w.readiness()
        assert RESOURCE not in report["resources"]
        assert status == 200
        # Its custom resource was deleted with the CRD: the finding resolved.
        resolved = await w.wait_for_finding(
            lambda f: f["id"] == finding["id"] and f["state"] == "resolved", what="the finding resolved"
        )
        assert resolved["resolved_at"] is not None

    assert w.returncode == 0
    about = [e for e in w.log() if e.get("resource") == RESOURCE and e.get("level") in ("warning", "error")]
    assert len(about) <= 1  # at most one "resource gone" between removal and rediscovery, no pile of errors
    assert not [e for e in w.log() if e.get("level") == "error"]
