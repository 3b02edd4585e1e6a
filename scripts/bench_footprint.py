#!/usr/bin/env python3
"""What `fightwatch run` holds above the floor of its stack, by part, and how it grows per object and per finding.

On a real etcd + kube-apiserver (the pinned current release), for each of `--objects` (ConfigMaps of about 1 KB of
data, created up to that count in `--namespaces` namespaces), starts side by side: `fightwatch run` as bench_live
runs it (metadata only, --record on, JSON logs, plain HTTP) from `--python`; the same under tracemalloc (`--traced`,
for what Python holds by package; its resident memory counts tracemalloc's own tables); and the floor watchers of
scripts/bench_floor_watch.py on the same interpreter (the transport only, and with every required library). Once
all are ready and have idled `--idle` seconds, it samples each: resident memory (VmRSS), and by mapping
(harness/bench/footprint.py: the interpreter, fightwatch's compiled modules, the libraries' and the system's shared
objects, the main heap, thread arenas, other anonymous memory), threads; fightwatch's from inside too: the native
engine's allocation count, the objects the garbage collector tracks, tracemalloc by package.

At the `--findings-at` object count, it then writes to `--fights` ConfigMaps by two managers in turn (one write per
object every 2 s, nothing else) until fightwatch reports that many active findings, waits `--idle` seconds and
samples again: what a finding costs, against the floors, which received the same writes.

  .venv/bin/python scripts/bench_footprint.py --python "$(scripts/runtime-venv.sh)" --out bench-results/footprint.json
  .venv/bin/python scripts/bench_footprint.py --python "$(scripts/runtime-venv.sh)" --objects 2000 --no-traced
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from harness import REPO_ROOT
from harness.bench import cluster_load
from harness.bench.cluster_load import Watcher, control_plane, create_all, stop, wait_ready, workdir_of, write_results
from harness.bench.endpoints import metrics_of, total
from harness.bench.footprint import MAPPINGS, PROBE, probe, resident_by_mapping, status_of
from harness.bench.live.workload import WRITER_KEYS, Workload, configmap, generate
from harness.bench.polling import poll
from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, Kube

READY_DEADLINE = 600.0
FIGHTWATCH, TRACED, FLOOR, FLOOR_LIBRARIES = "fightwatch", "fightwatch-traced", "floor", "floor-libraries"
MARKER = "footprint-marker-"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="the interpreter fightwatch and the floors run with")
    parser.add_argument("--objects", default="0,2000,20000", help="ConfigMap counts to measure at, ascending")
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--fights", type=int, default=200, help="ConfigMaps fought over for the findings' cost")
    parser.add_argument("--findings-at", type=int, default=2000, help="the object count to add the findings at")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds between ready and a sample")
    parser.add_argument("--no-traced", dest="traced", action="store_false", help="leave out the traced fightwatch")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="for fightwatch's process")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "footprint.json")
    parser.add_argument("--workdir", type=Path, help="default: a temp dir, removed afterwards")
    return parser.parse_args(argv)


def start(args: argparse.Namespace, cp: ControlPlane, workdir: Path) -> dict[str, Watcher]:
    """Start fightwatch (and its traced twin) and the floors; by name."""
    config: dict[str, Any] = {"watch": {"resources": ["configmaps", "deployments.apps"]}}
    env = dict(os.environ) | dict(e.split("=", 1) for e in args.env)
    launchers = {FIGHTWATCH: ("-c", PROBE), **({TRACED: ("-X", "tracemalloc=1", "-c", PROBE)} if args.traced else {})}
    watchers = {
        name: cluster_load.start_fightwatch(
            Watcher,
            name,
            cp,
            workdir,
            python=args.python,
            config=config,
            env=env | {"FIGHTWATCH_PROBE_OUT": str(workdir / f"{name}.probe.json")},
            launcher=launcher,
            cwd=workdir,
        )
        for name, launcher in launchers.items()
    }
    floor = [args.python, str(REPO_ROOT / "scripts" / "bench_floor_watch.py")]
    for name, argv in ((FLOOR, floor), (FLOOR_LIBRARIES, [*floor, "--with-libraries"])):
        watchers[name] = cluster_load.start_other(Watcher, name, argv, cp, workdir, marker=MARKER)
    return watchers


async def sample(watchers: dict[str, Watcher], workdir: Path) -> dict[str, Any]:
    """Sample every watcher: VmRSS, RssAnon, RssFile (MiB), threads, by mapping; fightwatch's from inside too."""
    figures: dict[str, Any] = {}
    for name, watcher in watchers.items():
        pid = watcher.proc.pid
        status = status_of(pid)
        figures[name] = {
            "rss_mib": round(status["VmRSS"] / 1024, 2),
            "anon_mib": round(status["RssAnon"] / 1024, 2),
            "file_mib": round(status["RssFile"] / 1024, 2),
            "threads": status["Threads"],
            "by_mapping_mib": resident_by_mapping(pid),
        }
        if watcher.recording is not None:
            figures[name]["inside"] = await probe(pid, workdir / f"{name}.probe.json")
    return figures


