"""Run the live benchmark: a control plane and its objects, then each run's watchers, idle time, load and drain."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from harness.bench.cluster_load import control_plane, stop, wait_ready
from harness.bench.live.figures import summarise
from harness.bench.live.watchers import IDLE_SECONDS, MARKER, Variant, Watcher, sample, start_watchers
from harness.bench.live.workload import Workload, configmap, generate, populate
from harness.bench.polling import poll
from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, Kube

READY_DEADLINE = 300.0
DRAIN_DEADLINE = 300.0


async def benchmark(
    workload: Workload, variants: Sequence[Variant], *, runs: int, workdir: Path, informer: Path, floor: bool
) -> tuple[list[dict[str, Any]], str]:
    """Measure `runs` times on one control plane; return each run's figures and the API server's version.

    `floor`: run the floor watchers too (`watchers.start_watchers`).
    """
    print(f"control plane in {workdir}", flush=True)
    async with control_plane(workdir) as (cp, kube):
        started = time.monotonic()
        objects = await populate(kube, workload)
        print(f"created {len(objects)} objects in {time.monotonic() - started:.0f} s", flush=True)
        figures = [
            await measure(
                kube, cp, objects, workload, variants, informer=informer, floor=floor, run=n, runs=runs, workdir=workdir
            )
            for n in range(runs)
        ]
    return figures, cp.version


async def measure(
    kube: Kube,
    cp: ControlPlane,
    objects: list[tuple[str, str]],
    workload: Workload,
    variants: Sequence[Variant],
    *,
    informer: Path,
    floor: bool,
    run: int,
    runs: int,
    workdir: Path,
) -> dict[str, Any]:
    """Measure one run and return its figures.

    Start the watchers, wait until each is ready, let them idle, write the load, wait until each has received every
    write.
    """
    rundir = workdir / f"run-{run + 1}"
    rundir.mkdir(parents=True, exist_ok=True)
    watchers = start_watchers(variants, cp, rundir, informer=informer, floor=floor, run=run)
    print(f"run {run + 1} of {runs}, started in turn: {', '.join(w.name for w in watchers)}", flush=True)
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, watchers, READY_DEADLINE)
            print(f"watchers ready; {IDLE_SECONDS:.0f} s idle, then the load", flush=True)
            for watcher in watchers:
                await sample(session, watcher, "ready")
            await asyncio.sleep(IDLE_SECONDS)  # the idle cost of each watcher (ticks, timers), for comparison
            for watcher in watchers:
                await sample(session, watcher, "idle")
            load = await generate(kube, objects, workload, run=run)
            print(f"{load.writes} writes in {load.seconds:.1f} s ({load.errors} errors); draining", flush=True)
            await drain(session, kube, watchers)
            first = next(w for w in watchers if w.name == variants[0].name)
            async with session.get(first.url + "/api/v1/findings") as response:
                findings = (await response.json())["findings"]
    finally:
        stop(watchers)
    return summarise(workload, load, watchers, findings)


async def drain(session: aiohttp.ClientSession, kube: Kube, watchers: list[Watcher]) -> None:
    """Wait until each watcher has received every write; sample each then.

    A marker ConfigMap is created after the load: a watcher that has received it has received every write before.
    """
    name = f"{MARKER}{time.time_ns()}"
    await kube.create(CONFIGMAPS.path("bench-0"), configmap("bench-0", name, keys=""), manager="bench")

    async def drained(watcher: Watcher) -> bool:
        if watcher.recording is None:
            return f"seen {name}".encode() in watcher.log.read_bytes()
        return name.encode() in watcher.recording.read_bytes()[-200_000:]

    for watcher in watchers:
        await poll(functools.partial(drained, watcher), f"{watcher.name} to receive every write", DRAIN_DEADLINE)
        await sample(session, watcher, "load")
