"""Run one run of the load test (`ha` or `shards`): a fresh control plane, its objects, the watchers, the load.

In the `ha` run with two replicas, the leader is killed (SIGKILL) during the load: the standby must take over and
deliver, with no finding lost and none duplicated (exactly one Warning Event per finding).
"""

from __future__ import annotations

import asyncio
import functools
import signal
import statistics
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from harness.bench.cluster_load import Load, control_plane, load_figures, stop, wait_ready
from harness.bench.endpoints import metrics_of
from harness.bench.load_test.figures import compare, figures, vs_informer
from harness.bench.load_test.watchers import MARKER, SAMPLE_EVERY, Setup, Watcher, sample_forever, start_watchers
from harness.bench.load_test.workload import KINDS, Cluster, Workload, expected_findings, generate, plan, populate
from harness.bench.polling import poll
from harness.kube import Kube
from watcher.config import Config
from watcher.model import parse_time

READY_DEADLINE = 600.0
DRAIN_DEADLINE = 300.0
EVENTS = "/apis/events.k8s.io/v1/events"


async def run(name: str, workload: Workload, setup: Setup, workdir: Path) -> dict[str, Any]:
    """Run `name` (`ha` or `shards`) on a fresh control plane in `workdir`; return its figures."""
    print(f"[{name}] control plane in {workdir}", flush=True)
    async with (
        control_plane(workdir) as (cp, kube),
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
    ):
        watchers: list[Watcher] = []
        try:
            cluster = plan(workload)
            started = time.monotonic()
            await populate(kube, cluster)
            print(f"[{name}] created {len(cluster.objects)} objects in {time.monotonic() - started:.0f} s", flush=True)
            watchers = start_watchers(name, cp, workdir, setup)
            started = time.monotonic()
            await wait_ready(session, watchers, READY_DEADLINE)
            print(f"[{name}] watchers ready in {time.monotonic() - started:.0f} s; load", flush=True)
            return await measure(name, workload, setup, kube=kube, session=session, cluster=cluster, watchers=watchers)
        finally:
            stop(watchers)


async def measure(
    name: str,
    workload: Workload,
    setup: Setup,
    *,
    kube: Kube,
    session: aiohttp.ClientSession,
    cluster: Cluster,
    watchers: list[Watcher],
) -> dict[str, Any]:
    """Write the load (killing the leader during the `ha` run), then make what each watcher did and found."""
    leader: Watcher | None = None
    if name == "ha" and len([w for w in watchers if w.recording is not None]) > 1:
        for watcher in watchers:
            if (
                watcher.recording is not None
                and (await metrics_of(session, watcher.url)).get("fightwatch_leader") == 1.0
            ):
                leader = watcher
    kill_at = setup.kill_at if setup.kill_at is not None else workload.duration / 2

    def on_tick(at: float) -> None:
        if leader is not None and leader.killed_at is None and at >= kill_at:
            leader.proc.send_signal(signal.SIGKILL)
            leader.killed_at = time.time()
            print(f"[{name}] killed the leader {leader.name} at {at:.0f} s", flush=True)

    sampler = asyncio.create_task(sample_forever(session, watchers, setup.samples))
    try:
        load = await generate(kube, cluster, workload, on_tick)
        print(f"[{name}] {load.writes} writes in {load.seconds:.1f} s ({load.errors} errors); draining", flush=True)
        await marker_seen(kube, watchers)
        await asyncio.sleep(2 * SAMPLE_EVERY)  # (the last samples, after the load)
    finally:
        sampler.cancel()
    findings = []
    for watcher in (w for w in watchers if w.alive() and w.recording is not None):
        answer = await get_json(session, watcher.url + "/api/v1/findings")
        findings += [f for f in answer["findings"] if MARKER not in f["object"]["name"]]
    result: dict[str, Any] = {
        "load": load_figures(load, rate=workload.rate, injected_as="injected_writes"),
        "watchers": {w.name: figures(w, load) for w in watchers},
        "findings": compare(findings, cluster),
    }
    if setup.informer:
        result["vs_informer"] = vs_informer(result["watchers"])
    if name == "shards":
        result["shards"] = {
            w.name: sorted(r.split("@")[0] for r in (await get_json(session, w.url + "/readyz"))["resources"])
            for w in watchers
        }
        events = [result["watchers"][w.name]["events"] for w in watchers]
        result["balance_max_over_mean"] = round(max(events) / statistics.fmean(events), 3)
    if leader is not None:
        standby = next(w for w in watchers if w is not leader and w.recording is not None)
        result["failover"] = await failover(kube, cluster, load, leader, standby)
    return result


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """GET `url` and decode its JSON answer."""
    async with session.get(url) as response:
        return await response.json()


