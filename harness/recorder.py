"""Record every watch event of a few resources, cluster-wide, as full JSON objects.

    recorder = Recorder(api_client)          # its own ApiClient: each watch holds a connection
    await recorder.start()                   # lists, then watches from the list's resourceVersion
    ...                                      # scenarios write
    await recorder.sync()                    # barrier: every write made before this is now recorded
    await recorder.stop()
    recorder.events                          # [{"type", "object", "observedAt"}, ...] in arrival order

Events are recorded from the list's resourceVersion onward, so every object created after start() is seen
from its ADDED event on; objects that existed before start() are not recorded (no synthetic ADDED).
BOOKMARK events only advance the resourceVersion. A watch the server closes (timeoutSeconds) is re-opened
from the last resourceVersion seen; a watch that expired (410 Gone) would have lost events and raises.

sync() writes one marker object per watched resource (namespace ``fightwatch-recorder``, or a
``fightwatch-recorder-barrier-`` name when cluster-scoped) and waits until each watch delivers it: a watch
delivers its resource's events in resourceVersion order, so everything written before is recorded by
then. Markers are never recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from .kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    HPAS_V1,
    JSON,
    LEASES,
    REPLICASETS,
    VALIDATING_WEBHOOKS,
    WIDGETS,
    Kube,
    Resource,
)
from .lifecycle import Started

DEFAULT_RESOURCES: tuple[Resource, ...] = (
    CONFIGMAPS,
    DEPLOYMENTS,
    REPLICASETS,
    LEASES,
    VALIDATING_WEBHOOKS,
    WIDGETS,  # needs the widgets.example.com CRD (scenarios.ensure_widget_crd) before start()
    HPAS_V1,  # the autoscaling/v1 view: the HPA's conditions in an annotation, where a metadata watch sees them
)
BARRIER_NAMESPACE = "fightwatch-recorder"
BARRIER_PREFIX = "fightwatch-recorder-barrier-"
BARRIER_MANAGER = "fightwatch-recorder"
WATCH_TIMEOUT_SECONDS = 300  # the server ends each watch after this long; we re-watch
RECONNECTS = 5  # consecutive failed (re)connections before a watch gives up
SYNC_DEADLINE = 30.0


def observed_at() -> str:
    """Now, RFC 3339 with microseconds, UTC ("Z")."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _is_marker(obj: JSON) -> bool:
    metadata = obj.get("metadata", {})
    return metadata.get("namespace") == BARRIER_NAMESPACE or str(metadata.get("name", "")).startswith(BARRIER_PREFIX)


def _marker(resource: Resource) -> JSON:
    metadata: JSON = {"generateName": BARRIER_PREFIX}
    if resource.namespaced:
        metadata["namespace"] = BARRIER_NAMESPACE
    obj: JSON = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": metadata}
    if resource.kind in {"Deployment", "ReplicaSet"}:
        labels = {"fightwatch-recorder-barrier": resource.plural}
        obj["spec"] = {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.2"}]},
            },
        }
    elif resource.kind == "HorizontalPodAutoscaler":  # (scaling nothing: no such Deployment)
        target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": BARRIER_PREFIX + "none"}
        obj["spec"] = {"scaleTargetRef": target, "minReplicas": 1, "maxReplicas": 1}
    elif resource.kind == "Service":
        obj["spec"] = {"ports": [{"port": 80}]}
    elif resource.kind == "EndpointSlice":
        obj["addressType"], obj["endpoints"] = "IPv4", []
    elif resource.kind == "Kustomization":  # (suspended: Flux leaves it alone)
        source = {"kind": "ExternalArtifact", "name": BARRIER_PREFIX + "none"}
        obj["spec"] = {"interval": "1h", "sourceRef": source, "prune": False, "suspend": True}
    return obj


class WatchError(RuntimeError):
    """A watch broke in a way that loses events."""


