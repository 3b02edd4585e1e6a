#!/usr/bin/env python3
"""Time one turn of a shape benchmark: the decode floor of a stream, then its analysis, back to back; print JSON.

Run by harness/bench/shapes/turns.py (scripts/bench_replay.py and scripts/bench_audit.py with `--shapes`) with each
build's own interpreter, CHECKOUT/.venv/bin/python: a script run by path imports `watcher` and `harness` from that
interpreter's checkout, so the build measured is that checkout's. It therefore uses only what every build measured
has: harness.bench.engine's make_engine and replay_events, watcher.offline.tune_gc, watcher.sources.audit's
read_audit_log and AuditStats, watcher.detection.request_engine.RequestEngine, watcher.config.Config.

  CHECKOUT/.venv/bin/python scripts/bench_shape_turn.py replay STREAM [--engine native] [--cpu 0] [--profile]

The floor is `orjson.loads` of each line, the file read as the analysis reads it (1 MiB buffers); the analysis is
what `fightwatch replay` (replay) or `fightwatch audit` (audit) does with the stream, findings kept, no output.
`--profile` prints the analysis' cProfile (top 20 by own time) instead.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from watcher.config import Config
from watcher.offline import tune_gc

READ_BUFFER = 1 << 20  # as watcher.sources.capture reads


def floor(path: Path) -> tuple[float, int]:
    loads = orjson.loads
    count = 0
    start = time.perf_counter()
    with path.open("rb", buffering=READ_BUFFER) as stream:
        for line in stream:
            loads(line)
            count += 1
    return time.perf_counter() - start, count


def replay(path: Path, engine_name: str) -> tuple[float, int, int]:
    from harness.bench.engine import make_engine, replay_events  # noqa: PLC0415 - only for replay turns

    engine = make_engine(Config().detection, engine_name)
    start = time.perf_counter()
    events = replay_events(path, engine)
    seconds = time.perf_counter() - start
    return seconds, events, len(engine.active()) + len(engine.resolved())


def audit(path: Path) -> tuple[float, int, int]:
    from watcher.detection.request_engine import RequestEngine  # noqa: PLC0415 - only for audit turns
    from watcher.sources.audit import AuditStats, read_audit_log  # noqa: PLC0415

    engine = RequestEngine(Config().detection)
    stats = AuditStats()
    process = engine.process
    start = time.perf_counter()
    for request in read_audit_log(str(path), stats=stats):
        process(request)
    seconds = time.perf_counter() - start
    return seconds, stats.events, len(engine.active()) + len(engine.resolved())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("replay", "audit"))
    parser.add_argument("stream", type=Path)
    parser.add_argument("--engine", default="native", help="replay: the engine (native or python)")
    parser.add_argument("--cpu", type=int, default=0, help="the core to pin to")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the analysis instead")
    args = parser.parse_args(argv)
    os.sched_setaffinity(0, {args.cpu})
    tune_gc()  # what the offline commands do

    def analyse() -> tuple[float, int, int]:
        return replay(args.stream, args.engine) if args.kind == "replay" else audit(args.stream)

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(analyse)
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(20)
        return 0
    gc.collect()
    floor_s, lines = floor(args.stream)
    gc.collect()
    analysis_s, events, found = analyse()
    result: dict[str, Any] = {
        "floor_s": floor_s,
        "analysis_s": analysis_s,
        "lines": lines,
        "events": events,
        "findings": found,
        "python": sys.executable,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
