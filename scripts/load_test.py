#!/usr/bin/env python3
"""Load test of fightwatch's scale and high availability against a real etcd + kube-apiserver (loopback): the pinned
current release, or `$FIGHTWATCH_KUBERNETES`.

Two runs, each on a fresh control plane with the same objects and the same load:

  one shard, two replicas   leader election on a Lease; the leader is killed (SIGKILL) halfway through the load:
                            the standby must take over (measured: kill -> its `leading` line) and deliver, with no
                            finding lost (each injected fight and hot loop has its Event, also those that began
                            while nobody led) and none duplicated (exactly one Warning Event per finding)
  two shards                `--shard 0|1 --total-shards 2`, one process each (each with its own Lease): events per
                            shard, and the findings of both together

The cluster holds `--objects` objects (20,000) of five kinds: ConfigMaps, Secrets, Deployments, headless Services
and ServiceAccounts, in 20 namespaces. A writer then sustains `--rate` writes/s (300) for `--duration` s (300):
benign churn (merge patches by per-field managers: each writer owns its own field, so nothing changes hands) and
`--fights` injected fights (two operators taking a label from each other, one write every 4 s) and `--hot-loops`
hot loops (one reconciler stamping a time annotation once a second), starting at staggered times so that some
begin while the killed leader's Lease runs out.

Reported per fightwatch process, over the load phase: events received, CPU seconds per 1,000 events, event lag
(the writer reading the API server's answer -> the event recorded by fightwatch, p50/p99/max; an event may arrive
before the writer reads its answer), resident memory sampled every 5 s (start, end, max, slope), and the findings
against what was injected. Everything runs on this machine's cores: API server, etcd, the writer and the watchers.

  .venv/bin/python scripts/load_test.py                         # ~16 minutes; writes bench-results/load.json
  .venv/bin/python scripts/load_test.py --duration 60 --objects 5000 --out /tmp/load.json   # a quick look

A memory soak: `--runs ha --replicas 1` runs one watcher (no leader to kill) for `--duration` s; `--window S` sets
the fight window and the idle time (detection.fight.window, detection.idle_after) of the watchers, so that the
window turns over within a shorter run; `--samples FILE` appends each resource sample as a JSON line as it is
taken (a run stopped early keeps its series). The RSS slope is also given over the last 5 and 10 minutes.

`--informer` runs a client-go metadata-only informer of the same kinds beside the watchers (scripts/informer,
counting events), sampled alike, and gives each watcher's resident memory and CPU per event over it;
`--fightwatch-python` runs another installation's fightwatch (scripts/runtime-venv.sh: the image's dependencies):

  .venv/bin/python scripts/load_test.py --runs ha --replicas 1 --duration 1800 --informer \
      --fightwatch-python "$(scripts/runtime-venv.sh)" --out bench-results/load-vs-informer.json
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import random
import shutil
import signal
import statistics
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
    log_lines,
    memory_kib,
    metrics_of,
    poll,
    recorded_writes,
    total,
)

from harness.control_plane import (  # noqa: E402
    ControlPlane,
    binary_version,
    control_plane_bin_dir,
    start_control_plane,
)
from harness.go_build import informer_binary  # noqa: E402
from harness.kube import Kube, Resource, new_api_client  # noqa: E402
from watcher.config import Config, ShardingSettings  # noqa: E402
from watcher.model import parse_time  # noqa: E402
from watcher.sources.discovery import ApiResource, shard_of  # noqa: E402

NAMESPACES = 20
IN_FLIGHT = 48  # concurrent requests of the writer
SAMPLE_EVERY = 5.0  # seconds between resource samples of each watcher
READY_DEADLINE = 600.0
DRAIN_DEADLINE = 300.0
FIGHT_PERIOD = 4.0  # seconds between two writes of a fight (the two operators alternate)
HOT_PERIOD = 1.0  # seconds between two writes of a hot loop (60/min, twice the threshold)
MARKER = "load-marker-"
INFORMER = "informer"  # the client-go informer's watcher name
EVENTS = "/apis/events.k8s.io/v1/events"


@dataclass(frozen=True)
class Kind:
    resource: Resource
    share: float  # of the objects
    body: Callable[[int], dict[str, Any]]  # the object's content beyond metadata
    churn: Callable[[int, random.Random], tuple[dict[str, Any], str]]  # a benign patch and its manager

    @property
    def name(self) -> str:
        group = self.resource.api_version.rpartition("/")[0]
        return f"{self.resource.plural}.{group}" if group else self.resource.plural


def _configmap_churn(k: int, rng: random.Random) -> tuple[dict[str, Any], str]:
    key = rng.choice("ab")
    return {"data": {key: str(k)}}, f"writer-{key}"


def _annotate(key: str, manager: str) -> Callable[[int, random.Random], tuple[dict[str, Any], str]]:
    def churn(k: int, _rng: random.Random) -> tuple[dict[str, Any], str]:
        return {"metadata": {"annotations": {key: str(k)}}}, manager

    return churn


def _deployment(i: int) -> dict[str, Any]:
    labels = {"app": f"app-{i}"}
    container = {"name": "app", "image": "registry.example.com/app:1.0.0", "env": [{"name": "A", "value": "1"}]}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    return {"spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}}


def _same(body: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    return lambda _i: body


KINDS = (
    Kind(
        Resource("/api/v1", "configmaps", "ConfigMap"),
        0.40,
        _same({"data": {"config": "x" * 200, "a": "0", "b": "0"}}),
        _configmap_churn,
    ),
    Kind(
        Resource("/api/v1", "secrets", "Secret"),
        0.25,
        _same({"data": {"token": "c2VjcmV0"}}),
        _annotate("example.com/rotated", "rotator"),
    ),
    Kind(
        Resource("/apis/apps/v1", "deployments", "Deployment"),
        0.15,
        _deployment,
        _annotate("example.com/revision", "deployer"),
    ),
    Kind(
        Resource("/api/v1", "services", "Service"),
        0.10,
        _same({"spec": {"clusterIP": "None", "ports": [{"port": 80}]}}),  # headless: no cluster IP to allocate
        _annotate("example.com/checked", "prober"),
    ),
    Kind(
        Resource("/api/v1", "serviceaccounts", "ServiceAccount"),
        0.10,
        _same({"automountServiceAccountToken": False}),
        _annotate("example.com/audited", "auditor"),
    ),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--fights", type=int, default=24)
    parser.add_argument("--hot-loops", type=int, default=8)
    parser.add_argument("--kill-at", type=float, help="seconds into the load (default: half of --duration)")
    parser.add_argument("--runs", default="ha,shards", help="ha, shards or both (comma-separated)")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "load.json")
    parser.add_argument("--workdir", type=Path, help="default: a temp dir, removed afterwards")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument(
        "--replicas", type=int, choices=(1, 2), default=2, help="watchers in the ha run (1: no leader to kill)"
    )
    parser.add_argument(
        "--window",
        type=float,
        help="seconds: the watchers' detection.fight.window and detection.idle_after (default: theirs, 1 h)",
    )
    parser.add_argument("--samples", type=Path, help="append each resource sample here as a JSON line")
    parser.add_argument(
        "--informer",
        action="store_true",
        help="also run a client-go metadata-only informer of the same kinds (scripts/informer, counting events) and "
        "give each watcher's resident memory over it",
    )
    parser.add_argument(
        "--fightwatch-python",
        default=sys.executable,
        help="the interpreter of the fightwatch to run (e.g. scripts/runtime-venv.sh's, as the image installs it)",
    )
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------ processes


@dataclass
class Watcher:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    recording: Path | None  # None: the client-go informer (no endpoints; it logs `ready` and `seen NAME`)
    url: str = ""
    # (t, cpu s, rss MiB, events, tracked objects)
    samples: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    killed_at: float | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_lines(self, event: str | None = None) -> list[dict[str, Any]]:
        return log_lines(self.log, event)


def start_watcher(
    name: str, cp: ControlPlane, workdir: Path, config: dict[str, Any], args: Sequence[str], *, python: str
) -> Watcher:
    # plain HTTP: the load test polls its own endpoints, and TLS and access reviews are not what it measures
    serve = {"address": "127.0.0.1", "port": 0, "insecure_http": True}
    settings: dict[str, Any] = {"serve": serve, "log": {"format": "json"}, **config}
    config_path = workdir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(settings))
    log, recording = workdir / f"{name}.log", workdir / f"{name}.jsonl"
    argv = [python, "-m", "watcher", "run", "--kubeconfig", str(cp.kubeconfig), "--config", str(config_path)]
    argv += ["--record", str(recording), *args]
    env = {**os.environ, "POD_NAME": name}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, cwd=REPO, env=env)
    return Watcher(name, proc, log, recording)


def start_informer(cp: ControlPlane, workdir: Path) -> Watcher:
    """The client-go informer of every kind the load writes, counting events (no per-event record: a long run)."""
    resources = ",".join(f"{k.resource.api_version}/{k.resource.plural}" for k in KINDS)  # v1/configmaps, ...
    log = workdir / "informer.log"
    argv = [str(informer_binary()), "--kubeconfig", str(cp.kubeconfig), "--out", str(workdir / "informer.json")]
    argv += ["--marker", MARKER, "--resources", resources, "--count-only"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    return Watcher(INFORMER, proc, log, None)


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        return await response.json()


async def ready(session: aiohttp.ClientSession, watcher: Watcher) -> bool:
    if not watcher.alive():
        raise RuntimeError(f"{watcher.name} exited: {watcher.log.read_text()[-3000:]}")
    if watcher.recording is None:
        return b"ready" in watcher.log.read_bytes()
    watcher.url = watcher.url or listening(watcher.log)
    return bool(watcher.url) and await is_ready(session, watcher.url)


async def sample_forever(session: aiohttp.ClientSession, watchers: list[Watcher], out: Path | None) -> None:
    while True:
        for watcher in watchers:
            if watcher.alive():
                try:
                    metrics = await metrics_of(session, watcher.url) if watcher.recording is not None else {}
                    sample = (
                        time.time(),
                        cpu_seconds(watcher.proc.pid),
                        memory_kib(watcher.proc.pid)["VmRSS"] / 1024,
                        total(metrics, "fightwatch_events_total") if metrics else 0.0,
                        metrics.get("fightwatch_tracked_objects", 0.0),
                    )
                except (aiohttp.ClientError, OSError):
                    continue  # a watcher killed meanwhile
                watcher.samples.append(sample)
                if out is not None:
                    keys = ("t", "cpu_s", "rss_mib", "events", "tracked_objects")
                    with out.open("ab") as lines:
                        lines.write(orjson.dumps({"watcher": watcher.name, **dict(zip(keys, sample, strict=True))}))
                        lines.write(b"\n")
        await asyncio.sleep(SAMPLE_EVERY)


# ----------------------------------------------------------------------------------------------------- load


@dataclass
class Cluster:
    objects: list[tuple[Kind, str, str]]  # (kind, namespace, name)
    fights: list[tuple[Kind, str, str, float]]  # ... and when the fight starts (seconds into the load)
    hot: list[tuple[Kind, str, str, float]]


def plan(args: argparse.Namespace) -> Cluster:
    rng = random.Random(args.seed)  # noqa: S311 - a reproducible load, not cryptography
    objects = [
        (kind, f"load-{i % NAMESPACES}", f"{kind.resource.plural[:-1]}-{i}")
        for kind in KINDS
        for i in range(round(args.objects * kind.share))
    ]
    candidates = rng.sample(objects, args.fights + args.hot_loops)
    # Starts spread over the first two thirds of the load, so that some fall into the failover.
    span = args.duration * 2 / 3
    fights = [(*o, span * n / max(1, args.fights)) for n, o in enumerate(candidates[: args.fights])]
    hot = [(*o, span * (n + 0.5) / max(1, args.hot_loops)) for n, o in enumerate(candidates[args.fights :])]
    return Cluster(objects, fights, hot)


async def populate(kube: Kube, cluster: Cluster) -> None:
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def create(kind: Kind, namespace: str, name: str, i: int) -> None:
        r = kind.resource
        body = {"apiVersion": r.api_version, "kind": r.kind, "metadata": {"name": name, "namespace": namespace}}
        async with limit:
            await kube.create(r.path(namespace), body | kind.body(i), manager="load-setup")

    for n in range(NAMESPACES):
        await kube.ensure_namespace(f"load-{n}")
    await asyncio.gather(*(create(k, ns, name, i) for i, (k, ns, name) in enumerate(cluster.objects)))


@dataclass
class Load:
    accepted: dict[str, float] = field(default_factory=dict)  # resourceVersion -> when the writer had the answer
    writes: int = 0
    injected_writes: int = 0
    errors: int = 0
    started: float = 0.0
    seconds: float = 0.0


async def generate(kube: Kube, cluster: Cluster, args: argparse.Namespace, on_tick: Callable[[float], None]) -> Load:
    """Writes on a fixed schedule: the injected fights and hot loops when due, benign churn for the rest."""
    rng = random.Random(args.seed + 1)  # noqa: S311
    load = Load(started=time.time())
    limit = asyncio.Semaphore(IN_FLIGHT)
    loop = asyncio.get_running_loop()
    start = loop.time()
    total = int(args.rate * args.duration)
    due: list[tuple[float, str, Kind, str, str, int]] = []  # (time, what, kind, namespace, name, turn)
    for kind, ns, name, begin in cluster.fights:
        due += [
            (begin + n * FIGHT_PERIOD, "fight", kind, ns, name, n)
            for n in range(int((args.duration - begin) / FIGHT_PERIOD))
        ]
    for kind, ns, name, begin in cluster.hot:
        due += [
            (begin + n * HOT_PERIOD, "hot", kind, ns, name, n) for n in range(int((args.duration - begin) / HOT_PERIOD))
        ]
    due.sort(key=lambda d: d[0])
    injected = iter(due)
    upcoming = next(injected, None)
    tasks = set()

    async def write(path: str, patch: dict[str, Any], manager: str, *, mark: bool) -> None:
        try:
            answer = await kube.merge_patch(path, patch, manager=manager)
        except Exception:  # counted; the load goes on
            load.errors += 1
        else:
            load.accepted[answer["metadata"]["resourceVersion"]] = time.time()
            load.writes += 1
            load.injected_writes += mark
        finally:
            limit.release()

    for k in range(total):
        at = k / args.rate
        await asyncio.sleep(max(0.0, start + at - loop.time()))
        on_tick(at)
        await limit.acquire()
        if upcoming is not None and upcoming[0] <= at:
            _, what, kind, ns, name, turn = upcoming
            upcoming = next(injected, None)
            if what == "fight":
                side = "ab"[turn % 2]
                patch, manager = {"metadata": {"labels": {"owner": f"team-{side}"}}}, f"fight-{side}-operator"
            else:
                stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                patch, manager = (
                    {"metadata": {"annotations": {"example.com/reconciled-at": stamp}}},
                    "stamping-reconciler",
                )
            task = asyncio.create_task(write(kind.resource.path(ns, name), patch, manager, mark=True))
        else:
            kind, ns, name = cluster.objects[rng.randrange(len(cluster.objects))]
            patch, manager = kind.churn(k, rng)
            task = asyncio.create_task(write(kind.resource.path(ns, name), patch, manager, mark=False))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    load.seconds = loop.time() - start
    return load


# ----------------------------------------------------------------------------------------------- analysis


def figures(watcher: Watcher, load: Load) -> dict[str, Any]:
    """CPU per event and memory over the load phase (until the watcher was killed, if it was)."""
    end = load.started + load.seconds
    during = [s for s in watcher.samples if load.started - SAMPLE_EVERY <= s[0] <= end + SAMPLE_EVERY]
    first, last = during[0], during[-1]
    events = last[3] - first[3] if watcher.recording is not None else load.writes  # (each write is one event)
    cpu = last[1] - first[1]
    rss = [s[2] for s in during]
    minutes = [(s[0] - first[0]) / 60 for s in during]

    def slope(last_minutes: float = math.inf) -> float | None:
        since = minutes[-1] - last_minutes
        points = [(m, r) for m, r in zip(minutes, rss, strict=True) if m >= since]
        if len(points) <= 2 or (math.isfinite(last_minutes) and minutes[-1] < last_minutes):
            return None
        return round(statistics.linear_regression(*zip(*points, strict=True)).slope, 3)

    return {
        "seconds": round(last[0] - first[0], 1),
        "events": int(events),
        "events_per_second": round(events / max(1e-9, last[0] - first[0]), 1),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_1000_events": round(1000 * cpu / events, 3) if events else None,
        "lag": lags(load.accepted, recorded_writes(watcher.recording)) if watcher.recording is not None else {},
        "rss_mib": {
            "start": round(rss[0], 1),
            "end": round(rss[-1], 1),
            "max": round(max(rss), 1),
            "slope_mib_per_minute": slope() or 0.0,  # (over the whole load)
            "slope_last_5_min": slope(5),
            "slope_last_10_min": slope(10),
            "every_5s": [round(r, 1) for r in rss],
            "minutes": [round(m, 2) for m in minutes],  # each sample's time since the first
        },
        "tracked_objects": {"end": int(last[4]), "every_5s": [int(s[4]) for s in during]},
    }


def vs_informer(figures_by_watcher: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Each fightwatch process's resident memory over the informer's: at the end of the load, at its largest, and
    averaged over the last 10 minutes (when the load lasted that long), and its CPU per event over the informer's."""
    informer = figures_by_watcher[INFORMER]

    def last_10_min(rss: dict[str, Any]) -> float | None:
        kept = [r for r, m in zip(rss["every_5s"], rss["minutes"], strict=True) if m >= rss["minutes"][-1] - 10]
        return statistics.fmean(kept) if rss["minutes"][-1] >= 10 else None

    ratios = {}
    for name, figures_of in figures_by_watcher.items():
        if name == INFORMER:
            continue
        mine, theirs = figures_of["rss_mib"], informer["rss_mib"]
        mean, their_mean = last_10_min(mine), last_10_min(theirs)
        cpu, their_cpu = figures_of["cpu_seconds_per_1000_events"], informer["cpu_seconds_per_1000_events"]
        ratios[name] = {
            "rss_end": round(mine["end"] / theirs["end"], 2),
            "rss_max": round(mine["max"] / theirs["max"], 2),
            "rss_last_10_min": round(mean / their_mean, 2) if mean and their_mean else None,
            "cpu_per_event": round(cpu / their_cpu, 2) if cpu and their_cpu else None,
        }
    return ratios


