#!/usr/bin/env python3
"""Benchmark the replay pipeline on a large, realistic, seeded watch stream.

One run
1. generates (scripts/synthetic_cluster.py) or reuses (`--stream PATH`) a JSON Lines capture of >= 200,000 watch
   events over >= 20,000 objects shaped like a current Kubernetes cluster (ConfigMaps, Deployments with a pod
   template, ReplicaSets, realistic managedFields), with benign churn and a known set of injected fights and hot
   loops. Object shapes come from the recorded real captures in tests/fixtures/captures/*.jsonl when they exist,
   else from hand-built templates;
2. measures, pinned to one core, best of `--runs`: the full replay pipeline (reading the capture and the engine
   processing each event, scripts/engine_under_test.py), JSON decoding alone (the floor) and kubernetes-asyncio
   model deserialization (what a naive watcher pays);
3. measures engine memory per tracked object with tracemalloc (scripts/bench_memory.py);
4. checks that the engine finds the injected fights and hot loops (recall) and nothing else (false positives;
   scripts/bench_recall.py);
writes the results to `--json` and prints them as a Markdown table (scripts/bench_report.py). `--profile` adds a
cProfile of the replay. `--memory-only` and `--memory-timeline N` measure memory instead (scripts/bench_memory.py).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_memory
import orjson
import synthetic_cluster
from bench_recall import NOT_CHECKED, check
from bench_report import markdown
from synthetic_cluster import stream_summary

from harness.bench.engine import (
    READ_BUFFER,
    Engine,
    add_engine_argument,
    findings,
    make_engine,
    replay_events,
    tracked_objects,
)
from harness.bench.machine import machine
from watcher.config import Config, DetectionSettings
from watcher.offline import tune_gc

REPO = Path(__file__).resolve().parent.parent
MODELS = {"ConfigMap": "V1ConfigMap", "Deployment": "V1Deployment", "ReplicaSet": "V1ReplicaSet"}


@dataclass(slots=True)
class Timing:
    best: float
    runs: list[float]
    events: int

    @property
    def rate(self) -> float:
        return self.events / self.best


def replay(path: Path, settings: DetectionSettings, engine_name: str) -> tuple[float, Engine, int]:
    """One full replay, timed (the engine made before the clock starts): seconds, the engine, events read."""
    engine = make_engine(settings, engine_name)
    start = time.perf_counter()
    events = replay_events(path, engine)
    return time.perf_counter() - start, engine, events


def decode_only(path: Path) -> tuple[float, int]:
    loads = orjson.loads
    count = 0
    start = time.perf_counter()
    with path.open("rb", buffering=READ_BUFFER) as stream:  # (read as the replay reads it)
        for line in stream:
            loads(line)
            count += 1
    return time.perf_counter() - start, count


def k8s_models(path: Path, total: int, sample: int) -> tuple[float, int, int]:
    """Decode + deserialize each sampled event's object into kubernetes-asyncio models (V1Deployment, ...)."""
    stride = max(1, total // sample)
    lines = []
    with path.open("rb") as stream:
        for number, line in enumerate(stream):
            if number % stride == 0:
                lines.append(line)

    async def run() -> float:
        from kubernetes_asyncio.client import ApiClient  # noqa: PLC0415 - optional, slow to import

        async with ApiClient() as client:
            deserialize = client._ApiClient__deserialize  # the body of ApiClient.deserialize, minus json.loads
            start = time.perf_counter()
            for line in lines:
                event = orjson.loads(line)
                obj = event["object"]
                deserialize(obj, MODELS.get(obj["kind"], "object"))
            return time.perf_counter() - start

    return asyncio.run(run()), len(lines), stride


def best_of(runs: int, fn: Callable[[], tuple[float, int]]) -> Timing:
    times, count = [], 0
    for _ in range(runs):
        gc.collect()
        seconds, count = fn()
        times.append(seconds)
    return Timing(min(times), times, count)


def profile(path: Path, settings: DetectionSettings, engine_name: str, top: int = 15) -> list[dict[str, Any]]:
    profiler = cProfile.Profile()
    profiler.enable()
    replay(path, settings, engine_name)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():
        short = filename.replace(str(REPO) + "/", "").replace(sys.prefix, "<venv>")
        rows.append({"function": f"{short}:{line}({func})", "calls": calls, "tottime": tottime, "cumtime": cumtime})
    rows.sort(key=lambda r: -r["tottime"])
    return rows[:top]


# ------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    synthetic_cluster.add_arguments(parser)  # --events, --objects, --seed, --templates, --metadata-only
    parser.add_argument("--runs", type=int, default=3, help="timed runs per measurement; the best counts")
    parser.add_argument("--json", type=Path, default=Path("bench-results/replay.json"), help="write results here")
    parser.add_argument(
        "--stream",
        type=Path,
        help="reuse this stream (with its .truth.json sidecar) if it exists, else generate it there and keep it",
    )
    parser.add_argument("--k8s-sample", type=int, default=20_000, help="events deserialized into k8s models")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of one full replay (top 15)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to CPU 0")
    add_engine_argument(parser)
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="only measure memory per object (as shipped, and with every object kept) and the watch index "
        "(scripts/bench_memory.py)",
    )
    bench_memory.add_timeline_arguments(parser, "--memory-timeline")
    return parser.parse_args(argv)