async def marker_seen(kube: Kube, watchers: list[Watcher]) -> None:
    """Create one object of each kind; wait until every live watcher has recorded the one of its shard."""
    names = []
    for kind in KINDS:
        r = kind.resource
        name = f"{MARKER}{time.time_ns()}"
        body = {"apiVersion": r.api_version, "kind": r.kind, "metadata": {"name": name, "namespace": "load-0"}}
        await kube.create(r.path("load-0"), body | kind.body(0), manager="load-marker")
        names.append(name.encode())

    async def drained(w: Watcher) -> bool:
        tail = (w.recording or w.log).read_bytes()[-2_000_000:]
        return any(name in tail for name in names)

    for watcher in watchers:
        if watcher.alive():
            await poll(functools.partial(drained, watcher), f"{watcher.name} to receive every write", DRAIN_DEADLINE)


async def events_told(kube: Kube) -> list[dict[str, Any]]:
    """List the Warning Events fightwatch has reported."""
    listing = await kube.get(EVENTS)
    return [e for e in listing["items"] if e.get("reportingController") == "fightwatch" and e["type"] == "Warning"]


async def failover(kube: Kube, cluster: Cluster, load: Load, leader: Watcher, standby: Watcher) -> dict[str, Any]:
    """Measure the standby's takeover, and check the Events: one per injected finding, none else, none twice."""
    assert leader.killed_at is not None
    leading = standby.log_lines("leading")
    took_over = parse_time(leading[0]["timestamp"]) if leading else None
    delivering = standby.log_lines("delivering")

    async def all_told() -> list[dict[str, Any]] | None:
        told = await events_told(kube)
        return told if len({e["regarding"]["uid"] for e in told}) >= len(expected_findings(cluster)) else None

    try:
        told = await poll(all_told, "an Event for every injected finding", 60.0)
    except TimeoutError:
        told = await events_told(kube)
    per_finding = Counter(
        (e["reason"], e["regarding"]["kind"], e["regarding"]["namespace"], e["regarding"]["name"]) for e in told
    )
    reasons = {"fight": "ControllerFight", "hot_loop": "ControllerHotLoop"}
    expected = {(reasons[t], k, ns, n) for t, k, ns, n in expected_findings(cluster)}
    by_reporter = Counter(e.get("reportingInstance") for e in told)
    gap_start = leader.killed_at
    # (a fight is found at its third handover, 8-12 s after it starts; a hot loop after 20 writes, 20 s)
    began_near_the_failover = [
        f"{k.resource.kind}/{ns}/{n}"
        for k, ns, n, begin in cluster.fights + cluster.hot
        if took_over is not None and gap_start - 20 <= load.started + begin <= took_over
    ]
    return {
        "lease_duration_s": Config().leader_election.lease_duration,
        "killed_at": datetime.fromtimestamp(gap_start, tz=UTC).isoformat(),
        "takeover_seconds": round(took_over - gap_start, 2) if took_over is not None else None,
        "catch_up_changes": delivering[0].get("catch_up") if delivering else None,
        "warning_events": len(told),
        "findings_with_an_event": f"{len(expected & set(per_finding))}/{len(expected)}",
        "findings_without_an_event": sorted("/".join(x) for x in expected - set(per_finding)),
        "events_for_no_injected_finding": sorted("/".join(x) for x in set(per_finding) - expected),
        "findings_with_two_events": sorted("/".join(x) for x, n in per_finding.items() if n > 1),
        "events_by_reporter": dict(by_reporter),
        "injected_findings_started_near_the_failover": began_near_the_failover,
    }