def expected_findings(cluster: Cluster) -> set[tuple[str, str, str, str]]:
    return {("fight", k.resource.kind, ns, name) for k, ns, name, _ in cluster.fights} | {
        ("hot_loop", k.resource.kind, ns, name) for k, ns, name, _ in cluster.hot
    }


def compare(found: list[dict[str, Any]], cluster: Cluster) -> dict[str, Any]:
    got = Counter((f["type"], f["object"]["kind"], f["object"]["namespace"], f["object"]["name"]) for f in found)
    expected = expected_findings(cluster)
    return {
        "injected": {"fights": len(cluster.fights), "hot_loops": len(cluster.hot)},
        "found_of_injected": f"{len(expected & set(got))}/{len(expected)}",
        "missed": sorted("/".join(m) for m in expected - set(got)),
        "other_findings": sorted("/".join(o) for o in set(got) - expected),
        "reported_twice": sorted("/".join(k) for k, n in got.items() if n > 1),
    }


async def events_told(kube: Kube) -> list[dict[str, Any]]:
    listing = await kube.get(EVENTS)
    return [e for e in listing["items"] if e.get("reportingController") == "fightwatch" and e["type"] == "Warning"]


# ---------------------------------------------------------------------------------------------------- runs


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
            await poll(lambda w=watcher: drained(w), f"{watcher.name} to receive every write", DRAIN_DEADLINE)


