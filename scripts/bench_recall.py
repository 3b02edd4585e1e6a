#!/usr/bin/env python3
"""Check what the engine found against what the synthetic cluster injected (scripts/generate_stream.py's truth).

The recall of the injected fights and hot loops, and the findings on objects that were not made to misbehave.

    .venv/bin/python scripts/bench_recall.py STREAM.jsonl [--engine native|python]

replays STREAM.jsonl at the default settings and prints the check as JSON (scripts/bench_replay.py checks the engine
of its timed replay the same way, into its results' "detection"; harness/bench/recall.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from harness.bench.engine import add_engine_argument, findings, make_engine, replay_events
from harness.bench.recall import check
from harness.synthetic.truth import load_truth
from watcher.config import Config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stream", type=Path, help="a stream with its .truth.json sidecar")
    add_engine_argument(parser)
    args = parser.parse_args(argv)
    truth = load_truth(args.stream)
    if truth is None:
        parser.error(f"{args.stream} has no truth sidecar: nothing to check against")
    engine = make_engine(Config().detection, args.engine)
    replay_events(args.stream, engine)
    sys.stdout.write(orjson.dumps(check(*findings(engine), truth), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
