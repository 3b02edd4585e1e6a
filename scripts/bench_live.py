#!/usr/bin/env python3
"""Benchmark of the live watcher against a real etcd + kube-apiserver (the pinned current release, or
`$FIGHTWATCH_KUBERNETES`) under write load.

Starts a throw-away control plane (harness), creates thousands of ConfigMaps (with ~1 KB of data each) and
Deployments in `--namespaces` namespaces, then runs watchers side by side on the same traffic, by default:

  fightwatch-metadata   `fightwatch run` as shipped: metadata-only lists and watches (--record on, for the lag)
  fightwatch-full       `fightwatch run` with full objects for every resource (--record on)
  baseline              kubernetes-asyncio's standard `Watch().stream()`, every event deserialized into models
  informer              a Go controller's watch: client-go's metadata-only shared informers (scripts/informer, built
                        with `go build` on first use and cached, see informer_build.py)

`--fightwatch NAME=PYTHON:ENGINE:OBJECTS` (repeatable) names the fightwatch watchers instead: the interpreter of an
installed fightwatch (another build of it, to compare two versions on one traffic), `--engine` (auto, native,
python) and `metadata` or `full` objects.

while a load generator writes at a fixed rate for a fixed time (merge patches on ConfigMaps' data by `--managers`
field managers, writer-a, writer-b, ..., one key each; on Deployments' annotations by `deployer`; a few ConfigMaps
are fought over by two more managers, fight-a-operator and fight-b-operator). It reports, per watcher and over the
load phase only: events handled per second, CPU seconds per 1,000 events, event lag (write accepted by the API
server, i.e. its answer read by the writer -> event received by the watcher, p50/p99; fightwatch analyses an event
in the same step it receives it), resident memory (once every watcher is ready, at the end of 10 s of idling, at the
end of the load, and the peak), and for fightwatch the bytes received per event; then each fightwatch watcher over
the client-go informer: CPU per event, and resident memory at the end of the load and of the idle phase. All
processes share the machine's cores with the API server and etcd, as they would on a small node.

`--runs N` measures N times on the one control plane (new watchers, new writes to the same objects), starting the
watchers in turns (reversed every other run, so that none always lists first), and reports the ratios of each run
and their median. The JSON's `load`, `watchers` and `findings` are the first run's; `runs` holds every run's.

  .venv/bin/python scripts/bench_live.py                     # 3,000 ConfigMaps + 300 Deployments, 300 writes/s, 60 s
  .venv/bin/python scripts/bench_live.py --configmaps 2000 --deployments 0 --namespaces 4 --managers 3 --runs 3
  .venv/bin/python scripts/bench_live.py --rate 500 --duration 30 --out /tmp/live.json
  .venv/bin/python scripts/bench_live.py --rate 900 --fightwatch after-native=.venv/bin/python:native:metadata \
      --fightwatch before-native=/tmp/before/.venv/bin/python:native:metadata
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import shutil
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
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
    aligned,
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
from harness.go_build import informer_binary  # noqa: E402
from harness.kube import CONFIGMAPS, DEPLOYMENTS, Kube, new_api_client  # noqa: E402

MARKER = "bench-marker-"
IN_FLIGHT = 48  # concurrent writes of the load generator
READY_DEADLINE = 300.0
DRAIN_DEADLINE = 300.0
IDLE_SECONDS = 10.0
PHASES = ("ready", "idle", "load")  # when each watcher is sampled: every one ready, after the idle time, drained
INFORMER = "informer"  # the client-go watcher, which each fightwatch watcher is compared with
WRITER_KEYS = string.ascii_lowercase  # writer-a owns the ConfigMaps' data key `a`, writer-b `b`, ...
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
    parser.add_argument("--namespaces", type=_positive, default=10, help="the objects are spread over these")
    parser.add_argument(
        "--managers",
        type=int,
        choices=range(1, len(WRITER_KEYS) + 1),
        default=2,
        metavar="N",
        help="field managers writing ConfigMaps' data (writer-a, writer-b, ...; default 2)",
    )
    parser.add_argument("--fights", type=int, default=30, help="objects two managers fight over")
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--runs", type=_positive, default=1, help="measurements, the watchers started in turns")
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


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number above 0")
    return int(text)


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
        or name in ("baseline", INFORMER)
        or len(parts) != 3
        or parts[1] not in ("auto", "native", "python")
        or parts[2] not in ("metadata", "full")
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=PYTHON:auto|native|python:metadata|full, NAME not baseline or {INFORMER}"
        )
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
    recording: Path | None = None  # fightwatch's --record
    out: Path | None = None  # a baseline's --out: {"events": n, "times": [[resourceVersion, seconds], ...]}
    url: str = ""
    # by phase (PHASES): CPU seconds so far, fightwatch's events and bytes received so far, VmRSS in KiB
    cpu: dict[str, float] = field(default_factory=dict)
    events: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)
    rss_kib: dict[str, int] = field(default_factory=dict)
    peak_kib: int = 0  # VmHWM at the last sample


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


def start_baseline(name: str, argv: list[str], cp: ControlPlane, workdir: Path) -> Watcher:
    """A baseline watcher (bench_baseline_watch.py, scripts/informer): prints `ready` and `seen NAME`, and writes
    the events it received to --out on SIGTERM."""
    log, out = workdir / f"{name}.log", workdir / f"{name}.json"
    argv = [*argv, "--kubeconfig", str(cp.kubeconfig), "--out", str(out), "--marker", MARKER]
    with log.open("wb") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
    return Watcher(name, proc, log, out=out)


def start_watchers(
    variants: Sequence[Variant], cp: ControlPlane, workdir: Path, *, informer: Path, run: int
) -> list[Watcher]:
    """Every watcher, in the order started: fightwatch's, the kubernetes-asyncio baseline, the client-go informer;
    the other way round on every other run."""
    baseline = [sys.executable, str(REPO / "scripts" / "bench_baseline_watch.py")]
    starts: list[Callable[[], Watcher]] = [
        *(functools.partial(start_fightwatch, variant, cp, workdir) for variant in variants),
        functools.partial(start_baseline, "baseline", baseline, cp, workdir),
        functools.partial(start_baseline, INFORMER, [str(informer)], cp, workdir),
    ]
    return [start() for start in (starts[::-1] if run % 2 else starts)]


def stop(watchers: list[Watcher]) -> None:
    for watcher in watchers:
        if watcher.proc.poll() is None:
            watcher.proc.send_signal(signal.SIGTERM)
    for watcher in watchers:
        watcher.proc.wait(60)


async def ready(session: aiohttp.ClientSession, watcher: Watcher) -> bool:
    if watcher.proc.poll() is not None:
        raise RuntimeError(f"{watcher.name} exited: {watcher.log.read_text()[-2000:]}")
    if watcher.recording is None:
        return b"ready" in watcher.log.read_bytes().splitlines()
    watcher.url = watcher.url or listening(watcher.log)
    return bool(watcher.url) and await is_ready(session, watcher.url)


async def sample(session: aiohttp.ClientSession, watcher: Watcher, phase: str) -> None:
    watcher.cpu[phase] = cpu_seconds(watcher.proc.pid)
    memory = memory_kib(watcher.proc.pid)
    watcher.rss_kib[phase], watcher.peak_kib = memory["VmRSS"], memory["VmHWM"]
    if watcher.recording is not None:
        m = await metrics_of(session, watcher.url)
        watcher.events[phase] = total(m, "fightwatch_events_total")
        watcher.bytes[phase] = total(m, "fightwatch_watch_received_bytes_total")


# ----------------------------------------------------------------------------------------------------- load


def configmap(ns: str, name: str, *, keys: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": name.rsplit("-", 1)[0], "tier": "backend"},
            "annotations": {"example.com/owner": "team-platform"},
        },
        "data": {"config.yaml": DATA} | dict.fromkeys(keys, "0"),
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
    for n in range(args.namespaces):
        await kube.ensure_namespace(f"bench-{n}")
    for i in range(args.configmaps):
        ns = f"bench-{i % args.namespaces}"
        tasks.append(create(CONFIGMAPS.path(ns), configmap(ns, f"cm-{i}", keys=WRITER_KEYS[: args.managers])))
        objects.append(("configmap", CONFIGMAPS.path(ns, f"cm-{i}")))
    for i in range(args.deployments):
        ns = f"bench-{i % args.namespaces}"
        tasks.append(create(DEPLOYMENTS.path(ns), deployment(ns, f"deploy-{i}")))
        objects.append(("deployment", DEPLOYMENTS.path(ns, f"deploy-{i}")))
    await asyncio.gather(*tasks)
    return objects


@dataclass
class Load:
    accepted: dict[str, float] = field(default_factory=dict)  # resourceVersion -> when the writer had the answer
    writes: int = 0
    fight_writes: int = 0
    by_manager: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    seconds: float = 0.0


async def generate(kube: Kube, objects: list[tuple[str, str]], args: argparse.Namespace, *, run: int) -> Load:
    """Writes at a fixed rate: benign patches by per-field managers, and alternating writes on fought objects. Every
    value written names the run, so that no write of a later run leaves an object as it was (no event)."""
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
            load.by_manager[manager] += 1
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
            patch = {"metadata": {"labels": {"owner": f"team-{side}-{run}"}}}
            tasks.append(asyncio.create_task(write(path, patch, f"fight-{side}-operator", fight=True)))
            continue
        kind, path = objects[rng.randrange(len(objects))]
        if kind == "configmap":
            key = rng.choice(WRITER_KEYS[: args.managers])
            patch = {"data": {key: f"{run}.{k}"}}
            manager = f"writer-{key}"
        else:
            patch = {"metadata": {"annotations": {"example.com/revision": f"{run}.{k}"}}}
            manager = "deployer"
        tasks.append(asyncio.create_task(write(path, patch, manager, fight=False)))
    await asyncio.gather(*tasks)
    load.seconds = loop.time() - start
    return load


# ------------------------------------------------------------------------------------------------- measure


async def measure(
    kube: Kube,
    cp: ControlPlane,
    objects: list[tuple[str, str]],
    args: argparse.Namespace,
    *,
    informer: Path,
    run: int,
    workdir: Path,
) -> dict[str, Any]:
    """One run: start the watchers, wait until each is ready, let them idle, write the load, wait until each has
    received every write; the run's figures."""
    variants = args.fightwatch or DEFAULT_VARIANTS
    rundir = workdir / f"run-{run + 1}"
    rundir.mkdir(parents=True, exist_ok=True)
    watchers = start_watchers(variants, cp, rundir, informer=informer, run=run)
    print(f"run {run + 1} of {args.runs}, started in turn: {', '.join(w.name for w in watchers)}", flush=True)
    try:
        async with aiohttp.ClientSession() as session:
            for watcher in watchers:
                await poll(lambda w=watcher: ready(session, w), f"{watcher.name} ready", READY_DEADLINE)
            print(f"watchers ready; {IDLE_SECONDS:.0f} s idle, then the load", flush=True)
            for watcher in watchers:
                await sample(session, watcher, "ready")
            await asyncio.sleep(IDLE_SECONDS)  # the idle cost of each watcher (ticks, timers), for comparison
            for watcher in watchers:
                await sample(session, watcher, "idle")
            load = await generate(kube, objects, args, run=run)
            print(f"{load.writes} writes in {load.seconds:.1f} s ({load.errors} errors); draining", flush=True)
            await drain(session, kube, watchers)
            first = next(w for w in watchers if w.name == variants[0].name)
            async with session.get(first.url + "/api/v1/findings") as response:
                findings = (await response.json())["findings"]
    finally:
        stop(watchers)
    return summarise(args, load, watchers, findings)


