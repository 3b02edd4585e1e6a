#!/usr/bin/env python3
"""What `kubectl fightwatch` costs at start, per identity, on a real etcd + kube-apiserver (the pinned current
release, or `$FIGHTWATCH_KUBERNETES`) with its kube-controller-manager.

Creates `--configmaps` ConfigMaps (~1 KB of data each) in `--namespaces` namespaces, then scans for `--duration`
seconds as three users, one after another: `admin` (system:masters), `viewer` (the built-in `view` ClusterRole,
cluster-wide) and `tenant` (`view` in one namespace, its kubeconfig's context namespace). For each: seconds from
start to "Watching" (every watch listed and open), the access reviews and lists/watches it sent (from the API
server's audit log), the resource types watched and not, its CPU seconds and peak resident memory (VmHWM). No
write load: this measures the start, what an engineer waits for.

  .venv/bin/python scripts/bench_scan.py                      # 2,000 ConfigMaps in 4 namespaces, 15 s scans
  .venv/bin/python scripts/bench_scan.py --configmaps 20000 --out bench-results/scan-20k.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.bench.process import cpu_seconds, memory_kib
from harness.bench.table import aligned
from harness.control_plane import ControlPlane, start_control_plane
from harness.kube import CONFIGMAPS, Kube, new_api_client

POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}
VIEWER, TENANT = "viewer", "tenant"
IN_FLIGHT = 32
FIGHTWATCH = Path(sys.executable).parent / "fightwatch"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configmaps", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--duration", type=int, default=15, help="seconds each scan runs")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    return parser.parse_args(argv)


async def populate(kube: Kube, args: argparse.Namespace) -> None:
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def create(ns: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"payload": "x" * 1000}}
        async with limit:
            await kube.create(CONFIGMAPS.path(ns), body, manager="bench-setup")

    for n in range(args.namespaces):
        await kube.ensure_namespace(f"bench-{n}")
    await asyncio.gather(*(create(f"bench-{i % args.namespaces}", f"cm-{i}") for i in range(args.configmaps)))


async def grant(kube: Kube) -> None:
    view = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for collection, kind, name, user in (
        (f"{rbac}/clusterrolebindings", "ClusterRoleBinding", "viewer", VIEWER),
        (f"{rbac}/namespaces/bench-0/rolebindings", "RoleBinding", "tenant", TENANT),
    ):
        subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
        binding = {
            "apiVersion": rbac[6:],
            "kind": kind,
            "metadata": {"name": name},
            "roleRef": view,
            "subjects": [subject],
        }
        await kube.ensure(collection, binding, manager="bench-setup")


async def until_view_is_aggregated(kube: Kube) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        role = await kube.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/view")
        if role.get("rules"):
            return
        await asyncio.sleep(0.5)  # polling the controller manager's aggregation, not waiting blindly
    raise TimeoutError("the view ClusterRole was not aggregated within 120 s")


def scan(cp: ControlPlane, name: str, kubeconfig: Path, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One scan as `name`: its start, requests, CPU and memory."""
    assert cp.audit_log is not None
    audit_from = cp.audit_log.stat().st_size
    err = workdir / f"{name}.err"
    started = time.monotonic()
    with err.open("w") as stderr:
        process = subprocess.Popen(
            [str(FIGHTWATCH), "scan", "--for", f"{args.duration}s", "-o", "json"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    ready_at = None
    peak = cpu = 0.0
    while process.poll() is None:
        if ready_at is None and "Watching " in err.read_text():
            ready_at = time.monotonic() - started
        try:
            peak = max(peak, memory_kib(process.pid)["VmHWM"] / 1024)
            cpu = cpu_seconds(process.pid)
        except (FileNotFoundError, KeyError, ProcessLookupError):
            break
        time.sleep(0.05)  # sampling the process, not waiting for it
    process.wait()
    requests: Counter[str] = Counter()
    user = "fightwatch-admin" if name == "admin" else name
    with cp.audit_log.open("rb") as log:
        log.seek(audit_from)
        for line in log:
            event = json.loads(line)
            if event["user"]["username"] != user or event["stage"] != "ResponseComplete":
                continue
            resource = (event.get("objectRef") or {}).get("resource", "")
            key = "review" if resource in ("selfsubjectaccessreviews", "selfsubjectreviews") else event["verb"]
            requests[key] += 1
    text = err.read_text()
    watched = next((line for line in text.splitlines() if line.startswith("Watching ")), "")
    return {
        "identity": name,
        "exit": process.returncode,
        "seconds_to_watching": None if ready_at is None else round(ready_at, 2),
        "watching": watched,
        "not_watched": next((line for line in text.splitlines() if line.startswith("Not watched")), ""),
        "requests": dict(requests),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mib": round(peak, 1),
    }


async def benchmark(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cp = start_control_plane(workdir / "cp", audit_policy=POLICY, users=(VIEWER, TENANT))
    try:
        cp.start_controller_manager()
        client = await new_api_client(cp.kubeconfig)
        kube = Kube(client)
        await populate(kube, args)
        await grant(kube)
        await until_view_is_aggregated(kube)
        await client.close()
        tenant = cp.kubeconfig_for(TENANT)
        set_namespace = [str(cp.kubectl), "config", "set-context", "--current", "--namespace=bench-0",
                         f"--kubeconfig={tenant}"]  # fmt: skip
        await asyncio.to_thread(subprocess.run, set_namespace, check=True, capture_output=True)
        identities = [("admin", cp.kubeconfig), (VIEWER, cp.kubeconfig_for(VIEWER)), (TENANT, tenant)]
        results = [await asyncio.to_thread(scan, cp, name, kc, args, workdir) for name, kc in identities]
        asked = [str(cp.kubectl), "version", "--client", "-o", "json"]
        version = (await asyncio.to_thread(subprocess.run, asked, capture_output=True, text=True, check=True)).stdout
    finally:
        cp.stop()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "kubernetes": json.loads(version)["clientVersion"]["gitVersion"],
        "configmaps": args.configmaps,
        "namespaces": args.namespaces,
        "duration": args.duration,
        "scans": results,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        result = asyncio.run(benchmark(args, Path(tmp)))
    rows = [("identity", "to watching (s)", "reviews", "lists", "watches", "CPU s", "peak MiB", "exit")]
    for s in result["scans"]:
        r = s["requests"]
        counts = [str(r.get(k, 0)) for k in ("review", "list", "watch")]
        rows.append((s["identity"], str(s["seconds_to_watching"]), *counts, str(s["cpu_seconds"]),
                     str(s["peak_rss_mib"]), str(s["exit"])))  # fmt: skip
    print(f"{result['configmaps']:,} ConfigMaps, Kubernetes {result['kubernetes']}, {result['date']}")
    print(aligned(rows))
    for s in result["scans"]:
        print(f"{s['identity']}: {s['watching']} {s['not_watched']}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
