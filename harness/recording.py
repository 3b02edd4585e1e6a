"""Run scenarios under a recorder against a control plane: what scripts/record_captures.py records; and how the
recording scripts write what they recorded."""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path

from .control_plane import ControlPlane
from .kube import JSON, Kube, new_api_client
from .kubectl import Kubectl
from .recorder import Recorder
from .scenarios import SLOW_PERIOD, ensure_widget_crd, run_scenarios


async def record_scenarios(
    cp: ControlPlane, names: Iterable[str] | None = None, *, slow_period: float = SLOW_PERIOD
) -> tuple[list[JSON], JSON]:
    """Run the scenarios (default: all) under a Recorder; return its events and the server's /version.

    The events are every watch event recorded, in arrival order (route them with scenarios.scenario_of).
    Scenarios that need kube-controller-manager need cp.start_controller_manager() first.
    """
    writer_client = await new_api_client(cp.kubeconfig)
    recorder_client = await new_api_client(cp.kubeconfig)  # watches hold connections: keep them apart
    try:
        kube = Kube(writer_client)
        version = await kube.get("/version")
        await ensure_widget_crd(kube)  # before the recorder, so widgets are watched from the start
        recorder = Recorder(recorder_client)
        await recorder.start()
        try:
            kubectl = Kubectl(cp.kubectl, cp.kubeconfig)
            await run_scenarios(writer_client, names, slow_period=slow_period, kubectl=kubectl)
            await recorder.sync()
        finally:
            await recorder.stop()
    finally:
        await writer_client.close()
        await recorder_client.close()
    return recorder.events, version


def write_gzip_lines(path: Path, lines: Iterable[bytes]) -> int:
    """Write JSON Lines gzip-compressed, reproducibly (no name, no time in the header); return how many lines.

    Written to a temporary file renamed into place: an interrupted write leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with tmp.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        for line in lines:
            out.write(line + b"\n")
            count += 1
    tmp.replace(path)
    return count
