#!/usr/bin/env python3
"""Record the scenario captures: real watch events from a real etcd + kube-apiserver of the current pinned release
(scripts/kubernetes/current/go.mod), with its real kube-controller-manager and kubectl.

Starts a throw-away control plane (harness) with kube-controller-manager, watches configmaps, deployments,
replicasets, leases, validatingwebhookconfigurations, widgets.example.com and horizontalpodautoscalers (their
autoscaling/v1 view) cluster-wide, runs the scenarios concurrently, and writes

  <out>/<scenario>.jsonl              one watch event per line: {"type", "object", "observedAt"}
  <out>/README.md                     how and when they were recorded

(The bundled demo capture is of real programs' fights: scripts/record_real_fights.py --demo.)

  .venv/bin/python scripts/record_captures.py                       # all but the separate ones, about 4 minutes
  .venv/bin/python scripts/record_captures.py --only fight-data --slow-period 5
  .venv/bin/python scripts/record_captures.py --only incident-replicas --only incident-hot-loop
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from harness.control_plane import ControlPlane, start_control_plane
from harness.recording import record_scenarios
from harness.scenarios import SCENARIO_INFO, SCENARIOS, SLOW_PERIOD, scenario_of

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "captures"
Event = dict[str, Any]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only",
        nargs="+",
        action="extend",
        metavar="NAME",
        choices=list(SCENARIO_INFO),
        help="scenarios to record (repeatable; the separate ones, incident-* and cascade-*, only when named)",
    )
    parser.add_argument(
        "--slow-period", type=float, default=SLOW_PERIOD, help="seconds between fight-slow's writes (default 50)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for <scenario>.jsonl")
    parser.add_argument("--workdir", type=Path, help="control plane workdir (default: a temp dir, removed on success)")
    return parser.parse_args(argv)


def write_jsonl(path: Path, events: Sequence[Event]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(orjson.dumps(event) + b"\n" for event in events))
    tmp.replace(path)


def etcd_version(cp: ControlPlane) -> str:
    proc = subprocess.run([str(cp.bin_dir / "etcd"), "--version"], capture_output=True, text=True, check=False)
    first = proc.stdout.strip().splitlines()[:1]
    return first[0].removeprefix("etcd Version: ") if first else "unknown"


def write_readme(
    out: Path, *, server: str, etcd: str, command: str, names: list[str], seconds: float, slow_period: float
) -> None:
    rows = []
    for path in sorted(out.glob("*.jsonl")):
        info = SCENARIO_INFO.get(path.stem)
        expect, summary = (info.expect, info.summary) if info else ("?", "?")
        count = sum(1 for line in path.read_bytes().splitlines() if line.strip())
        rows.append(f"| `{path.name}` | {expect} | {count} | {summary} |")
    recorded = "all scenarios" if set(names) == set(SCENARIOS) else ", ".join(f"`{n}`" for n in names)
    text = f"""# Scenario captures

Real watch events recorded from a real etcd {etcd} + kube-apiserver {server}, with that release's own
kube-controller-manager (each controller with its own service account) and kubectl, by
`scripts/record_captures.py`, which starts the control plane of `harness/control_plane.py`, lists and then watches
configmaps, deployments, replicasets, leases, validatingwebhookconfigurations, widgets.example.com and
horizontalpodautoscalers (their `autoscaling/v1` view, which carries the HPA's conditions in annotations)
cluster-wide, and runs the scenarios of `harness/scenarios.py` concurrently, each in its own namespace named after it
(the `incident-*` scenarios, one root cause on many objects, in several: `<scenario>-a`, `-b`, ...). The v1.20
recordings kept as compatibility fixtures are in `v1.20/`.

Format: JSON Lines, one watch event per line, in the order received:
`{{"type": "ADDED|MODIFIED|DELETED", "object": {{...full object, managedFields included...}},
"observedAt": "<RFC 3339, microseconds, Z>"}}`. BOOKMARK events are not kept. A file holds every event of
its scenario's namespaces from each namespace's first object on, including the controller manager's
(`kube-root-ca.crt` ConfigMaps, Deployment status, ReplicaSets); `fight-cabundle.jsonl` also holds the
cluster-scoped ValidatingWebhookConfiguration `fightwatch-test-validate`. On this release a write through the
`scale` subresource (`fight-scale-vs-apply`'s `kubectl scale`, `fight-hpa-vs-apply`'s HorizontalPodAutoscaler) is an
`Update` entry with `subresource: scale` and no `time`, which owns `spec.replicas`; a write through the `status`
subresource one with `subresource: status`. Every write that changes the object stamps its writer's entry with the
write's second (two writes in one second leave the second's stamp as it was); an object with more than 10 update
managers has the oldest merged into `ancient-changes` (`fight-ancient-changes`), and the first server-side apply of
an object without managedFields gives what it had to `before-first-apply` (`fight-before-first-apply`).

Last recording: {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}, {recorded}, fight-slow period
{slow_period:g} s, {seconds:.0f} s in all:

    {command}

| file | expected verdict | events | what happens |
|---|---|---|---|
{chr(10).join(rows)}
"""
    (out / "README.md").write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names: list[str] = args.only or list(SCENARIOS)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fightwatch-record-"))
    started = time.monotonic()

    cp = start_control_plane(workdir)
    try:
        print(f"control plane up at {cp.url} (workdir {workdir})", file=sys.stderr)
        cp.start_controller_manager()
        events, version = asyncio.run(record_scenarios(cp, names, slow_period=args.slow_period))
        etcd = etcd_version(cp)
    except BaseException:
        print(f"recording failed; control plane logs kept in {workdir}", file=sys.stderr)
        raise
    finally:
        cp.stop()
    seconds = time.monotonic() - started

    by_scenario: dict[str, list[Event]] = {name: [] for name in names}
    for event in events:
        scenario = scenario_of(event["object"])
        if scenario in by_scenario:
            by_scenario[scenario].append(event)
    for name, scenario_events in by_scenario.items():
        if not scenario_events:
            raise RuntimeError(f"{name}: recorded no events")
    for name, scenario_events in by_scenario.items():
        write_jsonl(args.out / f"{name}.jsonl", scenario_events)
        print(f"{len(scenario_events):5d}  {args.out / name}.jsonl")
    command = shlex.join([".venv/bin/python", "scripts/record_captures.py", *sys.argv[1:]])
    write_readme(
        args.out,
        server=str(version.get("gitVersion")),
        etcd=etcd,
        command=command,
        names=names,
        seconds=seconds,
        slow_period=args.slow_period,
    )
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"recorded {len(names)} scenarios in {seconds:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
