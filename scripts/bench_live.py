#!/usr/bin/env python3
"""Benchmark of the live watcher against a real etcd + kube-apiserver (the pinned current release, or
`$FIGHTWATCH_KUBERNETES`) under write load.

Starts a throw-away control plane (harness), creates thousands of ConfigMaps (with ~1 KB of data each) and
Deployments, then runs watchers side by side on the same traffic, by default:

  fightwatch-metadata   `fightwatch run` as shipped: metadata-only lists and watches (--record on, for the lag)
  fightwatch-full       `fightwatch run` with full objects for every resource (--record on)
  baseline              kubernetes-asyncio's standard `Watch().stream()`, every event deserialized into models

`--fightwatch NAME=PYTHON:ENGINE:OBJECTS` (repeatable) names the fightwatch watchers instead: the interpreter of an
installed fightwatch (another build of it, to compare two versions on one traffic), `--engine` (auto, native,
python) and `metadata` or `full` objects.

while a load generator writes at a fixed rate for a fixed time (merge patches by several field managers; a few
objects are fought over by two managers). It reports, per watcher and over the load phase only: events handled
per second, CPU seconds per 1,000 events, event lag (write accepted by the API server, i.e. its answer read by
the writer -> event received by the watcher, p50/p99; fightwatch analyses an event in the same step it receives
it), resident memory, and for fightwatch the bytes received per event. All processes share the machine's cores
with the API server and etcd, as they would on a small node.

  .venv/bin/python scripts/bench_live.py                     # 3,000 ConfigMaps + 300 Deployments, 300 writes/s, 60 s
  .venv/bin/python scripts/bench_live.py --rate 500 --duration 30 --out /tmp/live.json
  .venv/bin/python scripts/bench_live.py --rate 900 --fightwatch after-native=.venv/bin/python:native:metadata \
      --fightwatch before-native=/tmp/before/.venv/bin/python:native:metadata
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from livebench import (  # noqa: E402
    cpu_seconds,
    is_ready,
    lags,
    listening,
    memory_kib,
    metrics_of,
    poll,
    recorded_writes,
    total,
)

from harness.control_plane import ControlPlane, start_control_plane  # noqa: E402
from harness.kube import CONFIGMAPS, DEPLOYMENTS, Kube, new_api_client  # noqa: E402

NAMESPACES = 10
MARKER = "bench-marker-"
IN_FLIGHT = 48  # concurrent writes of the load generator
READY_DEADLINE = 300.0
DRAIN_DEADLINE = 300.0
IDLE_SECONDS = 10.0
DATA = "".join(
    random.Random(7).choice(  # noqa: S311 - filler text, not cryptography
        "abcdefghijklmnopqrstuvwxyz0123456789 \n"
    )
    for _ in range(1000)
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configmaps", type=int, default=3000)
    parser.add_argument("--deployments", type=int, default=300)
    parser.add_argument("--fights", type=int, default=30, help="objects two managers fight over")
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "live.json")
    parser.add_argument("--workdir", type=Path, help="default: a temp dir, removed afterwards")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--fightwatch",
        action="append",
        type=_variant,
        metavar="NAME=PYTHON:ENGINE:OBJECTS",
        help="a fightwatch watcher (repeatable; default: this build's, metadata-only and full objects)",
    )
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Variant:
    """One `fightwatch run` of the benchmark: which installation (its interpreter), engine and objects."""

    name: str
    python: str
    engine: str
    full: bool


def _variant(text: str) -> Variant:
    name, _, spec = text.partition("=")
    parts = spec.split(":")
    if (
        not name
        or len(parts) != 3
        or parts[1] not in ("auto", "native", "python")
        or parts[2] not in ("metadata", "full")
    ):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PYTHON:auto|native|python:metadata|full")
    return Variant(name, parts[0], parts[1], parts[2] == "full")


DEFAULT_VARIANTS = (
    Variant("fightwatch-metadata", sys.executable, "auto", False),
    Variant("fightwatch-full", sys.executable, "auto", True),
)


# ------------------------------------------------------------------------------------------------ processes


@dataclass
class Watcher:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    recording: Path | None = None
    url: str = ""
    cpu: list[float] = field(default_factory=list)
    events: list[float] = field(default_factory=list)
    bytes: list[float] = field(default_factory=list)
    memory: dict[str, int] = field(default_factory=dict)
    idle_cpu: float = 0.0  # CPU seconds per second with no writes


def start_fightwatch(variant: Variant, cp: ControlPlane, workdir: Path) -> Watcher:
    """`fightwatch run` of one variant, started from the workdir (so that its interpreter imports its own
    installation, never this checkout's `watcher/`)."""
    name, full = variant.name, variant.full
    config: dict[str, Any] = {
        # plain HTTP: the benchmark polls its own endpoints, and TLS and access reviews are not what it measures
        "serve": {"address": "127.0.0.1", "port": 0, "insecure_http": True},
        "log": {"format": "json"},
        "watch": {"resources": ["configmaps", "deployments.apps"]},
    }
    if full:
        config["watch"]["per_resource"] = {"*": {"full_objects": True}}
    config_path = workdir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log, recording = workdir / f"{name}.log", workdir / f"{name}.jsonl"
    profile = ["-m", "cProfile", "-o", str(workdir / f"{name}.prof")] if os.environ.get("BENCH_PROFILE") else []
    argv = [variant.python, *profile, "-m", "watcher", "run", "--kubeconfig", str(cp.kubeconfig)]
    argv += ["--config", str(config_path), "--engine", variant.engine]
    argv += ["--record", str(recording)]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, cwd=workdir)
    return Watcher(name, proc, log, recording)