async def fight(kube: Kube, args: argparse.Namespace, session: aiohttp.ClientSession, url: str) -> float:
    """Write to `--fights` ConfigMaps by two managers in turn until fightwatch holds that many findings; seconds."""
    objects = [("configmap", CONFIGMAPS.path(f"bench-{i % args.namespaces}", f"cm-{i}")) for i in range(args.fights)]
    # one write per fought object every 2 s, and no other write: the rate at which generate() writes only fights
    workload = Workload(
        configmaps=0,
        deployments=0,
        namespaces=args.namespaces,
        managers=1,
        fights=args.fights,
        rate=args.fights / 2.0,
        duration=6.0,
        seed=1,
    )
    started = time.monotonic()

    async def found() -> bool:
        await generate(kube, objects, workload, run=int(time.monotonic() - started))
        metrics = await metrics_of(session, url)
        return bool(total(metrics, "fightwatch_findings_active") >= args.fights)

    await poll(found, f"{args.fights} findings", READY_DEADLINE)
    return time.monotonic() - started


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    counts = [int(n) for n in args.objects.split(",")]
    namespaces = [f"bench-{n}" for n in range(args.namespaces)]
    steps: list[dict[str, Any]] = []
    async with control_plane(workdir) as (cp, kube), aiohttp.ClientSession() as session:
        created = 0
        for count in counts:
            bodies = [
                (CONFIGMAPS.path(ns), configmap(ns, f"cm-{i}", keys=WRITER_KEYS[:1]))
                for i in range(created, count)
                for ns in [namespaces[i % args.namespaces]]
            ]
            await create_all(kube, namespaces, bodies, manager="bench-setup")
            created = max(created, count)
            stepdir = workdir / f"objects-{count}"
            stepdir.mkdir(parents=True, exist_ok=True)
            watchers = start(args, cp, stepdir)
            try:
                await wait_ready(session, watchers.values(), READY_DEADLINE)
                await asyncio.sleep(args.idle)
                step: dict[str, Any] = {"objects": count, "idle": await sample(watchers, stepdir)}
                print(f"{count} objects: " + summary(step["idle"]), flush=True)
                if count == args.findings_at and args.fights:
                    step["fight_seconds"] = round(await fight(kube, args, session, watchers[FIGHTWATCH].url), 1)
                    await asyncio.sleep(args.idle)
                    step["findings"] = args.fights
                    step["with_findings"] = await sample(watchers, stepdir)
                    print(f"  with {args.fights} findings: " + summary(step["with_findings"]), flush=True)
                steps.append(step)
            finally:
                stop(watchers.values())
    return {"python": args.python, "env": args.env, "steps": steps, "growth": growth(steps)}


def summary(figures: dict[str, Any]) -> str:
    return ", ".join(f"{name} {f['rss_mib']:.1f} MiB" for name, f in figures.items())


def growth(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """fightwatch above floor-libraries at each step, and the bytes per object and per finding between samples."""
    above = {s["objects"]: s["idle"][FIGHTWATCH]["rss_mib"] - s["idle"][FLOOR_LIBRARIES]["rss_mib"] for s in steps}
    result: dict[str, Any] = {"above_floor_libraries_mib": {str(n): round(v, 2) for n, v in above.items()}}
    per_object = {}
    for low, high in itertools.pairwise(steps):
        n = high["objects"] - low["objects"]
        if n <= 0:
            continue
        key = f"{low['objects']}-{high['objects']}"
        rss = (above[high["objects"]] - above[low["objects"]]) * 2**20 / n
        native = _inside(high["idle"], "native_allocated") - _inside(low["idle"], "native_allocated")
        traced = _inside(high["idle"], "traced", TRACED) - _inside(low["idle"], "traced", TRACED)
        per_object[key] = {
            "rss_bytes": round(rss),
            "native_bytes": round(native / n),
            "traced_bytes": round(traced / n),
        }
    result["per_object"] = per_object
    for s in steps:
        if "with_findings" in s:
            before, after, n = s["idle"], s["with_findings"], s["findings"]
            rss = (after[FIGHTWATCH]["rss_mib"] - before[FIGHTWATCH]["rss_mib"]) - (
                after[FLOOR_LIBRARIES]["rss_mib"] - before[FLOOR_LIBRARIES]["rss_mib"]
            )
            result["per_finding"] = {
                "rss_bytes": round(rss * 2**20 / n),
                "native_bytes": round((_inside(after, "native_allocated") - _inside(before, "native_allocated")) / n),
                "traced_bytes": round((_inside(after, "traced", TRACED) - _inside(before, "traced", TRACED)) / n),
            }
    return result


def _inside(figures: dict[str, Any], key: str, name: str = FIGHTWATCH) -> float:
    return float(figures.get(name, {}).get("inside", {}).get(key, 0))


def print_table(result: dict[str, Any]) -> None:
    for step in result["steps"]:
        for phase in ("idle", "with_findings"):
            if phase not in step:
                continue
            figures = step[phase]
            print(f"\n{step['objects']} objects, {phase}: resident MiB by mapping")
            names = list(figures)
            print(f"{'':16s}" + "".join(f"{n:>20s}" for n in names))
            for kind in ("total", *MAPPINGS, "threads"):
                cells = []
                for n in names:
                    f = figures[n]
                    value = f["rss_mib"] if kind == "total" else f["threads"] if kind == "threads" else None
                    cells.append(f"{value if value is not None else f['by_mapping_mib'][kind]:>20}")
                print(f"{kind:16s}" + "".join(cells))
    print("\n" + str(result["growth"]))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with workdir_of(args.workdir, "fightwatch-bench-footprint-") as workdir:
        result = asyncio.run(measure(args, workdir))
    print_table(result)
    write_results(args.out, result)


if __name__ == "__main__":
    main()
