"""Replay one capture through `read_capture` + `Engine.process` at the default settings, nothing else, and print
events/s: the loop to put under a profiler (`py-spy record -- ...`, `valgrind --tool=callgrind ...`), whose
instruction counts compare two versions of the engine more stably than timings on a shared machine.

    valgrind --tool=callgrind .venv/bin/python scripts/replay_loop.py STREAM.jsonl
"""

from __future__ import annotations

import argparse
import time

from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.sources.capture import ReadStats, read_capture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", help="a capture file (JSON Lines or kubectl's watch output)")
    args = parser.parse_args()
    engine = Engine(Config().detection)
    process = engine.process
    start = time.perf_counter()
    events = 0
    for event in read_capture(args.capture, stats=ReadStats()):
        process(event)
        events += 1
    seconds = time.perf_counter() - start
    findings = len(engine.active()) + len(engine.resolved())
    print(f"{events:,} events in {seconds:.2f} s: {events / seconds:,.0f} events/s; {findings} findings")


if __name__ == "__main__":
    main()
