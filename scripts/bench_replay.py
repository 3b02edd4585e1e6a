#!/usr/bin/env python3
"""Benchmark the replay pipeline on a large, realistic, seeded watch stream.

One run
1. generates (harness/synthetic/, as scripts/generate_stream.py) or reuses (`--stream PATH`) a JSON Lines capture
   of >= 200,000 watch events over >= 20,000 objects shaped like a current Kubernetes cluster (ConfigMaps,
   Deployments with a pod template, ReplicaSets, realistic managedFields), with benign churn and a known set of
   injected fights and hot loops. Object shapes come from the recorded real captures in
   tests/fixtures/captures/*.jsonl when they exist, else from hand-built templates;
2. measures, pinned to one core, best of `--runs`: the full replay pipeline (reading the capture and the engine
   processing each event, harness/bench/engine.py) and JSON decoding alone (the floor), taken in turns, with each
   turn's ratio; and kubernetes-asyncio model deserialization (what a naive watcher pays; harness/bench/replay.py);
3. measures engine memory per tracked object with tracemalloc (harness/bench/memory.py);
4. checks that the engine finds the injected fights and hot loops (recall) and nothing else (false positives;
   harness/bench/recall.py, as scripts/bench_recall.py);
writes the results to `--json` and prints them as a Markdown table (harness/bench/replay_report.py, as
scripts/bench_report.py). `--profile` adds a cProfile of the replay. `--memory-only` and `--memory-timeline N`
measure memory instead (as scripts/bench_memory.py).

`--shapes a,b` (or `all`) measures the replay on several shapes of data instead (harness/bench/shapes/: the
synthetic stream, full objects and metadata-only; the repository's real recordings replicated; large objects),
each beside its decode floor, and several builds side by side (`--build NAME=CHECKOUT`, repeated), in turns, each
turn a process of the build's own interpreter pinned to one core; the streams are kept in `--streams DIR`.
`--profile-shape SHAPE` prints a cProfile of one shape's replay.

  .venv/bin/python scripts/bench_replay.py --shapes all --build before=../before --build after=. --runs 5
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import orjson

from harness.bench.engine import add_engine_argument
from harness.bench.memory import add_timeline_arguments, run
from harness.bench.replay import measure
from harness.bench.replay_report import markdown
from harness.bench.shapes import REPLAY, turns
from harness.synthetic.stream import add_arguments, obtain_as_asked


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)  # --events, --objects, --seed, --templates, --metadata-only
    parser.add_argument("--runs", type=int, default=3, help="timed runs per measurement; the best counts")
    parser.add_argument(
        "--json", type=Path, help="write results here (default bench-results/replay.json; shapes-replay.json)"
    )
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
    add_timeline_arguments(parser, "--memory-timeline")
    turns.add_arguments(parser, REPLAY)
    args = parser.parse_args(argv)
    on_shapes = args.shapes or args.profile_shape
    args.json = args.json or Path("bench-results") / ("shapes-replay.json" if on_shapes else "replay.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.shapes or args.profile_shape:
        return turns.run(args, REPLAY)  # (each turn a process pinned to a core of its own)
    if not args.no_pin:
        os.sched_setaffinity(0, {0})
    if args.memory_only or args.memory_timeline:
        return run(args)
    with tempfile.TemporaryDirectory(prefix="fightwatch-bench-") as tmp:
        path, truth, gen_seconds = obtain_as_asked(args, Path(tmp))
        if gen_seconds is not None:
            print(f"generated {path} in {gen_seconds:.1f} s", file=sys.stderr)
        results = measure(
            path,
            truth,
            generation_seconds=gen_seconds,
            engine_name=args.engine,
            runs=args.runs,
            k8s_sample=args.k8s_sample,
            with_profile=args.profile,
        )
    print(markdown(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"\nresults written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
