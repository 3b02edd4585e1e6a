"""The README's capture path, for real: `kubectl get --watch --output-watch-events -o json --show-managed-fields`
against the real kube-apiserver while two real clients fight, then `fightwatch replay` on what kubectl printed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from kubernetes_asyncio.client import ApiClient

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, Kube

NAMESPACE = "kubectl-capture"
DEADLINE = 60.0


async def _printed(path: Path, text: bytes, kubectl: asyncio.subprocess.Process) -> None:
    """Until kubectl has printed `text` (it prints each event as it arrives)."""
    deadline = time.monotonic() + DEADLINE
    while text not in path.read_bytes():
        if kubectl.returncode is not None:
            raise RuntimeError(f"kubectl exited with {kubectl.returncode}: {path.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"kubectl did not print {text!r} within {DEADLINE} s")
        await asyncio.sleep(0.05)  # polling kubectl's output for a known event, not waiting blindly


def _label(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("labels", {})[key] = value

    return mutate


async def test_replay_reads_what_kubectl_prints(
    control_plane: ControlPlane, api_client: ApiClient, tmp_path: Path
) -> None:
    kube = Kube(api_client)
    await kube.ensure_namespace(NAMESPACE)
    path = CONFIGMAPS.path(NAMESPACE, "contested")
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "contested", "labels": {"owner": "a"}}}
    await kube.create(CONFIGMAPS.path(NAMESPACE), manifest, manager="team-a-operator")
    out = tmp_path / "kubectl-watch.json"
    with out.open("wb") as sink:
        kubectl = await asyncio.create_subprocess_exec(
            str(control_plane.kubectl), "--kubeconfig", str(control_plane.kubeconfig),
            "get", "configmaps", "-n", NAMESPACE,
            "--watch", "--output-watch-events", "-o", "json", "--show-managed-fields",
            stdout=sink, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    try:
        await _printed(out, b'"contested"', kubectl)
        for _ in range(3):
            await kube.read_modify_write(path, _label("owner", "b"), manager="team-b-operator")
            await kube.read_modify_write(path, _label("owner", "a"), manager="team-a-operator")
        await kube.read_modify_write(path, _label("done", "yes"), manager="team-a-operator")
        await _printed(out, b'"done":', kubectl)
    finally:
        kubectl.terminate()
        await asyncio.wait_for(kubectl.wait(), 30)
    # kubectl 1.32 prints one compact JSON object per event; older clients pretty-print: both are read.
    assert out.read_bytes().count(b'"type":"MODIFIED"') + out.read_bytes().count(b'"type": "MODIFIED"') == 7

    replay = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "watcher", "replay", "--output", "json", str(out),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(replay.communicate(), 120)
    assert replay.returncode == 0, stderr
    (finding,) = [orjson.loads(line) for line in stdout.splitlines()]
    assert finding["type"] == "fight"
    assert finding["object"]["name"] == "contested"
    assert finding["fields"] == ["metadata.labels.owner"]
    assert {w["manager"] for w in finding["writers"]} == {"team-a-operator", "team-b-operator"}
    assert finding["handovers"] >= 3
