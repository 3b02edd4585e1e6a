#!/usr/bin/env python3
"""Record the audit fixtures: real audit events (and the watch events of the same run) from a real etcd +
kube-apiserver (+ kube-controller-manager) of a pinned Kubernetes release while the clients of
`harness/audit_scenarios.py` race.

Starts a throw-away control plane of `--release` (`current`, the default: v1.37.2; or `oldest`) with the audit log
backend (the policy of `audit_scenarios.policy`: each scenario's namespace at Metadata level, its `-full` twin at
RequestResponse level, its `-omf` twin at RequestResponse level with omitManagedFields), and kube-controller-manager
for `hpa-fight`; gives every client a ServiceAccount, a Pod and a token bound to it; runs every scenario in its
namespaces at once under a Recorder watching ConfigMaps and Deployments, and writes

  <out>/<scenario>.metadata.jsonl              the namespace's audit events (but the harness admin's), Metadata level
  <out>/<scenario>.request-response.jsonl      the same at RequestResponse level (bodies)
  <out>/<scenario>.omit-managed-fields.jsonl   the same at RequestResponse level without managedFields in bodies
  <out>/<scenario>.watch.jsonl                 the watch events of its namespaces ({"type","object","observedAt"})

  .venv/bin/python scripts/record_audit.py            # about 2 minutes (hpa-fight runs for 75 s)
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson

from harness import audit_scenarios as scenarios
from harness.control_plane import RELEASES

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "audit"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the fixtures")
    parser.add_argument("--workdir", type=Path, help="control plane workdir (default: a temp dir, removed on success)")
    parser.add_argument("--release", choices=RELEASES, default="current", help="the pinned Kubernetes release")
    args = parser.parse_args(argv)
    names = list(scenarios.SCENARIOS)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fightwatch-audit-"))
    cp = scenarios.start(workdir, names, release=args.release)
    try:
        events, version = asyncio.run(scenarios.record(cp, names))
        assert cp.audit_log is not None
        lines = scenarios.wait_for_log(cp.audit_log, names)
    except BaseException:
        print(f"recording failed; control plane logs kept in {workdir}", file=sys.stderr)
        raise
    finally:
        cp.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        for suffix, level in scenarios.VARIANTS.items():
            ns = name + suffix
            chosen = scenarios.scenario_lines(lines, ns)
            if not chosen:
                raise RuntimeError(f"{ns}: no audit events recorded")
            (args.out / f"{name}.{level}.jsonl").write_bytes(b"\n".join(chosen) + b"\n")
            print(f"{len(chosen):5d}  {name}.{level}.jsonl")
        own = {name + suffix for suffix in scenarios.VARIANTS}
        watched = [e for e in events if e["object"]["metadata"].get("namespace") in own]
        (args.out / f"{name}.watch.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in watched))
        print(f"{len(watched):5d}  {name}.watch.jsonl")
    command = shlex.join([".venv/bin/python", "scripts/record_audit.py", *(argv if argv is not None else sys.argv[1:])])
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    print(f"recorded {len(names)} scenarios from kube-apiserver {version.get('gitVersion')} on {stamp}: {command}")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
