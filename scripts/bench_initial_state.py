#!/usr/bin/env python3
"""Measure what reading the current objects costs `fightwatch run`: streamed (WatchList) against listed in pages.

On a real etcd + kube-apiserver of the pinned current release, creates `--objects` ConfigMaps (~1 KB of data each,
two labels) in `--namespaces` namespaces, then, for each way in turn (`watch.watch_list` true, then false; reversed
every other run):

- start: `fightwatch run` (metadata only, delivery off) from start to /readyz 200: seconds, and its peak resident
  memory then (VmHWM) and resident memory (VmRSS);
- relist: with the watcher stopped (SIGSTOP), one more ConfigMap is written, etcd compacted and the API server
  restarted, so every watch resumes from an expired resourceVersion (410 Gone) and reads its objects again; the
  peak is reset first (`/proc/PID/clear_refs`), then read once /readyz is 200 and ConfigMaps were read twice.

The API server's peak is read too: from the watcher's start to its readiness, and from its restart (its own start
included) to the end of the relist.

  .venv/bin/python scripts/bench_initial_state.py --python "$(scripts/runtime-venv.sh)" \\
      --out bench-results/initial-state.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench.cluster_load import create_all
from harness.bench.process import reset_peak
from harness.bench.scale import configmaps, expire_watches, lists_done, memory_mib, namespace_of
from harness.control_plane import ControlPlane, start_control_plane
from harness.kube import Kube, new_api_client
from harness.watcher import Watcher

WAYS = {"stream": True, "list": False}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the interpreter fightwatch runs with")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="for fightwatch's process")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    return parser.parse_args(argv)


async def measure(cp: ControlPlane, kube: Kube, way: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start a watcher reading its objects `way`, then make it read them again; its memory at each."""
    config = {"watch": {"watch_list": WAYS[way]}, "delivery": {"events": {"enabled": False}}}
    env = dict(item.split("=", 1) for item in args.env)
    watcher = Watcher(workdir, kubeconfig=cp.kubeconfig, config=config, record=False, env=env)
    watcher.argv[0] = args.python
    reset_peak(cp.pid("kube-apiserver"))
    started = time.monotonic()
    await watcher.start()
    try:
        await watcher.wait_ready(deadline=600)
        ready_s = time.monotonic() - started
        pid = watcher.pid
        at_start = memory_mib(pid)
        server_at_start = memory_mib(cp.pid("kube-apiserver"))
        reset_peak(pid)
        watcher.pause()
        try:
            await expire_watches(cp, kube, f"moved-{way}-{pid}")
        finally:
            watcher.resume()
        relist_started = time.monotonic()
        await watcher.poll_async(lambda: lists_done(watcher, 2), what="the relist", deadline=600)
        relist_s = time.monotonic() - relist_started
        at_relist = memory_mib(pid)
        server_at_relist = memory_mib(cp.pid("kube-apiserver"))  # (since its restart: its own start included)
    finally:
        await watcher.stop(signal.SIGTERM)
    return {
        "way": way,
        "ready_s": round(ready_s, 2),
        "start_peak_mib": round(at_start["VmHWM"], 1),
        "ready_rss_mib": round(at_start["VmRSS"], 1),
        "relist_s": round(relist_s, 2),
        "relist_peak_mib": round(at_relist["VmHWM"], 1),
        "after_relist_rss_mib": round(at_relist["VmRSS"], 1),
        "apiserver_start_peak_mib": round(server_at_start["VmHWM"], 1),
        "apiserver_relist_peak_mib": round(server_at_relist["VmHWM"], 1),
    }


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-initial-") as tmp:
        cp = start_control_plane(Path(tmp) / "cp")
        try:
            client = await new_api_client(cp.kubeconfig)
            try:
                kube = Kube(client)
                began = time.monotonic()
                namespaces = [namespace_of(n, args.namespaces) for n in range(args.namespaces)]
                objects = configmaps(args.objects, args.namespaces)
                await create_all(kube, namespaces, objects, manager="bench-setup")
                print(f"{args.objects} ConfigMaps in {time.monotonic() - began:.0f} s", file=sys.stderr)
                runs = []
                for run in range(args.runs):
                    order = list(WAYS) if run % 2 == 0 else list(reversed(WAYS))
                    for way in order:
                        result = await measure(cp, kube, way, args, Path(tmp) / f"{way}-{run}")
                        runs.append({"run": run, **result})
                        print(json.dumps(runs[-1]), file=sys.stderr)
            finally:
                await client.close()
        finally:
            cp.stop()
    keys = (
        "ready_s",
        "start_peak_mib",
        "ready_rss_mib",
        "relist_s",
        "relist_peak_mib",
        "after_relist_rss_mib",
        "apiserver_start_peak_mib",
        "apiserver_relist_peak_mib",
    )
    median = {way: {k: statistics.median(r[k] for r in runs if r["way"] == way) for k in keys} for way in WAYS}
    print(f"{'median of ' + str(args.runs):<28}" + "".join(f"{way:>10}" for way in WAYS))
    for key in keys:
        print(f"{key:<28}" + "".join(f"{median[way][key]:>10.2f}" for way in WAYS))
    if args.out:
        document = {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "objects": args.objects,
            "namespaces": args.namespaces,
            "server": cp.version,
            "env": args.env,
            "runs": runs,
            "median": median,
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
