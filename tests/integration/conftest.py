"""One live run for the whole session: every scenario's real clients write while two watchers follow.

The harness recorder (full objects, the reference) and `fightwatch run` (the live watcher as users run it:
metadata-only except Deployments, short server-side watch timeouts so its watches are resumed several times
during the run) watch the same traffic. Both are read afterwards: the recorder's events by
test_live_detection, the watcher's findings, log, metrics and recording by test_watcher_live. The scenarios
take about 3.5 minutes (the slow fight writes once every 50 s); running them once keeps the suite short. The other
release test_live_detection checks (the oldest supported) runs them at the same time, on a control plane of its own
under a recorder alone: the runs wait on real time far more than they compute.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.control_plane import ControlPlane, default_release, start_control_plane
from harness.kube import Kube, new_api_client
from harness.recorder import BARRIER_NAMESPACE, BARRIER_PREFIX, DEFAULT_RESOURCES
from harness.recording import record_scenarios
from harness.scenarios import SCENARIOS, ensure_widget_crd
from harness.watcher import Watcher, recorded


def live_releases() -> list[str]:
    """The releases the live-detection and audit-scenario tests run on: the default one (`$FIGHTWATCH_KUBERNETES`,
    else current) and, unless that is the oldest, the oldest release upstream still supports too."""
    default = default_release()
    return [default] if default == "oldest" else [default, "oldest"]


# The watcher as users run it: metadata only (managedFields name every writer on current servers, and every write
# stamps its writer's entry: tests/unit/test_detection.py), short server-side watch timeouts.
LIVE_WATCHER_CONFIG: dict[str, Any] = {
    "watch": {
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
    metrics_text: str  # a whole scrape of /metrics
    log: list[dict[str, Any]]
    recording: Path
    returncode: int
    server_version: str  # the control plane's release (`/version`)
    # The recorder's events of the same scenarios on each other release `live_releases` names (run at the same time).
    other_releases: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _is_barrier(event: dict[str, Any]) -> bool:
    meta = event["object"]["metadata"]
    return meta.get("namespace") == BARRIER_NAMESPACE or str(meta.get("name", "")).startswith(BARRIER_PREFIX)


async def _recorded_on(release: str, workdir: Path) -> list[dict[str, Any]]:
    """Run every scenario on a control plane of `release` (with its controller manager) under a recorder alone."""
    cp = await asyncio.to_thread(start_control_plane, workdir, release=release)
    try:
        await asyncio.to_thread(cp.start_controller_manager)
        events, version = await record_scenarios(cp, list(SCENARIOS))
        assert version["gitVersion"] == cp.version
        return events
    finally:
        await asyncio.to_thread(cp.stop)


@pytest.fixture(scope="session")
async def live_run(controller_manager: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    others = {
        release: asyncio.create_task(_recorded_on(release, tmp_path_factory.mktemp(f"control-plane-{release}")))
        for release in live_releases()
        if release != default_release()
    }
    try:
        run = await _live_run(controller_manager, tmp_path_factory)
        run.other_releases = {release: await task for release, task in others.items()}
    finally:
        for task in others.values():
            task.cancel()
        await asyncio.gather(*others.values(), return_exceptions=True)
    return run


async def _live_run(controller_manager: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
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
        recording = watcher.recording
        assert recording is not None
        await watcher.poll(
            lambda: kinds <= {e["object"]["kind"] for e in recorded(recording) if _is_barrier(e)} or None,
            what=f"the recorder's barrier objects ({sorted(kinds)}) in the watcher's recording",
        )
        watcher_findings = await watcher.findings()
        _, readiness = await watcher.readiness()
        cm = {"group": "", "resource": "configmaps"}
        metrics = {
            "ready": await watcher.metric("fightwatch_ready"),
            "writes": await watcher.metric("fightwatch_engine_events_total", outcome="write"),
            "watched": await watcher.metric("fightwatch_resources", state="watched"),
            "rewatches": await watcher.metric("fightwatch_watch_restarts_total", **cm, reason="timeout"),
            "configmap events": await watcher.metric("fightwatch_events_total", **cm, type="MODIFIED"),
            "configmap bytes": await watcher.metric("fightwatch_watch_received_bytes_total", **cm),
            "configmap watches": await watcher.metric("fightwatch_watches", **cm, state="watching"),
        }

        async def told_as_events() -> float | None:  # (Events are on by default; no write is left to change them)
            changes = sum(1 for e in watcher.log() if str(e.get("event", "")).startswith("finding "))
            sent = await watcher.metric("fightwatch_delivery_sent_total", sink="events")
            return sent if changes and sent == changes else None

        metrics["events sent"] = await watcher.poll_async(told_as_events, what="every finding change sent as an Event")
        metrics_text = await watcher.scrape()
    finally:
        returncode = await watcher.stop(signal.SIGTERM)
    return LiveRun(
        events=events,
        findings=watcher_findings,
        readiness=readiness,
        metrics=metrics,
        metrics_text=metrics_text,
        log=watcher.log(),
        recording=recording,
        returncode=returncode,
        server_version=controller_manager.version,
    )