def measure(
    args: argparse.Namespace, path: Path, truth: synthetic_cluster.Truth | None, gen_seconds: float | None
) -> dict[str, Any]:
    """Every measurement of the replay benchmark on the stream at `path` (generated in `gen_seconds`, or None), and
    the check against its truth: the results."""
    settings = Config().detection
    tune_gc()  # what `fightwatch replay` does; it applies to every measurement below alike
    # Memory first, as in a fresh process: the engine's shared caches (paths, tries, shapes) count too.
    memory = bench_memory.memory_per_object(path, settings, args.engine)
    floor = best_of(args.runs, lambda: decode_only(path))
    print(f"decode floor: {floor.rate:,.0f} ev/s", file=sys.stderr)
    engines: list[Engine] = []

    def full() -> tuple[float, int]:
        engines.clear()  # the previous engine must not be alive (and traversed by the GC) during a run
        gc.collect()
        seconds, engine, events = replay(path, settings, args.engine)
        engines[:] = [engine]
        return seconds, events

    replayed = best_of(args.runs, full)
    print(f"full replay: {replayed.rate:,.0f} ev/s", file=sys.stderr)
    engine = engines.pop()
    detection = check(*findings(engine), truth) if truth is not None else {}
    tracked = tracked_objects(engine)
    del engine
    k8s_seconds, k8s_events, stride = k8s_models(path, floor.events, args.k8s_sample)
    print(f"k8s models: {k8s_events / k8s_seconds:,.0f} ev/s", file=sys.stderr)
    return {
        "machine": machine(),
        "runs": args.runs,
        "stream": stream_summary(path, truth, floor.events),
        "generation_s": gen_seconds,
        "replay": {
            "engine": args.engine,
            "events_per_s": replayed.rate,
            "best_s": replayed.best,
            "runs_s": replayed.runs,
            "tracked_objects": tracked,
        },
        "decode": {"events_per_s": floor.rate, "best_s": floor.best, "runs_s": floor.runs},
        "k8s_models": {
            "events_per_s": k8s_events / k8s_seconds,
            "sampled_events": k8s_events,
            "stride": stride,
            "seconds": k8s_seconds,
            "scaled_full_stream_s": k8s_seconds * floor.events / k8s_events,
        },
        "ratio_replay_to_decode": replayed.rate / floor.rate,
        "memory": memory,
        "detection": detection or dict.fromkeys(("fight", "hot_loop"), NOT_CHECKED),
        "profile": profile(path, settings, args.engine) if args.profile else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.no_pin:
        os.sched_setaffinity(0, {0})
    if args.memory_only or args.memory_timeline:
        return bench_memory.run(args)
    with tempfile.TemporaryDirectory(prefix="fightwatch-bench-") as tmp:
        path, truth, gen_seconds = synthetic_cluster.obtain_as_asked(args, Path(tmp))
        if gen_seconds is not None:
            print(f"generated {path} in {gen_seconds:.1f} s", file=sys.stderr)
        results = measure(args, path, truth, gen_seconds)
    print(markdown(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"\nresults written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
