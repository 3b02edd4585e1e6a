#!/usr/bin/env python3
"""Record the real-fight fixtures: fights and benign patterns of `harness/real_fights.py` played by real programs on a
real control plane, with its watch events and its audit log.

Starts a throw-away control plane of the current pinned release with the audit log backend (Metadata level, as the
clouds' managed control planes log), kube-controller-manager with leader election and each controller's own service
account, then cert-manager's cainjector and Flux's kustomize-controller (built from Go modules: `harness.programs`),
and plays every scenario at once while a Recorder watches. Per scenario it writes

  <out>/<scenario>.watch.jsonl   the watch events of its objects ({"type", "object", "observedAt"})
  <out>/<scenario>.audit.jsonl   the audit events of its objects, every user's but the harness admin's

and `benign-control-plane.*` for the control plane's own namespaces (leader-election Leases, kube-root-ca.crt, ...).
Programs' versions: `<out>/versions.json`. With `--demo`, also the bundled demo (`watcher/data`): every scenario's
watch events in one capture (by observedAt), their audit events in one log, and how they were recorded.

  .venv/bin/python scripts/record_real_fights.py --demo   # about 80 s once the programs are built
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson

from harness import programs, real_fights
from harness.audit_scenarios import wait_for_marker
from harness.control_plane import ADMIN_USER, ControlPlane, start_control_plane
from harness.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    ENDPOINTS,
    HPAS,
    JSON,
    KUSTOMIZATIONS,
    LEASES,
    MUTATING_WEBHOOKS,
    REPLICASETS,
    SERVICES,
    VALIDATING_WEBHOOKS,
    new_api_client,
)
from harness.recorder import Recorder
from harness.recording import write_gzip_lines
from harness.stage import PERSON, Stage

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "real"
DEMO = REPO / "watcher" / "data"
WATCHED = (
    CONFIGMAPS,
    DEPLOYMENTS,
    REPLICASETS,
    HPAS,
    LEASES,
    SERVICES,
    ENDPOINTS,
    ENDPOINT_SLICES,
    VALIDATING_WEBHOOKS,
    MUTATING_WEBHOOKS,
    KUSTOMIZATIONS,
)
POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}
END_MARKER = "end-of-recording"


async def record(cp: ControlPlane, workdir: Path, names: Sequence[str]) -> tuple[list[JSON], JSON]:
    stage = await Stage.open(cp, workdir)
    watch_client = await new_api_client(cp.kubeconfig)
    try:
        version = await stage.admin.get("/version")
        async with Recorder(watch_client, WATCHED) as recorder:
            await stage.start_controllers()
            await real_fights.play(stage, names)
            await recorder.sync()
        await stage.admin.ensure_namespace(END_MARKER)
        return recorder.events, version
    finally:
        await watch_client.close()
        await stage.close()


def wait_for_log(log: Path, deadline: float = 30.0) -> list[bytes]:
    """The audit log's lines once it holds the end marker (an event is logged when its request completes)."""
    return wait_for_marker(log, f'"name":"{END_MARKER}"'.encode(), deadline=deadline)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the fixtures")
    parser.add_argument("--workdir", type=Path, help="control plane workdir (default: a temp dir, removed on success)")
    parser.add_argument("--only", action="append", choices=sorted(real_fights.SCENARIOS), help="play only these")
    parser.add_argument("--demo", action="store_true", help="also write the bundled demo (watcher/data)")
    args = parser.parse_args(argv)
    names = args.only or list(real_fights.SCENARIOS)
    for name in programs.PROGRAMS:  # built before the control plane starts: a build that fails stops here
        print(f"{name} {programs.version(name)}: {programs.binary(name)}", flush=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fightwatch-real-"))
    cp = start_control_plane(workdir, audit_policy=POLICY, users=[PERSON])
    try:
        cp.start_controller_manager(leader_elect=True)
        events, version = asyncio.run(record(cp, workdir, names))
        assert cp.audit_log is not None
        lines = wait_for_log(cp.audit_log)
    except BaseException:
        print(f"recording failed; logs kept in {workdir}", file=sys.stderr)
        raise
    finally:
        cp.stop()
    watch, audit = write(args.out, [*names, real_fights.BACKGROUND], events, lines)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    versions = {name: programs.version(name) for name in programs.PROGRAMS}
    versions["kubernetes"] = str(version.get("gitVersion"))
    (args.out / "versions.json").write_text(json.dumps({"recorded": stamp, **versions}, indent=2) + "\n")
    given = list(argv if argv is not None else sys.argv[1:])
    if "--workdir" in given:  # (where it ran: not how)
        del given[given.index("--workdir") : given.index("--workdir") + 2]
    command = shlex.join([".venv/bin/python", "scripts/record_real_fights.py", *given])
    if args.demo:
        made = {"recorded": stamp[:10], **versions, "command": command}
        write_demo(DEMO, [watch[n] for n in names], [audit[n] for n in names], made)
    print(f"recorded {len(names)} scenarios from kube-apiserver {version.get('gitVersion')} on {stamp}: {command}")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def write_demo(data: Path, watch: list[list[bytes]], audit: list[list[bytes]], record: JSON) -> None:
    """The bundled demo: every scenario's watch events in one capture, by their receive time, and their audit events in
    one log, by their completion time, as the API server logged them; and how they were recorded."""
    events = sorted((line for lines in watch for line in lines), key=lambda line: str(orjson.loads(line)["observedAt"]))
    logged = sorted(
        (line for lines in audit for line in lines), key=lambda line: str(orjson.loads(line)["stageTimestamp"])
    )
    print(f"{write_gzip_lines(data / 'demo-capture.jsonl.gz', events):6d}  {data / 'demo-capture.jsonl.gz'}")
    print(f"{write_gzip_lines(data / 'demo-audit.jsonl.gz', logged):6d}  {data / 'demo-audit.jsonl.gz'}")
    (data / "demo-capture.json").write_text(json.dumps(record, indent=2) + "\n")


def write(
    out: Path, names: Sequence[str], events: list[JSON], lines: list[bytes]
) -> tuple[dict[str, list[bytes]], dict[str, list[bytes]]]:
    """Write each scenario's watch and audit events; return them, by scenario."""
    out.mkdir(parents=True, exist_ok=True)
    watch: dict[str, list[bytes]] = {name: [] for name in names}
    for event in events:
        meta = event["object"]["metadata"]
        owner = real_fights.scenario_of(meta.get("namespace"), meta.get("name", ""))
        if owner in watch:
            watch[owner].append(orjson.dumps(event))
    audit: dict[str, list[bytes]] = {name: [] for name in names}
    for line in lines:
        event = orjson.loads(line)
        if (event.get("user") or {}).get("username") == ADMIN_USER:
            continue
        ref = event.get("objectRef") or {}
        if not ref:
            continue
        owner = real_fights.scenario_of(ref.get("namespace"), ref.get("name", ""))
        if owner in audit:
            audit[owner].append(line)
    for name in names:
        for suffix, chosen in ((".watch.jsonl", watch[name]), (".audit.jsonl", audit[name])):
            if not chosen:
                raise RuntimeError(f"{name}: nothing recorded for {suffix}")
            (out / f"{name}{suffix}").write_bytes(b"\n".join(chosen) + b"\n")
            print(f"{len(chosen):6d}  {name}{suffix}")
    return watch, audit


if __name__ == "__main__":
    sys.exit(main())
