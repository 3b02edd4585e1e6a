"""Test scaffolding standing in for `fightwatch run` until it lands: watch → engine → metrics + delivery.

A Recorder (a real list + watch on the test kube-apiserver, raw JSON) collects events; a pump task feeds each
new one to the Engine as it arrives, hands the finding changes to `Metrics.on_changes` and `Delivery.submit`,
reports the event to the self-metrics as the watch loop will (`observe_event`), and advances the engine's
clock to the wall clock so quiet findings resolve. `/metrics` is served from the registry on a loopback
port, for a real Prometheus to scrape. The service replaces all of this with a few lines of wiring.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from watcher.config import DetectionSettings
from watcher.detection.engine import Engine
from watcher.model import FindingChange, parse_time
from watcher.sinks.delivery import Delivery
from watcher.sinks.metrics import Metrics, exposition
from watcher.sources.capture import to_event

from .control_plane import free_port
from .kube import Resource
from .recorder import Recorder

PUMP_INTERVAL = 0.1  # seconds between two looks at the recorder's new events


def _lag(obj: dict[str, Any], received: float) -> float | None:
    times = [e.get("time") for e in (obj.get("metadata", {}).get("managedFields") or []) if e.get("time")]
    return received - parse_time(max(times)) if times else None


class Pipeline:
    def __init__(
        self,
        watch_client: ApiClient,
        resources: Sequence[Resource],
        *,
        detection: DetectionSettings,
        metrics: Metrics,
        delivery: Delivery,
    ) -> None:
        self.recorder = Recorder(watch_client, resources)
        self.engine = Engine(detection, on_write=metrics.count_write)
        metrics.active = self.engine.active
        self.metrics = metrics
        self.delivery = delivery
        self.changes: list[FindingChange] = []
        self._kinds = {(r.api_version, r.kind): r for r in resources}
        self._seen = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.delivery.start()
        await self.recorder.start()
        self.metrics.set_resources([(_group(r), r.plural) for r in self.recorder.resources], [])
        self._task = asyncio.create_task(self._pump(), name="pipeline pump")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.recorder.stop()
        await self.delivery.stop(drain=1.0)

    def check(self) -> None:
        """Raise if the pump or a watch died."""
        if self._task is not None and self._task.done():
            self._task.result()

    async def _pump(self) -> None:
        while True:
            events = self.recorder.events
            while self._seen < len(events):
                doc = events[self._seen]
                self._seen += 1
                self._one(doc)
            self._hand_over(self.engine.advance(time.time()))
            self.metrics.set_tracked(self.engine.tracked_objects)
            await asyncio.sleep(PUMP_INTERVAL)

    def _one(self, doc: dict[str, Any]) -> None:
        started = time.perf_counter()
        event = to_event(doc)
        if event is None:
            return
        self._hand_over(self.engine.process(event))
        obj = doc["object"]
        resource = self._kinds[(obj.get("apiVersion", ""), obj.get("kind", ""))]
        received = parse_time(str(doc["observedAt"]))
        self.metrics.observe_event(
            (_group(resource), resource.plural),
            str(doc["type"]),
            duration=time.perf_counter() - started,
            lag=_lag(obj, received),
            received_at=received,
        )

    def _hand_over(self, changes: list[FindingChange]) -> None:
        if changes:
            self.changes.extend(changes)
            self.metrics.on_changes(changes)
            self.delivery.submit(changes)


def _group(resource: Resource) -> str:
    group, _, _ = resource.api_version.rpartition("/")
    return group


async def serve_metrics(registry: CollectorRegistry) -> tuple[web.AppRunner, int]:
    """`GET /metrics` of `registry` on a free loopback port, as the service's server will expose it."""

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = exposition(registry, request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


def new_metrics(settings: Any = None) -> tuple[CollectorRegistry, Metrics]:
    registry = CollectorRegistry()
    return registry, Metrics(registry, settings)
