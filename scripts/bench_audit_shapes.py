#!/usr/bin/env python3
"""Time the audit analysis on given audit logs beside its decode floor and the replay of a paired watch recording.

For each `LOG[:WATCH]`, on one core, best of `--runs`, in turns (floor, audit, replay, floor, ...): `orjson.loads` of
each line of LOG alone (the floor, `harness.bench.audit.decode_only`), the whole audit analysis of LOG (what
`fightwatch audit` does, `harness.bench.audit.timed_analysis`), and the replay of WATCH with the default engine (the
native one where built; `harness.bench.engine`), each in events/s; and the audit's share of the floor and its rate
against the replay's.

With `--python` given more than once, each interpreter (a venv's python, e.g. of two builds of fightwatch) measures
in turn, one run at a time as a process of its own, alternating, `--runs` rounds, and the best of each is printed side
by side: builds compared in one run, on the same files. Every build's harness has the functions it calls.

    .venv/bin/python scripts/bench_audit_shapes.py --runs 3 LOG.jsonl:WATCH.jsonl ...
    .venv/bin/python scripts/bench_audit_shapes.py --python ../before/.venv/bin/python --python .venv/bin/python \\
        --runs 3 LOG.jsonl:WATCH.jsonl ...
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from harness.bench.audit import decode_only, timed_analysis
from harness.bench.engine import default_engine, make_engine, replay_events
from watcher.config import Config
from watcher.offline import tune_gc

Rates = dict[str, float]


def measure(log: Path, watch: Path | None) -> Rates:
    """One turn of each measurement of a log (and its watch recording): events/s."""
    rates: Rates = {}
    gc.collect()
    seconds, events = decode_only(log)
    rates["floor"] = events / seconds
    gc.collect()
    seconds, events = timed_analysis(log)
    rates["audit"] = events / seconds
    if watch is not None:
        gc.collect()
        engine = make_engine(Config().detection, default_engine())
        started = time.perf_counter()
        events = replay_events(watch, engine)
        rates["replay"] = events / (time.perf_counter() - started)
    return rates


def best(turns: list[Rates]) -> Rates:
    return {key: max(t[key] for t in turns) for key in turns[0]}


def line(name: str, rates: Rates) -> str:
    share = rates["audit"] / rates["floor"]
    text = f"{name:44} floor {rates['floor']:>9,.0f}  audit {rates['audit']:>9,.0f}  share {share:6.1%}"
    if "replay" in rates:
        text += f"  replay {rates['replay']:>9,.0f}  audit/replay {rates['audit'] / rates['replay']:.2f}"
    return text


def split(spec: str) -> tuple[Path, Path | None]:
    log, _, watch = spec.partition(":")
    return Path(log), Path(watch) if watch else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", metavar="LOG[:WATCH]")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", action="append", default=[], help="an interpreter to measure with (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one turn's rates as JSON (used with --python)")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    tune_gc()
    if len(args.python) < 2:
        for spec in args.logs:
            log, watch = split(spec)
            rates = best([measure(log, watch) for _ in range(args.runs)])
            if args.json:
                sys.stdout.write(orjson.dumps(rates).decode() + "\n")
            else:
                print(line(log.name, rates), flush=True)
        return 0
    script = str(Path(__file__).resolve())
    for spec in args.logs:
        turns: dict[str, list[Rates]] = {python: [] for python in args.python}  # by interpreter
        for _ in range(args.runs):
            for python in args.python:
                out = subprocess.run(
                    [python, script, "--runs", "1", "--json", spec], check=True, capture_output=True, text=True
                ).stdout
                turns[python].append(orjson.loads(out))
        for python in args.python:
            print(line(f"{split(spec)[0].name} [{python}]", best(turns[python])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
