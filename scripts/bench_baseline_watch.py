#!/usr/bin/env python3
"""The baseline of scripts/bench_live.py: the same watch done the standard kubernetes-asyncio way.

Lists, then follows `Watch().stream(...)` for ConfigMaps and Deployments cluster-wide; every event is
deserialized into kubernetes-asyncio's models (V1ConfigMap, V1Deployment), as the library does by default.
Records each event's resourceVersion and receive time (after deserialization); prints `ready` once both watches
run and `seen NAME` when an object whose name starts with the --marker prefix arrives; on SIGTERM writes
{"events": n, "times": [[resourceVersion, seconds], ...]} to --out and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from kubernetes_asyncio import client, config, watch


async def follow(list_fn: Any, times: list[tuple[str, float]], marker: str, ready: asyncio.Event) -> None:
    listing = await list_fn()
    stream = watch.Watch().stream(
        list_fn, resource_version=listing.metadata.resource_version, allow_watch_bookmarks=True
    )
    ready.set()
    async for event in stream:
        now = time.time()
        if event["type"] == "BOOKMARK":
            continue
        meta = event["object"].metadata
        times.append((meta.resource_version, now))
        if meta.name.startswith(marker):
            print(f"seen {meta.name}", flush=True)


async def main(args: argparse.Namespace) -> None:
    await config.load_kube_config(config_file=str(args.kubeconfig))
    times: list[tuple[str, float]] = []
    ready = [asyncio.Event(), asyncio.Event()]
    core, apps = client.CoreV1Api(), client.AppsV1Api()
    tasks = [
        asyncio.create_task(follow(core.list_config_map_for_all_namespaces, times, args.marker, ready[0])),
        asyncio.create_task(follow(apps.list_deployment_for_all_namespaces, times, args.marker, ready[1])),
    ]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await asyncio.gather(*(r.wait() for r in ready))
    print("ready", flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    args.out.write_bytes(orjson.dumps({"events": len(times), "times": times}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--marker", default="bench-marker-")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
