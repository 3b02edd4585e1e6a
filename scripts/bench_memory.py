#!/usr/bin/env python3
"""Measure the detection engine's memory on a stream (the replay benchmark's synthetic cluster, or a recording).

    .venv/bin/python scripts/bench_memory.py [--stream STREAM.jsonl] [--json OUT.json]
    .venv/bin/python scripts/bench_memory.py --stream STREAM.jsonl --timeline N [--window SECONDS]

The first measures the bytes the engine holds per tracked object after a replay: tracemalloc's count of Python's
objects plus the native engine's allocator count, as shipped (objects idle for the fight window let go, the
default cap) and with every object kept (no idle eviction, no cap: every object of the stream tracked), the
latter also as the resident memory a fresh interpreter grows by; and what the live watcher's watch index holds
per object besides. `--timeline N` instead replays at the defaults and samples, every N events, the simulated
time, the tracked objects, the handovers logged, tracemalloc's count and VmRSS: does the memory level off once the
fight window has turned over?

Without `--stream`, or when it does not exist, the stream is generated as scripts/generate_stream.py does
(`--events`, `--objects`, `--seed`, `--templates`), and kept at `--stream`. scripts/bench_replay.py's
`--memory-only` and `--memory-timeline N` run this (harness/bench/memory.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.bench.engine import add_engine_argument
from harness.bench.memory import add_timeline_arguments, run
from harness.synthetic.stream import add_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--stream",
        type=Path,
        help="measure this stream (with its .truth.json sidecar, if any) if it exists, else generate it there",
    )
    add_arguments(parser)
    parser.add_argument("--json", type=Path, default=Path("bench-results/memory.json"), help="write results here")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to CPU 0")
    add_engine_argument(parser)
    add_timeline_arguments(parser, "--timeline")
    args = parser.parse_args(argv)
    if not args.no_pin:
        os.sched_setaffinity(0, {0})
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