def start_baseline(cp: ControlPlane, workdir: Path) -> Watcher:
    log = workdir / "baseline.log"
    argv = [sys.executable, str(REPO / "scripts" / "bench_baseline_watch.py"), "--kubeconfig", str(cp.kubeconfig)]
    argv += ["--out", str(workdir / "baseline.json"), "--marker", MARKER]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    return Watcher("baseline", proc, log)


async def ready(session: aiohttp.ClientSession, watcher: Watcher) -> bool:
    if watcher.proc.poll() is not None:
        raise RuntimeError(f"{watcher.name} exited: {watcher.log.read_text()[-2000:]}")
    if watcher.recording is None:
        return b"ready" in watcher.log.read_bytes()
    watcher.url = watcher.url or listening(watcher.log)
    return bool(watcher.url) and await is_ready(session, watcher.url)


async def sample(session: aiohttp.ClientSession, watcher: Watcher) -> None:
    watcher.cpu.append(cpu_seconds(watcher.proc.pid))
    watcher.memory = memory_kib(watcher.proc.pid)
    if watcher.recording is not None:
        m = await metrics_of(session, watcher.url)
        watcher.events.append(total(m, "fightwatch_events_total"))
        watcher.bytes.append(total(m, "fightwatch_watch_received_bytes_total"))


# ----------------------------------------------------------------------------------------------------- load


def configmap(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": name.rsplit("-", 1)[0], "tier": "backend"},
            "annotations": {"example.com/owner": "team-platform"},
        },
        "data": {"config.yaml": DATA, "a": "0", "b": "0"},
    }


def deployment(ns: str, name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example.com/app:1.0.0",
                            "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(10)],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ]
                },
            },
        },
    }


async def populate(kube: Kube, args: argparse.Namespace) -> list[tuple[str, str]]:
    """Create the objects; return their paths ('configmap' or 'deployment', path)."""
    limit = asyncio.Semaphore(IN_FLIGHT)
    objects: list[tuple[str, str]] = []

    async def create(collection: str, body: dict[str, Any]) -> None:
        async with limit:
            await kube.create(collection, body, manager="bench-setup")

    tasks = []
    for n in range(NAMESPACES):
        await kube.ensure_namespace(f"bench-{n}")
    for i in range(args.configmaps):
        ns = f"bench-{i % NAMESPACES}"
        tasks.append(create(CONFIGMAPS.path(ns), configmap(ns, f"cm-{i}")))
        objects.append(("configmap", CONFIGMAPS.path(ns, f"cm-{i}")))
    for i in range(args.deployments):
        ns = f"bench-{i % NAMESPACES}"
        tasks.append(create(DEPLOYMENTS.path(ns), deployment(ns, f"deploy-{i}")))
        objects.append(("deployment", DEPLOYMENTS.path(ns, f"deploy-{i}")))
    await asyncio.gather(*tasks)
    return objects


