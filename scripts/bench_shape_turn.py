#!/usr/bin/env python3
"""Time one turn of a shape benchmark: the decode floor of a stream, then its analysis, back to back; print JSON.

Run by harness/bench/shapes/turns.py (scripts/bench_replay.py and scripts/bench_audit.py with `--shapes`) with each
build's own interpreter, CHECKOUT/.venv/bin/python: a script run by path imports `watcher` and `harness` from that
interpreter's checkout, so the build measured is that checkout's. It therefore uses only what every build measured
has: the replay benchmark's `replay` and `decode_only` (harness.bench.replay), the audit benchmark's `analyse`
(harness.bench.audit), watcher.offline.tune_gc and watcher.config.Config.

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
from pathlib import Path
from typing import Any

from harness.bench.replay import decode_only
from harness.bench.replay import replay as timed_replay
from watcher.config import Config
from watcher.offline import tune_gc


def replay(path: Path, engine_name: str) -> tuple[float, int, int]:
    seconds, engine, events = timed_replay(path, Config().detection, engine_name)
    return seconds, events, len(engine.active()) + len(engine.resolved())


def audit(path: Path) -> tuple[float, int, int]:
    from harness.bench.audit import analyse  # noqa: PLC0415 - only for audit turns

    seconds, events, engine = analyse(path)
    return seconds, events, len(engine.active()) + len(engine.resolved())


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
    floor_s, lines = decode_only(args.stream)
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