def start_watchers(name: str, cp: ControlPlane, workdir: Path, args: argparse.Namespace) -> list[Watcher]:
    """`ha`: `--replicas` replicas of one shard; `shards`: shards 0 and 1. Leader election on in both (one Lease
    per shard)."""
    base: dict[str, Any] = {
        "watch": {"resources": [k.name for k in KINDS]},
        "leader_election": {"enabled": True, "lease_namespace": "default"},
    }
    if args.window is not None:
        base["detection"] = {"fight": {"window": args.window}, "idle_after": args.window}
    python = args.fightwatch_python
    if name == "ha":
        watchers = [start_watcher(f"fw-{i}", cp, workdir, base, (), python=python) for i in range(args.replicas)]
    else:
        watchers = [
            start_watcher(f"fw-shard-{i}", cp, workdir, base, ("--shard", str(i), "--total-shards", "2"), python=python)
            for i in range(2)
        ]
    if args.informer:
        watchers.append(start_informer(cp, workdir))
    return watchers


async def run(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    print(f"[{name}] control plane in {workdir}", flush=True)
    cp = start_control_plane(workdir / "control-plane")
    client = await new_api_client(cp.kubeconfig, pool_size=IN_FLIGHT)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    watchers: list[Watcher] = []
    try:
        kube = Kube(client)
        cluster = plan(args)
        started = time.monotonic()
        await populate(kube, cluster)
        print(f"[{name}] created {len(cluster.objects)} objects in {time.monotonic() - started:.0f} s", flush=True)
        watchers = start_watchers(name, cp, workdir, args)
        started = time.monotonic()
        for watcher in watchers:
            await poll(lambda w=watcher: ready(session, w), f"{watcher.name} ready", READY_DEADLINE)
        print(f"[{name}] watchers ready in {time.monotonic() - started:.0f} s; load", flush=True)
        return await measure(name, args, kube=kube, session=session, cluster=cluster, watchers=watchers)
    finally:
        await session.close()
        await client.close()
        for watcher in watchers:
            if watcher.alive():
                watcher.proc.send_signal(signal.SIGTERM)
        for watcher in watchers:
            watcher.proc.wait(60)
        cp.stop()


async def measure(
    name: str,
    args: argparse.Namespace,
    *,
    kube: Kube,
    session: aiohttp.ClientSession,
    cluster: Cluster,
    watchers: list[Watcher],
) -> dict[str, Any]:
    """The load (killing the leader halfway in the `ha` run), then what each watcher did and found."""
    leader: Watcher | None = None
    if name == "ha" and len([w for w in watchers if w.recording is not None]) > 1:
        for watcher in watchers:
            if (
                watcher.recording is not None
                and (await metrics_of(session, watcher.url)).get("fightwatch_leader") == 1.0
            ):
                leader = watcher
    kill_at = args.kill_at if args.kill_at is not None else args.duration / 2

    def on_tick(at: float) -> None:
        if leader is not None and leader.killed_at is None and at >= kill_at:
            leader.proc.send_signal(signal.SIGKILL)
            leader.killed_at = time.time()
            print(f"[{name}] killed the leader {leader.name} at {at:.0f} s", flush=True)

    sampler = asyncio.create_task(sample_forever(session, watchers, args.samples))
    try:
        load = await generate(kube, cluster, args, on_tick)
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
        "load": {
            "target_writes_per_second": args.rate,
            "writes": load.writes,
            "injected_writes": load.injected_writes,
            "errors": load.errors,
            "seconds": round(load.seconds, 1),
            "writes_per_second": round(load.writes / load.seconds, 1),
        },
        "watchers": {w.name: figures(w, load) for w in watchers},
        "findings": compare(findings, cluster),
    }
    if args.informer:
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


