#!/usr/bin/env python3
"""fightwatch installed as a user installs it, timed on a real node (harness/node.py, harness/chart.py).

Measures, on one run of the node: the node's time from start to Ready (its binaries built already), the image
build (scripts/image.sh: warm unless its cache was emptied) and the image's size, `helm install` to every pod Ready
(two replicas, leader election, the audit webhook), `--failovers` deletions of the leader's pod (`kubectl delete
pod`, graceful) to another pod holding the Lease, and a rolling `helm upgrade` that changes the config to every pod
replaced and Ready, with the longest time the Lease was held by a pod already gone. Results go to
`--out` (default bench-results/node.json) and a table.

  .venv/bin/python scripts/bench_node.py                # as root, on a machine like CI's
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import REPO_ROOT
from harness.bench.table import aligned
from harness.chart import (
    AUDIT_POLICY,
    CHART,
    NAMESPACE,
    RELEASE,
    Cluster,
    audit_webhook_kubeconfig,
    poll,
    prepare,
    values,
)
from harness.image import build_image
from harness.node import running_node


def _failover(c: Cluster) -> float:
    leader = c.leader()
    started = time.monotonic()
    c.kubectl("delete", "pod", str(leader), "-n", NAMESPACE, "--wait=false")

    def another() -> str | None:
        holder = c.leader()
        return holder if holder not in (None, leader) else None

    poll(another, what="a new leader", node=c.node)
    took = time.monotonic() - started
    c.rolled_out(f"deployment/{RELEASE}")
    return took


def _upgrade(c: Cluster, n: int) -> tuple[float, float]:
    """Seconds from `helm upgrade` to the rollout's end, and the longest the Lease was held by a pod already gone."""
    stop = threading.Event()
    orphaned: list[float] = [0.0]

    def watch_lease() -> None:
        since = None
        while not stop.is_set():
            holder, pods = c.leader(), {p["metadata"]["name"] for p in c.pods()}
            now = time.monotonic()
            if holder in pods:
                since = None
            else:
                since = since or now
                orphaned[0] = max(orphaned[0], now - since)
            time.sleep(0.2)  # sampling interval

    watcher = threading.Thread(target=watch_lease)
    watcher.start()
    started = time.monotonic()
    try:
        changed = values(c, config={"detection": {"resolve": {"after": f"{30 + n}m"}}})
        c.helm_run("upgrade", RELEASE, str(CHART), "-f", str(changed))
        c.rolled_out(f"deployment/{RELEASE}")
        took = time.monotonic() - started
        poll(lambda: c.leader() in {p["metadata"]["name"] for p in c.pods()} or None, what="a leader", node=c.node)
    finally:
        stop.set()
        watcher.join()
    return took, orphaned[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--upgrades", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results" / "node.json")
    args = parser.parse_args()
    helm = subprocess.run([str(REPO_ROOT / "scripts" / "helm.sh")], capture_output=True, text=True, check=True)
    started = time.monotonic()
    image = build_image()
    image_seconds = time.monotonic() - started
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "image": image.name, "image_bytes": image.size,
                              "image_build_seconds": round(image_seconds, 1)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        workdir = Path(tmp)
        started = time.monotonic()
        with running_node(workdir, audit_policy=AUDIT_POLICY, audit_webhook=audit_webhook_kubeconfig(workdir)) as node:
            result["node_ready_seconds"] = round(time.monotonic() - started, 1)
            c = prepare(node, helm.stdout.strip(), image.name, image.archive)
            started = time.monotonic()
            c.helm_run("install", RELEASE, str(CHART), "-f", str(values(c)))
            c.rolled_out(f"deployment/{RELEASE}")
            result["install_to_ready_seconds"] = round(time.monotonic() - started, 1)
            failovers = [_failover(c) for _ in range(args.failovers)]
            result["failover_seconds"] = [round(s, 1) for s in failovers]
            upgrades = [_upgrade(c, n) for n in range(1, args.upgrades + 1)]
            result["upgrade_seconds"] = [round(s, 1) for s, _ in upgrades]
            result["upgrade_leader_gone_seconds"] = [round(g, 1) for _, g in upgrades]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    rows = [
        ("image", f"{image.name}, {image.size / 2**20:.0f} MiB, built in {image_seconds:.0f} s"),
        ("node: start to Ready", f"{result['node_ready_seconds']} s"),
        ("helm install to both pods Ready", f"{result['install_to_ready_seconds']} s"),
        (
            "leader's pod deleted to a new leader (median, max)",
            f"{statistics.median(failovers):.1f} s, {max(failovers):.1f} s",
        ),
        ("rolling upgrade to every pod replaced and Ready", ", ".join(f"{s:.1f} s" for s, _ in upgrades)),
        ("longest a gone pod held the Lease during the upgrade", ", ".join(f"{g:.1f} s" for _, g in upgrades)),
    ]
    print(aligned([("measurement", "result"), *rows]))
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
