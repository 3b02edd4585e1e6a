#!/usr/bin/env python3
"""Print the replay benchmark's report: its results (the JSON scripts/bench_replay.py writes) as a Markdown table.

    .venv/bin/python scripts/bench_report.py bench-results/replay.json

prints the table scripts/bench_replay.py prints at the end of its run (harness/bench/replay_report.py), from results
kept (bench-results/*.json).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from harness.bench.replay_report import markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="the results of scripts/bench_replay.py (its --json)")
    args = parser.parse_args(argv)
    results = orjson.loads(args.results.read_bytes())
    if "replay" not in results:
        parser.error(f"{args.results} holds no replay measurement (the results of scripts/bench_memory.py?)")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