async def drain(session: aiohttp.ClientSession, kube: Kube, watchers: list[Watcher]) -> None:
    """Create a marker ConfigMap and wait until each watcher has received it, and so every write before it; sample
    each watcher then."""
    name = f"{MARKER}{time.time_ns()}"
    await kube.create(CONFIGMAPS.path("bench-0"), configmap("bench-0", name, keys=""), manager="bench")

    async def drained(watcher: Watcher) -> bool:
        if watcher.recording is None:
            return f"seen {name}".encode() in watcher.log.read_bytes()
        return name.encode() in watcher.recording.read_bytes()[-200_000:]

    for watcher in watchers:
        await poll(lambda w=watcher: drained(w), f"{watcher.name} to receive every write", DRAIN_DEADLINE)
        await sample(session, watcher, "load")


# ------------------------------------------------------------------------------------------------ analysis


def summarise(
    args: argparse.Namespace, load: Load, watchers: list[Watcher], findings: list[dict[str, Any]]
) -> dict[str, Any]:
    """One run's figures: each watcher's over the load phase, and each fightwatch watcher over the informer."""
    results = {watcher.name: figures(watcher, load) for watcher in watchers}
    fought_names = {f"cm-{i}" for i in range(args.fights)}
    found = {f["object"]["name"] for f in findings if f["type"] == "fight"}
    return {
        "start_order": [watcher.name for watcher in watchers],
        "load": {
            "target_writes_per_second": args.rate,
            "writes": load.writes,
            "fight_writes": load.fight_writes,
            "writes_by_manager": dict(sorted(load.by_manager.items())),
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
        "vs_informer": vs_informer(watchers, results),
    }


def figures(watcher: Watcher, load: Load) -> dict[str, Any]:
    """A watcher's events, CPU and lag over the load phase, and its resident memory."""
    cpu = watcher.cpu["load"] - watcher.cpu["idle"]
    if watcher.recording is None:
        times = [(rv, t) for rv, t in orjson.loads(watcher.out.read_bytes())["times"]]
        events = float(sum(rv in load.accepted for rv, _ in times))
        per_event = None
    else:
        times = list(recorded_writes(watcher.recording))
        events = watcher.events["load"] - watcher.events["idle"]
        per_event = (watcher.bytes["load"] - watcher.bytes["idle"]) / events
    return {
        "events": int(events),
        "events_per_second": round(events / load.seconds, 1),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_1000_events": round(1000 * cpu / events, 3),
        "events_per_cpu_second": round(events / cpu) if cpu else None,
        "idle_cpu_seconds_per_second": round((watcher.cpu["idle"] - watcher.cpu["ready"]) / IDLE_SECONDS, 4),
        "lag": lags(load.accepted, times),
        "rss_mib": mib(watcher.rss_kib["load"]),
        "peak_rss_mib": mib(watcher.peak_kib),
        "rss_mib_by_phase": {phase: mib(watcher.rss_kib[phase]) for phase in PHASES},
        "bytes_per_event": None if per_event is None else round(per_event),
    }


def mib(kib: int) -> float:
    return round(kib / 1024, 1)


def vs_informer(watchers: list[Watcher], results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each fightwatch watcher over the client-go informer: CPU per event over the load, and resident memory at the
    end of the load and of the idle phase."""
    informer = next(watcher for watcher in watchers if watcher.name == INFORMER)

    def cpu_per_event(watcher: Watcher) -> float:
        return (watcher.cpu["load"] - watcher.cpu["idle"]) / results[watcher.name]["events"]

    return {
        watcher.name: {
            "cpu_per_event": round(cpu_per_event(watcher) / cpu_per_event(informer), 2),
            "rss_end_of_load": round(watcher.rss_kib["load"] / informer.rss_kib["load"], 2),
            "rss_idle": round(watcher.rss_kib["idle"] / informer.rss_kib["idle"], 2),
        }
        for watcher in watchers
        if watcher.recording is not None
    }


def report(args: argparse.Namespace, runs: list[dict[str, Any]], *, server_version: str) -> dict[str, Any]:
    first = runs[0]
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "kubernetes": server_version,
        "objects": {
            "configmaps": args.configmaps,
            "deployments": args.deployments,
            "namespaces": args.namespaces,
            "fought": args.fights,
        },
        # the first run's figures, where they were before --runs
        "load": first["load"],
        "watchers": first["watchers"],
        "findings": first["findings"],
        "runs": runs,
        "vs_informer_median": {
            name: {key: round(statistics.median(run["vs_informer"][name][key] for run in runs), 2) for key in ratios}
            for name, ratios in first["vs_informer"].items()
        },
    }


def print_summary(result: dict[str, Any]) -> None:
    print(orjson.dumps({key: result[key] for key in ("date", "machine", "kubernetes", "objects")}).decode())
    for number, run in enumerate(result["runs"], 1):
        print(f"\nrun {number}, started in turn: {', '.join(run['start_order'])}")
        print_watchers(run["watchers"])
        print(orjson.dumps({"load": run["load"], "findings": run["findings"]}).decode())
    print("\nfightwatch next to the client-go informer (fightwatch / informer)")
    print_comparison(result)


def print_watchers(watchers: dict[str, Any]) -> None:
    rows = [
        (
            "watcher",
            "events/s",
            "CPU s/1k ev",
            "lag p50 ms",
            "lag p99 ms",
            "RSS MiB ready/idle/load/peak",
            "bytes/event",
        )
    ]
    for name, r in watchers.items():
        rss = [f"{r['rss_mib_by_phase'][phase]:.0f}" for phase in PHASES] + [f"{r['peak_rss_mib']:.0f}"]
        rows.append(
            (
                name,
                f"{r['events_per_second']:.0f}",
                f"{r['cpu_seconds_per_1000_events']:.3f}",
                f"{r['lag']['p50_ms']:.1f}",
                f"{r['lag']['p99_ms']:.1f}",
                "/".join(rss),
                "-" if r["bytes_per_event"] is None else str(r["bytes_per_event"]),
            )
        )
    print(aligned(rows))


def print_comparison(result: dict[str, Any]) -> None:
    """Each run's fightwatch figures beside the informer's, and the ratios; then the ratios' medians."""
    rows = [
        ("run", "fightwatch", "CPU s/1k ev", "RSS MiB idle", "RSS MiB load", "x CPU/event", "x RSS load", "x RSS idle")
    ]
    for number, run in enumerate(result["runs"], 1):
        informer = run["watchers"][INFORMER]
        for name, ratios in run["vs_informer"].items():
            r = run["watchers"][name]
            rows.append(
                (
                    str(number),
                    name,
                    f"{r['cpu_seconds_per_1000_events']:.3f} / {informer['cpu_seconds_per_1000_events']:.3f}",
                    f"{r['rss_mib_by_phase']['idle']:.0f} / {informer['rss_mib_by_phase']['idle']:.0f}",
                    f"{r['rss_mib_by_phase']['load']:.0f} / {informer['rss_mib_by_phase']['load']:.0f}",
                    *ratio_cells(ratios),
                )
            )
    for name, ratios in result["vs_informer_median"].items():
        rows.append(("median", name, "", "", "", *ratio_cells(ratios)))
    print(aligned(rows))


def ratio_cells(ratios: dict[str, float]) -> tuple[str, str, str]:
    return f"{ratios['cpu_per_event']:.2f}", f"{ratios['rss_end_of_load']:.2f}", f"{ratios['rss_idle']:.2f}"


# ---------------------------------------------------------------------------------------------------- main


async def benchmark(args: argparse.Namespace, workdir: Path, *, informer: Path) -> dict[str, Any]:
    print(f"control plane in {workdir}", flush=True)
    cp = start_control_plane(workdir / "control-plane")
    client = await new_api_client(cp.kubeconfig, pool_size=IN_FLIGHT)
    try:
        kube = Kube(client)
        started = time.monotonic()
        objects = await populate(kube, args)
        print(f"created {len(objects)} objects in {time.monotonic() - started:.0f} s", flush=True)
        runs = [
            await measure(kube, cp, objects, args, informer=informer, run=n, workdir=workdir) for n in range(args.runs)
        ]
    finally:
        await client.close()
        cp.stop()
    return report(args, runs, server_version=cp.version)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        informer = informer_binary()  # before the control plane: a build that fails stops the benchmark at once
    except RuntimeError as error:
        sys.exit(f"bench_live: {error}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fightwatch-bench-live-"))
    result = asyncio.run(benchmark(args, workdir, informer=informer))
    print_summary(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"written to {args.out}")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