async def failover(kube: Kube, cluster: Cluster, load: Load, leader: Watcher, standby: Watcher) -> dict[str, Any]:
    """The standby's takeover, and the Events: one per injected finding, none else, none twice."""
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


def machine() -> dict[str, Any]:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "pinned_to_cpus": sorted(os.sched_getaffinity(0)),  # (inherited by the control plane and the watchers)
        "memory": memory.split(":", 1)[1].strip(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "kube_apiserver": f"{binary_version(control_plane_bin_dir() / 'kube-apiserver')}, loopback, on the same cores",
    }


def table(results: dict[str, Any]) -> str:
    rows = [
        (
            "run",
            "process",
            "events/s",
            "CPU s / 1k ev",
            "lag p50 ms",
            "lag p99 ms",
            "RSS start/end/max MiB",
            "RSS slope MiB/min",
        )
    ]
    for run_name, result in results["runs"].items():
        for name, w in result["watchers"].items():
            rss = w["rss_mib"]
            rows.append(
                (
                    run_name,
                    name,
                    f"{w['events_per_second']:.0f}",
                    f"{w['cpu_seconds_per_1000_events']}",
                    f"{w['lag'].get('p50_ms')}",
                    f"{w['lag'].get('p99_ms')}",
                    f"{rss['start']:.0f}/{rss['end']:.0f}/{rss['max']:.0f}",
                    f"{rss['slope_mib_per_minute']:+.2f}",
                )
            )
    return aligned(rows)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fightwatch-load-"))
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "objects": {k.name: round(args.objects * k.share) for k in KINDS},
        "injected": {"fights": args.fights, "hot_loops": args.hot_loops},
        "partition": {
            k.name: shard_of(
                ApiResource(*_group_version(k.resource), k.resource.plural, k.resource.kind, True),
                ShardingSettings(total_shards=2),
            )
            for k in KINDS
        },
        "settings": {
            "duration_s": args.duration,
            "rate": args.rate,
            "replicas": args.replicas,
            "fight_window_and_idle_after_s": args.window if args.window is not None else "default (1 h)",
        },
        "runs": {},
    }
    for run_name in args.runs.split(","):
        (workdir / run_name).mkdir(parents=True, exist_ok=True)
        results["runs"][run_name] = asyncio.run(run(run_name, args, workdir / run_name))
        print(orjson.dumps(results["runs"][run_name], option=orjson.OPT_INDENT_2).decode()[:4000], flush=True)
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"written to {args.out}")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


def _group_version(resource: Resource) -> tuple[str, str]:
    group, _, version = resource.api_version.rpartition("/")
    return group, version


if __name__ == "__main__":
    main()
