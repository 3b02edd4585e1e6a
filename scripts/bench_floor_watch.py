#!/usr/bin/env python3
"""The floor of scripts/bench_live.py: the same watch with fightwatch's chosen transport and nothing else.

The least a watcher built on fightwatch's dependencies holds while watching ConfigMaps and Deployments
cluster-wide: kubernetes-asyncio's kubeconfig loading and its `ApiClient` with raw responses (`_preload_content=
False`: no models), metadata only (`as=PartialObjectMetadataList` / `as=PartialObjectMetadata`), on uvloop's event
loop, as `fightwatch run` does. Each resource is listed in pages of 100, then watched from the list's
resourceVersion with bookmarks; each line is parsed with orjson and counted as received. No object is kept.

kubernetes-asyncio is imported through fightwatch's import hook (`watcher.sources.lazy_imports`, the standard
library only): its package `__init__`s import every generated API class and model (36 MiB), which no watcher of raw
JSON needs. The kubeconfig loader imports PyYAML, so PyYAML is part of the floor.

`--with-libraries` also imports, and uses once, the other libraries `fightwatch run` requires: pydantic (a model),
prometheus-client (a Counter), structlog (a logger, to stderr) and PyYAML (a `safe_load`): the floor of the whole
chosen dependency set.

Same contract as scripts/bench_baseline_watch.py: records each event's resourceVersion and receive time (in two
arrays of 8-byte numbers, so that the record adds little to what is measured); prints `ready` once both watches are
open and `seen NAME` when an object whose name starts with the --marker prefix arrives; on SIGTERM writes
{"events": n, "times": [[resourceVersion, seconds], ...]} to --out and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from array import array
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import orjson
import uvloop

from watcher.sources import lazy_imports

lazy_imports.install()  # (before kubernetes-asyncio is imported)

from kubernetes_asyncio.client import ApiClient, Configuration  # noqa: E402
from kubernetes_asyncio.config import load_kube_config  # noqa: E402

ACCEPT_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
ACCEPT_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PATHS = ("/api/v1/configmaps", "/apis/apps/v1/deployments")
PAGE = "100"  # objects a list page: 2,000 listed in pages of 500 left 5 MiB more heap behind, in pages of 100 1 MiB


class Record:
    """The events received: their count, resourceVersions and receive times."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.versions = array("q")  # (etcd's revisions: whole numbers)
        self.times = array("d")

    def add(self, metadata: dict[str, Any], now: float) -> None:
        """Record an event's object, received at `now`; say `seen NAME` of a marker object."""
        self.versions.append(int(metadata["resourceVersion"]))
        self.times.append(now)
        name = metadata.get("name", "")
        if name.startswith(self.marker):
            print(f"seen {name}", flush=True)

    def dump(self) -> bytes:
        """Return the record as JSON: {"events": n, "times": [[resourceVersion, seconds], ...]}."""
        times = [[str(version), now] for version, now in zip(self.versions, self.times, strict=True)]
        return orjson.dumps({"events": len(times), "times": times})


async def get(api: ApiClient, path: str, query: list[tuple[str, str]], accept: str) -> Any:
    """Send GET; return the unread aiohttp response (raise on a non-2xx answer)."""
    response = await api.call_api(
        path,
        "GET",
        query_params=query,
        header_params={"Accept": accept},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    if response.status >= 300:
        body = await response.read()
        response.release()
        raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:300]!r}")
    return response


async def listed_version(api: ApiClient, path: str) -> str:
    """List the objects' metadata, a page at a time; return the list's resourceVersion."""
    token = ""
    while True:
        query = [("limit", PAGE), *([("continue", token)] if token else [])]
        response = await get(api, path, query, ACCEPT_METADATA_LIST)
        body = await response.read()
        response.release()
        metadata = orjson.loads(body)["metadata"]
        token = metadata.get("continue", "")
        if not token:
            return str(metadata["resourceVersion"])


async def follow(api: ApiClient, path: str, record: Record, ready: asyncio.Event) -> None:
    """List, then watch from the list's version, again from the last version whenever the server ends the watch."""
    version = await listed_version(api, path)
    while True:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("resourceVersion", version)]
        response = await get(api, path, query, ACCEPT_METADATA)
        ready.set()
        pending = b""
        try:
            while chunk := await response.content.readany():
                *lines, pending = (pending + chunk).split(b"\n")
                now = time.time()
                for line in lines:
                    if not line:
                        continue
                    event = orjson.loads(line)
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        raise RuntimeError(f"watch {path}: {obj}")
                    metadata = obj["metadata"]
                    version = metadata["resourceVersion"]
                    if kind != "BOOKMARK":
                        record.add(metadata, now)
        finally:
            response.release()


async def unless_failed(waited: Awaitable[Any], tasks: list[asyncio.Task[None]]) -> None:
    """Wait for `waited`; raise the error of a watch that fails first."""
    waiting = asyncio.ensure_future(waited)
    await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        if task.done():
            waiting.cancel()
            task.result()


def use_libraries() -> None:
    """Import the rest of fightwatch's required libraries, and use each once."""
    import prometheus_client  # noqa: PLC0415
    import pydantic  # noqa: PLC0415
    import structlog  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    class Settings(pydantic.BaseModel):
        resources: list[str]
        page_size: int = 500

    settings = Settings.model_validate(yaml.safe_load("resources: [configmaps, deployments.apps]"))
    prometheus_client.Counter("floor_events", "Events received").inc()
    structlog.configure(  # (JSON lines, as the benchmark's fightwatch logs)
        processors=[structlog.processors.JSONRenderer()], logger_factory=structlog.PrintLoggerFactory(file=sys.stderr)
    )
    structlog.get_logger("floor").info("watching", resources=settings.resources)


async def main(args: argparse.Namespace) -> None:
    if args.with_libraries:
        use_libraries()
    configuration = Configuration()
    await load_kube_config(config_file=str(args.kubeconfig), client_configuration=configuration)
    record = Record(args.marker)
    ready = [asyncio.Event() for _ in PATHS]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with ApiClient(configuration) as api:
        tasks = [asyncio.create_task(follow(api, path, record, r)) for path, r in zip(PATHS, ready, strict=True)]
        await unless_failed(asyncio.gather(*(r.wait() for r in ready)), tasks)
        print("ready", flush=True)
        await unless_failed(stop.wait(), tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    args.out.write_bytes(record.dump())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--marker", default="bench-marker-")
    parser.add_argument("--with-libraries", action="store_true", help="also pydantic, prometheus-client, structlog")
    uvloop.run(main(parser.parse_args()))
    sys.exit(0)
