#!/usr/bin/env python3
"""Check what the engine found against what the synthetic cluster injected (scripts/synthetic_cluster.py's truth):
the recall of the injected fights and hot loops, and the findings on objects that were not made to misbehave.

    .venv/bin/python scripts/bench_recall.py STREAM.jsonl [--engine native|python]

replays STREAM.jsonl at the default settings and prints the check as JSON (scripts/bench.py checks the engine of
its timed replay the same way, into its results' "detection").
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from synthetic_cluster import Truth, load_truth

from harness.bench.engine import add_engine_argument, findings, make_engine, replay_events
from watcher.config import Config
from watcher.model import Finding, FindingType

NOT_CHECKED: dict[str, Any] = {
    "injected": 0,
    "found": 0,
    "recall": None,
    "missed_examples": [],
    "false_positives": 0,
    "false_positives_by_role": {},
    "false_positive_examples": [],
}


def check(active: list[Finding], resolved: list[Finding], truth: Truth) -> dict[str, Any]:
    """Recall of injected fights and hot loops, and findings on objects that were not made to misbehave."""
    everything = active + resolved
    found: dict[FindingType, dict[str, Finding]] = {FindingType.FIGHT: {}, FindingType.HOT_LOOP: {}}
    for finding in everything:
        found[finding.type].setdefault(finding.object.uid, finding)
    role_of = {uid: role for role, uids in truth.roles.items() for uid in uids}
    out: dict[str, Any] = {"findings": len(everything), "resolved_buffer_full": len(resolved) >= 10_000}
    flavors: dict[str, list[int]] = {}
    for uid, flavor in sorted(truth.flavors.items()):
        counts = flavors.setdefault(flavor, [0, 0])
        counts[0] += uid in found[FindingType.FIGHT]
        counts[1] += 1
    out["fight_recall_by_flavor"] = {flavor: f"{hit}/{total}" for flavor, (hit, total) in sorted(flavors.items())}
    for kind, role in ((FindingType.FIGHT, "fight"), (FindingType.HOT_LOOP, "hot")):
        injected = set(truth.roles.get(role, ()))
        hits = injected & set(found[kind])
        misses = sorted(injected - hits)
        extra = sorted(set(found[kind]) - injected)
        out[kind.value] = {
            "injected": len(injected),
            "found": len(hits),
            "recall": len(hits) / len(injected) if injected else None,
            "missed_examples": misses[:5],
            "false_positives": len(extra),
            "false_positives_by_role": dict(Counter(role_of.get(uid, "?") for uid in extra)),
            "false_positive_examples": [
                f"{found[kind][uid].object.display()}: {found[kind][uid].summary}" for uid in extra[:5]
            ],
        }
    return out


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