@dataclass
class Load:
    accepted: dict[str, float] = field(default_factory=dict)  # resourceVersion -> when the writer had the answer
    writes: int = 0
    fight_writes: int = 0
    errors: int = 0
    seconds: float = 0.0


async def generate(kube: Kube, objects: list[tuple[str, str]], args: argparse.Namespace) -> Load:
    """Writes at a fixed rate: benign patches by per-field managers, and alternating writes on fought objects."""
    rng = random.Random(args.seed)  # noqa: S311 - a reproducible load, not cryptography
    fought = [path for kind, path in objects if kind == "configmap"][: args.fights]
    fight_turn = dict.fromkeys(fought, 0)
    load = Load()
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def write(path: str, patch: dict[str, Any], manager: str, *, fight: bool) -> None:
        try:
            answer = await kube.merge_patch(path, patch, manager=manager)
        except Exception:  # counted; the load goes on
            load.errors += 1
        else:
            load.accepted[answer["metadata"]["resourceVersion"]] = time.time()
            load.writes += 1
            load.fight_writes += fight
        finally:
            limit.release()

    loop = asyncio.get_running_loop()
    start = loop.time()
    total = int(args.rate * args.duration)
    fight_every = max(1, int(args.rate * 2.0 / max(len(fought), 1)))  # each fought object written every ~2 s
    tasks = []
    for k in range(total):
        await asyncio.sleep(max(0.0, start + k / args.rate - loop.time()))
        await limit.acquire()
        if fought and k % fight_every == 0:
            path = fought[(k // fight_every) % len(fought)]
            turn = fight_turn[path] = fight_turn[path] + 1
            side = "a" if turn % 2 else "b"
            patch = {"metadata": {"labels": {"owner": f"team-{side}"}}}
            tasks.append(asyncio.create_task(write(path, patch, f"fight-{side}-operator", fight=True)))
            continue
        kind, path = objects[rng.randrange(len(objects))]
        if kind == "configmap":
            key = rng.choice("ab")
            patch = {"data": {key: str(k)}}
            manager = f"writer-{key}"
        else:
            patch = {"metadata": {"annotations": {"example.com/revision": str(k)}}}
            manager = "deployer"
        tasks.append(asyncio.create_task(write(path, patch, manager, fight=False)))
    await asyncio.gather(*tasks)
    load.seconds = loop.time() - start
    return load


# ----------------------------------------------------------------------------------------------- analysis


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    print(f"control plane in {workdir}", flush=True)
    cp = start_control_plane(workdir / "control-plane")
    watchers: list[Watcher] = []
    client = await new_api_client(cp.kubeconfig, pool_size=IN_FLIGHT)
    session = aiohttp.ClientSession()
    try:
        kube = Kube(client)
        started = time.monotonic()
        objects = await populate(kube, args)
        print(f"created {len(objects)} objects in {time.monotonic() - started:.0f} s", flush=True)
        variants = args.fightwatch or DEFAULT_VARIANTS
        watchers = [*(start_fightwatch(v, cp, workdir) for v in variants), start_baseline(cp, workdir)]
        for watcher in watchers:
            await poll(lambda w=watcher: ready(session, w), f"{watcher.name} ready", READY_DEADLINE)
        print(f"watchers ready; {IDLE_SECONDS:.0f} s idle, then the load", flush=True)
        for watcher in watchers:
            await sample(session, watcher)
        await asyncio.sleep(IDLE_SECONDS)  # the idle cost of each watcher (ticks, timers), for comparison
        for watcher in watchers:
            watcher.idle_cpu = (cpu_seconds(watcher.proc.pid) - watcher.cpu[0]) / IDLE_SECONDS
            watcher.cpu.clear()
            watcher.events.clear()
            watcher.bytes.clear()
            await sample(session, watcher)
        load = await generate(kube, objects, args)
        print(f"{load.writes} writes in {load.seconds:.1f} s ({load.errors} errors); draining", flush=True)
        marker = await kube.create(
            CONFIGMAPS.path("bench-0"), configmap("bench-0", f"{MARKER}{time.time_ns()}"), manager="bench"
        )
        name = marker["metadata"]["name"].encode()

        async def drained(w: Watcher) -> bool:
            if w.recording is None:
                return f"seen {name.decode()}".encode() in w.log.read_bytes()
            return name in w.recording.read_bytes()[-200_000:]

        for watcher in watchers:
            await poll(lambda w=watcher: drained(w), f"{watcher.name} to receive every write", DRAIN_DEADLINE)
            await sample(session, watcher)
        findings: list[dict[str, Any]] = []
        async with session.get(watchers[0].url + "/api/v1/findings") as response:
            findings = (await response.json())["findings"]
    finally:
        await session.close()
        await client.close()
        for watcher in watchers:
            if watcher.proc.poll() is None:
                watcher.proc.send_signal(signal.SIGTERM)
        for watcher in watchers:
            watcher.proc.wait(60)
        cp.stop()
    return summarise(args, load, watchers, findings, workdir, server_version=cp.version)


def summarise(
    args: argparse.Namespace,
    load: Load,
    watchers: list[Watcher],
    findings: list[dict[str, Any]],
    workdir: Path,
    *,
    server_version: str,
) -> dict[str, Any]:
    baseline_doc = orjson.loads((workdir / "baseline.json").read_bytes())
    results: dict[str, Any] = {}
    for watcher in watchers:
        cpu = watcher.cpu[1] - watcher.cpu[0]
        if watcher.recording is not None:
            times = list(recorded_writes(watcher.recording))
            events = watcher.events[1] - watcher.events[0]
            per_event = (watcher.bytes[1] - watcher.bytes[0]) / events
        else:
            times = [(rv, t) for rv, t in baseline_doc["times"]]
            events = float(len([1 for rv, _ in times if rv in load.accepted]))
            per_event = None
        results[watcher.name] = {
            "events": int(events),
            "events_per_second": round(events / load.seconds, 1),
            "cpu_seconds": round(cpu, 2),
            "cpu_seconds_per_1000_events": round(1000 * cpu / events, 3),
            "events_per_cpu_second": round(events / cpu) if cpu else None,
            "idle_cpu_seconds_per_second": round(watcher.idle_cpu, 4),
            "lag": lags(load.accepted, times),
            "rss_mib": round(watcher.memory.get("VmRSS", 0) / 1024, 1),
            "peak_rss_mib": round(watcher.memory.get("VmHWM", 0) / 1024, 1),
            "bytes_per_event": None if per_event is None else round(per_event),
        }
    fought_names = {f"cm-{i}" for i in range(args.fights)}
    found = {f["object"]["name"] for f in findings if f["type"] == "fight"}
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "kubernetes": server_version,
        "objects": {"configmaps": args.configmaps, "deployments": args.deployments, "fought": args.fights},
        "load": {
            "target_writes_per_second": args.rate,
            "writes": load.writes,
            "fight_writes": load.fight_writes,
            "errors": load.errors,
            "seconds": round(load.seconds, 1),
            "writes_per_second": round(load.writes / load.seconds, 1),
        },
        "watchers": results,
        "findings": {
            "fights_found_of_injected": f"{len(found & fought_names)}/{len(fought_names)}",
            "other_findings": sorted(found - fought_names)
            + [f["object"]["name"] for f in findings if f["type"] != "fight"],
        },
    }


def print_table(result: dict[str, Any]) -> None:
    rows = [("watcher", "events/s", "CPU s/1k ev", "lag p50 ms", "lag p99 ms", "RSS MiB", "bytes/event")]
    for name, r in result["watchers"].items():
        rows.append(
            (
                name,
                f"{r['events_per_second']:.0f}",
                f"{r['cpu_seconds_per_1000_events']:.3f}",
                f"{r['lag']['p50_ms']:.1f}",
                f"{r['lag']['p99_ms']:.1f}",
                f"{r['rss_mib']:.0f}",
                "-" if r["bytes_per_event"] is None else str(r["bytes_per_event"]),
            )
        )
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)))
    print(orjson.dumps({k: v for k, v in result.items() if k != "watchers"}).decode())


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fightwatch-bench-live-"))
    result = asyncio.run(run(args, workdir))
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"written to {args.out}")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
