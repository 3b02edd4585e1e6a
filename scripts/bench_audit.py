#!/usr/bin/env python3
"""Benchmark the audit analysis (`fightwatch audit`) on a large, seeded audit log shaped like the recorded one.

One run
1. generates a `Metadata`-level audit log (JSON Lines, as the log backend writes it) of >= 200,000 events over
   `--objects` ConfigMaps and `--clients` service accounts, from the events recorded from a real kube-apiserver
   (tests/fixtures/audit/*.metadata.jsonl: v1.37.2) as templates, each client a service account in a pod of its
   own: reads and successful updates by one or two clients per
   object over two hours, an occasional conflict retried once, plus injected conflict storms, stuck appliers and
   no-op loops;
2. measures, pinned to one core, best of `--runs`: the whole analysis (reading the log, decoding each event into a
   Request, the request engine) and JSON decoding alone (the floor);
3. measures the request engine's memory with tracemalloc: per tracked object (one client each), and per
   additional client of an object;
4. checks that the injected findings are found and nothing else;
5. writes the same log into the envelopes managed clusters export it in (`harness/envelopes.py`: EKS, GKE, AKS),
   and times the analysis of each, best of `--runs`, checking it finds what the raw log gives (GKE's forms: what
   the raw log gives with GKE's losses, `gke_degraded`);
and writes the results to `--json` (default bench-results/audit.json) and prints them. The generator is
harness/bench/audit_log.py, the measurements harness/bench/audit.py.

`--shapes a,b` (or `all`) measures the analysis on several shapes of data instead (harness/bench/shapes/: the
generated log; the recorded conflicts; reads; RequestResponse bodies), each beside its decode floor and beside the
replay of the same scenarios watched (the replay shape `scenarios`), and several builds side by side
(`--build NAME=CHECKOUT`, repeated), in turns, each turn a process of the build's own interpreter pinned to one
core; the streams are kept in `--streams DIR`. `--profile-shape SHAPE` prints a cProfile of one shape's analysis.

  .venv/bin/python scripts/bench_audit.py
  .venv/bin/python scripts/bench_audit.py --shapes all --build before=../before --build after=. --runs 5
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson

from harness import REPO_ROOT
from harness.bench.audit import benchmark
from harness.bench.shapes import AUDIT, turns
from watcher.offline import tune_gc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--json", type=Path, help="write results here (default bench-results/audit.json; shapes-audit.json)"
    )
    parser.add_argument(
        "--no-envelopes", dest="envelopes", action="store_false", help="skip timing the clouds' envelopes"
    )
    turns.add_arguments(parser, AUDIT)
    args = parser.parse_args(argv)
    on_shapes = args.shapes or args.profile_shape
    args.json = args.json or REPO_ROOT / "bench-results" / ("shapes-audit.json" if on_shapes else "audit.json")
    if on_shapes:
        return turns.run(args, AUDIT)  # (each turn a process pinned to a core of its own)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    tune_gc()
    result, all_right = benchmark(
        objects=args.objects, clients=args.clients, seed=args.seed, runs=args.runs, with_envelopes=args.envelopes
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    for key, value in result.items():
        print(f"{key:32} {value}")
    return 0 if all_right else 1


if __name__ == "__main__":
    sys.exit(main())
