"""Replay one capture through the engine at the default settings, nothing else, and print
events/s: the loop to put under a profiler (`py-spy record -- ...`, `valgrind --tool=callgrind ...`), whose
instruction counts compare two versions of the engine more stably than timings on a shared machine.

    valgrind --tool=callgrind .venv/bin/python scripts/replay_loop.py STREAM.jsonl
    valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes \
        .venv/bin/python scripts/replay_loop.py --tune-gc STREAM.jsonl

`--audit` reads the file as an audit log and analyses it as `fightwatch audit` does (the request engine);
`--engine native` runs the native engine instead of the Python one (the default here); `--tune-gc` sets the
garbage collector as `fightwatch replay` does; `--decode-only` runs the benchmark's floor
instead (each line through `orjson.loads`, read as the replay reads it), to compare the two under the same tool.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.bench.audit import analyse
from harness.bench.engine import ENGINES, findings, make_engine, replay_events
from harness.bench.replay import decode_only  # (the replay benchmark's floor: defined once)
from watcher.config import Config
from watcher.offline import tune_gc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", help="a capture file (JSON Lines or kubectl's watch output)")
    parser.add_argument("--tune-gc", action="store_true", help="tune the garbage collector as `fightwatch replay` does")
    parser.add_argument("--engine", choices=ENGINES, default="python", help="the engine to replay on (default python)")
    parser.add_argument("--audit", action="store_true", help="analyse an audit log as `fightwatch audit` does")
    parser.add_argument("--decode-only", action="store_true", help="only decode each line (the benchmark's floor)")
    args = parser.parse_args()
    if args.tune_gc:
        tune_gc()
    if args.audit:
        seconds, events, analysed = analyse(Path(args.capture))
        found = len(analysed.findings())
        print(f"{events:,} events in {seconds:.2f} s: {events / seconds:,.0f} events/s; {found} findings")
        return
    if args.decode_only:
        seconds, lines = decode_only(Path(args.capture))
        print(f"{lines:,} lines decoded in {seconds:.2f} s: {lines / seconds:,.0f} lines/s")
        return
    engine = make_engine(Config().detection, args.engine)
    start = time.perf_counter()
    events = replay_events(Path(args.capture), engine)
    seconds = time.perf_counter() - start
    found = sum(map(len, findings(engine)))  # active and resolved
    print(f"{events:,} events in {seconds:.2f} s: {events / seconds:,.0f} events/s; {found} findings")


if __name__ == "__main__":
    main()
