#!/usr/bin/env python3
"""Benchmark of the live watcher against a real etcd + kube-apiserver (the pinned current release, or
`$FIGHTWATCH_KUBERNETES`) under write load.

Starts a throw-away control plane (harness), creates thousands of ConfigMaps (with ~1 KB of data each) and
Deployments in `--namespaces` namespaces, then runs watchers side by side on the same traffic, by default:

  fightwatch-metadata   `fightwatch run` as shipped: metadata-only lists and watches (--record on, for the lag)
  fightwatch-full       `fightwatch run` with full objects for every resource (--record on)
  baseline              kubernetes-asyncio's standard `Watch().stream()`, every event deserialized into models
  informer              a Go controller's watch: client-go's metadata-only shared informers (scripts/informer, built
                        with `go build` on first use and cached, see harness/go_build.py)
  floor                 the least a watcher on fightwatch's chosen stack holds: the same metadata-only list and watch
                        with kubernetes-asyncio's ApiClient and raw JSON on uvloop, nothing else imported
                        (scripts/bench_floor_watch.py), on the first fightwatch watcher's interpreter
  floor-libraries       the floor with fightwatch's other required libraries imported and used once (pydantic,
                        prometheus-client, structlog, PyYAML); `--no-floor` leaves both out

`--fightwatch NAME=PYTHON:ENGINE:OBJECTS` (repeatable) names the fightwatch watchers instead: the interpreter of an
installed fightwatch (another build of it, to compare two versions on one traffic), `--engine` (auto, native,
python) and `metadata` or `full` objects.

while a load generator writes at a fixed rate for a fixed time (merge patches on ConfigMaps' data by `--managers`
field managers, writer-a, writer-b, ..., one key each; on Deployments' annotations by `deployer`; a few ConfigMaps
are fought over by two more managers, fight-a-operator and fight-b-operator). It reports, per watcher and over the
load phase only: events handled per second, CPU seconds per 1,000 events, event lag (write accepted by the API
server, i.e. its answer read by the writer -> event received by the watcher, p50/p99; fightwatch analyses an event
in the same step it receives it), resident memory (once every watcher is ready, at the end of 10 s of idling, at the
end of the load, and the peak), and for fightwatch the bytes received per event; then each fightwatch watcher over
the client-go informer: CPU per event, and resident memory at the end of the load and of the idle phase; and every
watcher's resident memory by phase, the median of the runs. All processes share the machine's cores with the API
server and etcd, as they would on a small node.

`--runs N` measures N times on the one control plane (new watchers, new writes to the same objects), starting the
watchers in turns (reversed every other run, so that none always lists first), and reports the ratios of each run
and their median. The JSON's `load`, `watchers` and `findings` are the first run's; `runs` holds every run's, and
`rss_mib_by_phase_median` each watcher's median memory by phase.

  .venv/bin/python scripts/bench_live.py                     # 3,000 ConfigMaps + 300 Deployments, 300 writes/s, 60 s
  .venv/bin/python scripts/bench_live.py --configmaps 2000 --deployments 0 --namespaces 4 --managers 3 --runs 3
  .venv/bin/python scripts/bench_live.py --rate 500 --duration 30 --out /tmp/live.json
  .venv/bin/python scripts/bench_live.py --rate 900 --fightwatch after-native=.venv/bin/python:native:metadata \
      --fightwatch before-native=/tmp/before/.venv/bin/python:native:metadata
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path

from harness import REPO_ROOT
from harness.bench.cluster_load import of_args, workdir_of, write_results
from harness.bench.live.measure import benchmark
from harness.bench.live.report import print_summary, report
from harness.bench.live.watchers import BASELINES, DEFAULT_VARIANTS, Variant
from harness.bench.live.workload import WRITER_KEYS, Workload
from harness.go_build import informer_binary_or_exit


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configmaps", type=int, default=3000)
    parser.add_argument("--deployments", type=int, default=300)
    parser.add_argument("--namespaces", type=_positive, default=10, help="the objects are spread over these")
    parser.add_argument(
        "--managers",
        type=int,
        choices=range(1, len(WRITER_KEYS) + 1),
        default=2,
        metavar="N",
        help="field managers writing ConfigMaps' data (writer-a, writer-b, ...; default 2)",
    )
    parser.add_argument("--fights", type=int, default=30, help="objects two managers fight over")
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--runs", type=_positive, default=1, help="measurements, the watchers started in turns")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "live.json")
    parser.add_argument("--workdir", type=Path, help="default: a temp dir, removed afterwards")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--fightwatch",
        action="append",
        type=_variant,
        metavar="NAME=PYTHON:ENGINE:OBJECTS",
        help="a fightwatch watcher (repeatable; default: this build's, metadata-only and full objects)",
    )
    parser.add_argument("--no-floor", dest="floor", action="store_false", help="leave out the floor watchers")
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number above 0")
    return int(text)


def _variant(text: str) -> Variant:
    name, _, spec = text.partition("=")
    parts = spec.split(":")
    if (
        not name
        or name in BASELINES
        or len(parts) != 3
        or parts[1] not in ("auto", "native", "python")
        or parts[2] not in ("metadata", "full")
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=PYTHON:auto|native|python:metadata|full, NAME not one of {', '.join(BASELINES)}"
        )
    return Variant(name, parts[0], parts[1], parts[2] == "full")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    informer = informer_binary_or_exit("bench_live")
    workload = of_args(Workload, args)
    variants = args.fightwatch or DEFAULT_VARIANTS
    with workdir_of(args.workdir, "fightwatch-bench-live-") as workdir:
        runs, server_version = asyncio.run(
            benchmark(workload, variants, runs=args.runs, workdir=workdir, informer=informer, floor=args.floor)
        )
        result = report(workload, runs, server_version=server_version)
        print_summary(result)
        write_results(args.out, result)


if __name__ == "__main__":
    main()