class Recorder(Started):
    def __init__(
        self,
        api_client: ApiClient,
        resources: Sequence[Resource] = DEFAULT_RESOURCES,
        *,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        self.kube = Kube(api_client)
        self.resources = tuple(resources)
        self.watch_timeout_seconds = watch_timeout_seconds
        self.events: list[JSON] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._waiting: dict[tuple[str, str], asyncio.Future[None]] = {}  # (plural, marker name) -> seen
        self._seen_markers: set[tuple[str, str]] = set()

    async def start(self) -> None:
        """List each resource, then watch it from the list's resourceVersion; return once all watch."""
        if self._tasks:
            raise RuntimeError("recorder already started")
        await self.kube.ensure_namespace(BARRIER_NAMESPACE, manager=BARRIER_MANAGER)
        established: list[asyncio.Event] = []
        for resource in self.resources:
            listing = await self.kube.get(resource.path(), query={"limit": 1})
            event = asyncio.Event()
            established.append(event)
            task = asyncio.create_task(
                self._watch(resource, listing["metadata"]["resourceVersion"], event),
                name=f"watch {resource.plural}",
            )
            self._tasks.append(task)
        await self._race([asyncio.create_task(event.wait()) for event in established])

    async def sync(self) -> None:
        """Write a marker per resource and wait until every watch has delivered its marker."""
        self._check()
        futures: list[asyncio.Future[None]] = []
        loop = asyncio.get_running_loop()
        for resource in self.resources:
            created = await self.kube.create(
                resource.path(BARRIER_NAMESPACE), _marker(resource), manager=BARRIER_MANAGER
            )
            key = (resource.plural, created["metadata"]["name"])
            if key in self._seen_markers:  # the watch can deliver it before the POST's answer arrives
                continue
            future: asyncio.Future[None] = loop.create_future()
            self._waiting[key] = future
            futures.append(future)
        await self._race(futures)

    async def stop(self) -> None:
        """Stop every watch; raise if one of them had failed."""
        for task in self._tasks:
            task.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        failures = [r for r in results if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
        if failures:
            raise failures[0]

    def _check(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise WatchError(f"{task.get_name()} failed") from task.exception()

    async def _race(self, awaitables: Sequence[asyncio.Future[Any]]) -> None:
        """Wait for all awaitables within `SYNC_DEADLINE`, but raise as soon as a watch task fails; cancel any left."""
        pending: set[asyncio.Future[Any]] = set(awaitables)
        watches: set[asyncio.Future[Any]] = set(self._tasks)
        try:
            async with asyncio.timeout(SYNC_DEADLINE):
                while pending:
                    done, _ = await asyncio.wait(pending | watches, return_when=asyncio.FIRST_COMPLETED)
                    if done & watches:
                        self._check()
                        names = [t.get_name() for t in self._tasks if t in done]
                        raise WatchError(f"a watch ended unexpectedly: {names}")
                    pending -= done
        finally:
            for awaitable in awaitables:
                awaitable.cancel()

    async def _watch(self, resource: Resource, resource_version: str, established: asyncio.Event) -> None:
        failures = 0
        while True:
            query: dict[str, str | int | bool] = {
                "watch": True,
                "resourceVersion": resource_version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": self.watch_timeout_seconds,
            }
            try:
                response = await self.kube.open("GET", resource.path(), query=query, request_timeout=None)
            except (aiohttp.ClientError, TimeoutError) as exc:
                failures += 1
                if failures >= RECONNECTS:
                    raise WatchError(f"cannot watch {resource.plural}: {exc}") from exc
                continue
            established.set()
            failures = 0
            try:
                async for line in response.content:
                    if line.strip():
                        resource_version = self._on_line(resource, line)
            except aiohttp.ClientPayloadError as exc:  # connection dropped mid-stream: re-watch
                failures += 1
                if failures >= RECONNECTS:
                    raise WatchError(f"watch of {resource.plural} keeps breaking: {exc}") from exc
            finally:
                response.release()

    def _on_line(self, resource: Resource, line: bytes) -> str:
        """Record one watch event line; return the resourceVersion to resume from."""
        stamp = observed_at()
        event = orjson.loads(line)
        kind, obj = event["type"], event["object"]
        if kind == "ERROR":
            code = obj.get("code")
            raise WatchError(f"watch of {resource.plural} failed (HTTP {code}, events may be lost): {obj}")
        resource_version: str = obj["metadata"]["resourceVersion"]
        if kind == "BOOKMARK":
            return resource_version
        if _is_marker(obj):
            key = (resource.plural, obj["metadata"]["name"])
            self._seen_markers.add(key)
            future = self._waiting.pop(key, None)
            if future is not None and not future.done():
                future.set_result(None)
            return resource_version
        self.events.append({"type": kind, "object": obj, "observedAt": stamp})
        return resource_version
