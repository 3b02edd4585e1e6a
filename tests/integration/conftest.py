"""One live run for the whole session: every scenario's real clients write while two watchers follow.

The harness recorder (full objects, the reference) and `fightwatch run` (the live watcher as users run it:
metadata-only except Deployments, short server-side watch timeouts so its watches are resumed several times
during the run) watch the same traffic. Both are read afterwards: the recorder's events by
test_live_detection, the watcher's findings, log, metrics and recording by test_watcher_live. The scenarios
take about 3.5 minutes (the slow fight writes once every 50 s); running them once keeps the suite short.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.control_plane import ControlPlane
from harness.kube import Kube, new_api_client
from harness.recorder import BARRIER_NAMESPACE, BARRIER_PREFIX, DEFAULT_RESOURCES
from harness.recording import record_scenarios
from harness.scenarios import SCENARIOS, ensure_widget_crd
from harness.watcher import Watcher, recorded

LIVE_WATCHER_CONFIG: dict[str, Any] = {
    "watch": {
        "per_resource": {"deployments.apps": {"full_objects": True}},  # spec.replicas values: fight-scale-vs-apply
        "watch_timeout": "15s",  # each watch ends after 15-30 s and is resumed from its resourceVersion
        "discovery_interval": "5s",
        "backoff_max": "2s",
    }
}


@dataclass
class LiveRun:
    events: list[dict[str, Any]]  # the harness recorder's (full objects)
    findings: list[dict[str, Any]]  # the watcher's /api/v1/findings after the run
    readiness: dict[str, Any]
    metrics: dict[str, float | None]
    log: list[dict[str, Any]]
    recording: Path
    returncode: int


def _is_barrier(event: dict[str, Any]) -> bool:
    meta = event["object"]["metadata"]
    return meta.get("namespace") == BARRIER_NAMESPACE or str(meta.get("name", "")).startswith(BARRIER_PREFIX)


@pytest.fixture(scope="session")
async def live_run(controller_manager: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    client = await new_api_client(controller_manager.kubeconfig)
    try:
        await ensure_widget_crd(Kube(client))  # served before the watcher starts: widgets are watched from the start
    finally:
        await client.close()
    watcher = Watcher(
        tmp_path_factory.mktemp("live-watcher"), kubeconfig=controller_manager.kubeconfig, config=LIVE_WATCHER_CONFIG
    )
    await watcher.start()
    try:
        await watcher.wait_ready()
        events, _ = await record_scenarios(controller_manager, list(SCENARIOS))
        # The recorder's sync() wrote one barrier object per resource after every scenario's last write: once
        # the watcher has recorded each (leases aside: not watched by default), it has seen every write.
        kinds = {r.kind for r in DEFAULT_RESOURCES if r.plural != "leases"}
        assert watcher.recording is not None
        await watcher.poll(
            lambda: kinds <= {e["object"]["kind"] for e in recorded(watcher.recording) if _is_barrier(e)} or None,
            what=f"the recorder's barrier objects ({sorted(kinds)}) in the watcher's recording",
        )
        watcher_findings = await watcher.findings()
        _, readiness = await watcher.readiness()
        metrics = {
            name: await watcher.metric(name)
            for name in (
                "fightwatch_engine_writes_total",
                "fightwatch_watched_resources",
                "fightwatch_ready",
                "fightwatch_engine_resynced_objects_total",
            )
        }
        metrics["rewatches"] = await watcher.metric("fightwatch_watch_rewatches_total", resource="configmaps")
    finally:
        returncode = await watcher.stop(signal.SIGTERM)
    return LiveRun(
        events=events,
        findings=watcher_findings,
        readiness=readiness,
        metrics=metrics,
        log=watcher.log(),
        recording=watcher.recording,
        returncode=returncode,
    )
