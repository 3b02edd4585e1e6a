#!/usr/bin/env python3
"""Measure `fightwatch run` and the client-go metadata informer over many objects, each alone, in turns.

On a real etcd + kube-apiserver of the pinned current release (WatchList on, as released), creates `--objects`
ConfigMaps (~1 KB of data and two labels each, in `--namespaces` namespaces; `IN_FLIGHT` concurrent creates), then
measures one watcher at a time (harness/bench/scale.py), so that the API server's own figures belong to one:

  fightwatch   `fightwatch run` from `--python` (the runtime venv's, for memory: scripts/runtime-venv.sh): ConfigMaps
               only, metadata only, WatchList, delivery off, the native engine
  informer     client-go's metadata-only shared informer of ConfigMaps (scripts/informer, built with go on first use),
               WatchList as client-go ships it, counting events only
  none         the API server with no watcher (once, before the turns; `--no-baseline` leaves it out)

Each turn: time to ready and the peak memory to then; memory after `IDLE_SECONDS` idle; merge patches at `--rate`
writes/s for `--duration` s, the CPU seconds per event received (from /proc) and the memory after; the relist after
410 Gone (watcher stopped, a write, etcd compacted, API server restarted), its peak and seconds to ready again; and
the API server's CPU seconds, peak and memory over each of those phases. `--runs N` repeats the turns (fightwatch,
informer; informer, fightwatch; ...). Prints a Markdown table of the medians (fightwatch, informer, ratio, no
watcher) and whether one fightwatch process stays within the chart's default limits (1 CPU, 1 GiB).

  .venv/bin/python scripts/bench_scale.py --python "$(scripts/runtime-venv.sh)" --out bench-results/scale-100k.json
  .venv/bin/python scripts/bench_scale.py --python "$(scripts/runtime-venv.sh)" --objects 5000 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.bench.cluster_load import IN_FLIGHT, control_plane, create_all, workdir_of, write_results
from harness.bench.machine import machine
from harness.bench.scale import (
    IDLE_SECONDS,
    FightwatchSubject,
    InformerSubject,
    Scale,
    Subject,
    configmaps,
    memory_mib,
    namespace_of,
    turn,
)
from harness.bench.scale_report import FIGHTWATCH, limits, markdown, medians, turn_order, verdict
from harness.control_plane import ControlPlane
from harness.go_build import informer_binary_or_exit


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second in the load")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--runs", type=int, default=1, help="turns of each watcher, in alternating order")
    parser.add_argument("--python", default=sys.executable, help="the interpreter fightwatch runs with")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="for fightwatch's process")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false", help="no turn without a watcher")
    parser.add_argument("--workdir", type=Path, help="default: a temp dir, removed after a run that ends well")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    return parser.parse_args(argv)


async def benchmark(args: argparse.Namespace, informer: Path, workdir: Path) -> dict[str, Any]:
    """Create the objects, then measure each turn; return the results."""
    scale = Scale(args.objects, args.namespaces, args.rate, args.duration)
    env = dict(item.split("=", 1) for item in args.env)
    async with control_plane(workdir) as (cp, kube):
        began = time.monotonic()
        namespaces = [namespace_of(n, args.namespaces) for n in range(args.namespaces)]
        await create_all(kube, namespaces, configmaps(args.objects, args.namespaces), manager="bench-setup")
        populated_s = time.monotonic() - began
        print(f"{args.objects} ConfigMaps in {populated_s:.0f} s", file=sys.stderr)
        setup = {
            "populate_s": round(populated_s, 1),
            "apiserver_after_populate_mib": _memory(cp, "kube-apiserver"),
            "etcd_after_populate_mib": _memory(cp, "etcd"),
        }
        turns = [{"run": 0, **await turn(cp, kube, None, scale)}] if args.baseline else []
        for run, name in turn_order(args.runs):
            subject: Subject = (
                FightwatchSubject(workdir / f"{name}-{run}", cp, python=args.python, env=env)
                if name == FIGHTWATCH
                else InformerSubject(workdir / f"{name}-{run}", cp, kube, binary=informer)
            )
            turns.append({"run": run, **await turn(cp, kube, subject, scale)})
            print(json.dumps(turns[-1]), file=sys.stderr)
        setup["etcd_at_end_mib"] = _memory(cp, "etcd")
        return {"setup": setup, "server": cp.version, "turns": turns}


def _memory(cp: ControlPlane, component: str) -> dict[str, float]:
    return {key: round(value, 1) for key, value in memory_mib(cp.pid(component)).items()}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    informer = informer_binary_or_exit("bench_scale")
    began = time.monotonic()
    with workdir_of(args.workdir, "fightwatch-bench-scale-") as workdir:
        results = asyncio.run(benchmark(args, informer, workdir))
    median = medians(results["turns"])
    limit = limits(median.get(FIGHTWATCH, {}))
    wall_s = round(time.monotonic() - began)
    print(markdown(median, runs=args.runs))
    print()
    print(verdict(limit))
    print(f"wall time {wall_s} s; {results['setup']}")
    if args.out:
        document = {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": "scripts/bench_scale.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": machine(),
            "objects": args.objects,
            "namespaces": args.namespaces,
            "rate": args.rate,
            "duration_s": args.duration,
            "idle_s": IDLE_SECONDS,
            "in_flight_creates": IN_FLIGHT,
            "wall_s": wall_s,
            **results,
            "median": median,
            "limits": limit,
        }
        write_results(args.out, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
