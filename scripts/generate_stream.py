#!/usr/bin/env python3
"""Generate a seeded synthetic cluster's watch stream, and the truth of what was injected into it.

    .venv/bin/python scripts/generate_stream.py --out STREAM.jsonl [--events N] [--objects N] [--seed N]
        [--templates DIR] [--metadata-only]

writes a JSON Lines capture (`{"type", "object", "observedAt"}` per line, in observedAt order) of `--events` watch
events over `--objects` objects shaped like a current Kubernetes cluster's (ConfigMaps, Deployments with a pod
template, ReplicaSets, realistic managedFields; the shapes from the real captures in `--templates`, see
harness/synthetic/), two hours of it: benign churn (rollouts with their status bursts, status writes, config edits,
leader-election ConfigMaps renewed every 2 s, single corrections A->B->A, ownership migrations A->B->C) and a known
set of injected fights (A->B->A->B... on spec.replicas or a label) and hot loops (one writer, >= 1 write/s for
minutes). Beside it, STREAM.jsonl.truth.json (`Truth`): which objects play which role, and the stream's sizes. The
same seed writes the same bytes. With `--metadata-only`, the same events as a metadata-only watch receives them and
`--record` writes them: each object reduced to its kind, apiVersion and metadata.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.synthetic.stream import Shape, add_arguments, generate
from harness.synthetic.truth import truth_path, write_truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the stream to write (and OUT.truth.json beside it)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    truth = generate(args.out, Shape.of_args(args))
    write_truth(args.out, truth)
    roles = ", ".join(f"{role} {len(uids):,}" for role, uids in sorted(truth.roles.items()))
    print(
        f"{args.out}: {truth.events:,} events, {truth.objects:,} objects, {truth.bytes / 1e6:,.0f} MB in "
        f"{time.perf_counter() - start:.1f} s; roles: {roles}; truth in {truth_path(args.out)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
