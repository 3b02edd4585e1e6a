#!/usr/bin/env python3
"""Load test of fightwatch's scale and high availability against a real etcd + kube-apiserver (loopback): the pinned
current release, or `$FIGHTWATCH_KUBERNETES`.

Two runs, each on a fresh control plane with the same objects and the same load:

  one shard, two replicas   leader election on a Lease; the leader is killed (SIGKILL) halfway through the load:
                            the standby must take over (measured: kill -> its `leading` line) and deliver, with no
                            finding lost (each injected fight and hot loop has its Event, also those that began
                            while nobody led) and none duplicated (exactly one Warning Event per finding)
  two shards                `--shard 0|1 --total-shards 2`, one process each (each with its own Lease): events per
                            shard, and the findings of both together

The cluster holds `--objects` objects (20,000) of five kinds: ConfigMaps, Secrets, Deployments, headless Services
and ServiceAccounts, in 20 namespaces. A writer then sustains `--rate` writes/s (300) for `--duration` s (300):
benign churn (merge patches by per-field managers: each writer owns its own field, so nothing changes hands) and
`--fights` injected fights (two operators taking a label from each other, one write every 4 s) and `--hot-loops`
hot loops (one reconciler stamping a time annotation once a second), starting at staggered times so that some
begin while the killed leader's Lease runs out.

Reported per fightwatch process, over the load phase: events received, CPU seconds per 1,000 events, event lag
(the writer reading the API server's answer -> the event recorded by fightwatch, p50/p99/max; an event may arrive
before the writer reads its answer), resident memory sampled every 5 s (start, end, max, slope), and the findings
against what was injected. Everything runs on this machine's cores: API server, etcd, the writer and the watchers.

  .venv/bin/python scripts/load_test.py                         # ~16 minutes; writes bench-results/load.json
  .venv/bin/python scripts/load_test.py --duration 60 --objects 5000 --out /tmp/load.json   # a quick look

A memory soak: `--runs ha --replicas 1` runs one watcher (no leader to kill) for `--duration` s; `--window S` sets
the fight window and the idle time (detection.fight.window, detection.idle_after) of the watchers, so that the
window turns over within a shorter run; `--samples FILE` appends each resource sample as a JSON line as it is
taken (a run stopped early keeps its series). The RSS slope is also given over the last 5 and 10 minutes.

`--informer` runs a client-go metadata-only informer of the same kinds beside the watchers (scripts/informer,
counting events), sampled alike, and gives each watcher's resident memory and CPU per event over it;
`--fightwatch-python` runs another installation's fightwatch (scripts/runtime-venv.sh: the image's dependencies):

  .venv/bin/python scripts/load_test.py --runs ha --replicas 1 --duration 1800 --informer \
      --fightwatch-python "$(scripts/runtime-venv.sh)" --out bench-results/load-vs-informer.json
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from harness.bench.cluster_load import of_args, workdir_of, write_results
from harness.bench.load_test.measure import run
from harness.bench.load_test.report import header, table
from harness.bench.load_test.watchers import Setup
from harness.bench.load_test.workload import Workload


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--fights", type=int, default=24)
    parser.add_argument("--hot-loops", type=int, default=8)
    parser.add_argument("--kill-at", type=float, help="seconds into the load (default: half of --duration)")
    parser.add_argument("--runs", default="ha,shards", help="ha, shards or both (comma-separated)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "load.json")
    parser.add_argument("--workdir", type=Path, help="default: a temp dir, removed afterwards")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument(
        "--replicas", type=int, choices=(1, 2), default=2, help="watchers in the ha run (1: no leader to kill)"
    )
    parser.add_argument(
        "--window",
        type=float,
        help="seconds: the watchers' detection.fight.window and detection.idle_after (default: theirs, 1 h)",
    )
    parser.add_argument("--samples", type=Path, help="append each resource sample here as a JSON line")
    parser.add_argument(
        "--informer",
        action="store_true",
        help="also run a client-go metadata-only informer of the same kinds (scripts/informer, counting events) and "
        "give each watcher's resident memory over it",
    )
    parser.add_argument(
        "--fightwatch-python",
        default=sys.executable,
        help="the interpreter of the fightwatch to run (e.g. scripts/runtime-venv.sh's, as the image installs it)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    workload, setup = of_args(Workload, args), of_args(Setup, args)
    results: dict[str, Any] = header(workload, setup)
    with workdir_of(args.workdir, "fightwatch-load-") as workdir:
        for run_name in args.runs.split(","):
            (workdir / run_name).mkdir(parents=True, exist_ok=True)
            results["runs"][run_name] = asyncio.run(run(run_name, workload, setup, workdir / run_name))
            print(orjson.dumps(results["runs"][run_name], option=orjson.OPT_INDENT_2).decode()[:4000], flush=True)
        print(table(results))
        write_results(args.out, results)


if __name__ == "__main__":
    main()
