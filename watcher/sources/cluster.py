"""Watch a whole cluster: one list-and-watch task per selected resource, kept in step with API discovery.

Discovery is re-read every `discovery_interval` (and soon after a watch finds its resource gone): a CRD
installed meanwhile gets a watch, a resource no longer served loses its watch, and its objects get DELETED
events so that the engine lets them go. A group version served in a new preferred version is watched there,
with what the old watch knew, so the switch is a relist and not a deletion. Each task fails and retries
alone: one resource that is forbidden or gone never stops the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from watcher.config import ShardingSettings, WatchSettings
from watcher.detection.attribution import Decoder
from watcher.model import ResourceKey
from watcher.sources.discovery import ApiResource, Target, discover, select
from watcher.sources.kube import KubeApi
from watcher.sources.watch import (
    Failure,
    Invalid,
    NamespaceFilter,
    OnEvent,
    ResourceWatch,
    RetryPolicy,
    State,
    WatchList,
    WatchObserver,
    classify,
    retry_delay,
)

log = structlog.get_logger("fightwatch.discovery")

# Which of the discovered resources to watch, and where (cluster-wide or in which namespaces).
Choose = Callable[[list[ApiResource]], Awaitable[list[Target]]]


@dataclass
class DiscoveryStatus:
    ok: bool = False  # the last discovery pass succeeded
    passes: int = 0
    errors: int = 0
    error: str = ""
    failed_groups: dict[str, str] = field(default_factory=dict)
    resources: int = 0  # served resources that can be listed and watched
    last: float = 0.0


class ClusterWatch:
    """Discovery and the set of resource watches; `run` until cancelled, then `stop`."""

    def __init__(
        self,
        api: KubeApi,
        *,
        on_event: OnEvent,
        decode: Decoder,
        on_invalid: Invalid | None = None,
        settings: WatchSettings,
        sharding: ShardingSettings | None = None,
        rng: random.Random | None = None,
        observer: WatchObserver | None = None,
        on_resources: Callable[[frozenset[ResourceKey], frozenset[ResourceKey]], None] = lambda _w, _f: None,
        choose: Choose | None = None,
    ) -> None:
        """Set up the watches of a cluster, and who is told of their events.

        `on_event` gets every event of every watch, each watch's in order; `decode` reads each event (the
        engine's decoder); `on_invalid` is told of each event it refuses; `observer` of each watch's restarts and
        errors; `on_resources` of the resources watched and forbidden (`resource_states`) whenever they changed, as
        a watch starts, stops or changes state. `choose` picks the targets of each discovery pass (by default the
        settings' selection, `discovery.select`; `fightwatch scan` asks the API server what it may watch).
        """
        self.discovery = DiscoveryStatus()
        self._api = api
        self._observer = observer
        self._on_resources = on_resources
        self._told: tuple[frozenset[ResourceKey], frozenset[ResourceKey]] | None = None  # (to on_resources, last)
        self._reconciling = False  # (the set of watches is half-changed: tell on_resources once it is done)
        self._on_event = on_event
        self._decode = decode
        self._on_invalid = on_invalid
        self._settings = settings
        self._watch_list = WatchList(settings.watch_list)  # (one server: a refusal holds for every resource)
        self._sharding = sharding
        self._policy = RetryPolicy.of(settings)
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._namespaces = NamespaceFilter(settings.namespaces, settings.exclude_namespaces)
        self._discovered: list[ApiResource] = []
        self._plurals: dict[tuple[str, str], str] = {}  # (group, kind) -> resource, as discovery last served them
        self._watches: dict[tuple[str, str, str | None], tuple[ResourceWatch, asyncio.Task[None]]] = {}
        self._refresh = asyncio.Event()
        self._started = False
        self._choose = choose or self._select

    @property
    def watches(self) -> list[ResourceWatch]:
        return [watch for watch, _ in self._watches.values()]

    def plural(self, group: str, kind: str) -> str | None:
        """Return the resource discovery serves `kind` of `group` as (None: not discovered)."""
        return self._plurals.get((group, kind))

    def request_refresh(self) -> None:
        """Re-read discovery soon (a watch found its resource gone)."""
        self._refresh.set()

    def ready(self) -> bool:
        """Discovery works and every resource that may be watched is watched (listed, and its watch open)."""
        return self.discovery.ok and all(
            w.status.ready for w in self.watches if w.status.state not in (State.FORBIDDEN, State.GONE)
        )

    def _state_changed(self) -> None:
        if not self._reconciling:
            self._tell_resources()

    def _tell_resources(self) -> None:
        resources = self.resource_states()
        if resources != self._told:
            self._told = resources
            self._on_resources(*resources)

    def resource_states(self) -> tuple[frozenset[ResourceKey], frozenset[ResourceKey]]:
        """Return the (watched, forbidden) resources.

        Forbidden when any of its watches is (one per namespace may be), watched when it has a watch otherwise; a
        resource whose watches all found it gone is neither.
        """
        watched: set[ResourceKey] = set()
        forbidden: set[ResourceKey] = set()
        for watch in self.watches:
            state = watch.status.state
            if state is State.FORBIDDEN:
                forbidden.add(watch.key)
            elif state is not State.GONE:
                watched.add(watch.key)
        return frozenset(watched - forbidden), frozenset(forbidden)

    def report(self) -> dict[str, Any]:
        """For /readyz: discovery, and each resource's state (the failing ones with their error)."""
        resources: dict[str, Any] = {}
        for watch in sorted(self.watches, key=lambda w: w.target.name):
            status = watch.status
            entry: dict[str, Any] = {"state": status.state.value, "synced": status.synced, "objects": status.objects}
            if status.failure is not None:
                entry |= {"failure": status.failure.value, "error": status.error, "failures": status.failures}
            if not watch.target.full_objects:
                entry["metadata_only"] = True
            resources[watch.target.name] = entry
        d = self.discovery
        discovery: dict[str, Any] = {"ok": d.ok, "resources": d.resources, "watched": len(resources)}
        if d.error:
            discovery["error"] = d.error
        if d.failed_groups:
            discovery["failed_groups"] = d.failed_groups
        return {"ready": self.ready(), "discovery": discovery, "resources": resources}

    async def run(self) -> None:
        failures = 0
        while True:
            self._refresh.clear()
            try:
                found = await discover(self._api, self._discovered)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # classified, logged once per episode, retried
                failure = classify(exc)
                failures += 1
                d = self.discovery
                d.ok, d.errors = False, d.errors + 1
                if failures == 1:
                    log.warning("discovery failing", error=str(failure), failure=failure.failure.value)
                d.error = str(failure)
                kind = Failure.SERVER_ERROR if failure.failure is Failure.NOT_FOUND else failure.failure
                await self._wait(retry_delay(kind, failures, self._policy, jitter=self._rng.random()))
                continue
            if failures:
                log.info("discovery recovered", after_failures=failures)
            failures = 0
            d = self.discovery
            newly_failed = set(found.failed) - set(d.failed_groups)
            for group_version in sorted(newly_failed):
                log.warning(
                    "group version not discovered", group_version=group_version, error=found.failed[group_version]
                )
            d.ok, d.error, d.failed_groups = True, "", found.failed
            d.passes, d.last, d.resources = d.passes + 1, time.time(), len(found.resources)
            self._discovered = found.resources
            self._plurals = {(r.group, r.kind): r.plural for r in found.resources}
            self._reconciling = True
            try:
                await self._reconcile(await self._choose(found.resources))
            finally:
                self._reconciling = False
            self._tell_resources()
            await self._wait(self._settings.discovery_interval)

    async def _select(self, resources: list[ApiResource]) -> list[Target]:
        return select(resources, self._settings, self._sharding)

    async def stop(self) -> None:
        tasks = [task for _, task in self._watches.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._watches.clear()

    async def _wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._refresh.wait()

    async def _reconcile(self, targets: list[Target]) -> None:
        wanted = {(t.resource.group, t.resource.plural, t.namespace): t for t in targets}
        handed_over: dict[tuple[str, str, str | None], ResourceWatch] = {}
        for key, (watch, task) in list(self._watches.items()):
            target = wanted.get(key)
            if target == watch.target:
                continue
            del self._watches[key]
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if target is not None and target.resource.kind == watch.resource.kind:
                handed_over[key] = watch  # a new version or new settings: the same objects, relisted
                continue
            forgotten = watch.forget()
            log.info("stopped watching", resource=watch.target.name, reason="no longer served", objects=forgotten)
        added = []
        for key, target in wanted.items():
            if key in self._watches:
                continue
            watch = ResourceWatch(
                target,
                self._api,
                on_event=self._on_event,
                decode=self._decode,
                on_invalid=self._on_invalid,
                settings=self._settings,
                namespaces=self._namespaces,
                on_gone=self.request_refresh,
                on_state=self._state_changed,
                rng=self._rng,
                observer=self._observer,
                watch_list=self._watch_list,
            )
            previous = handed_over.get(key)
            if previous is not None:
                watch.adopt(previous)
            task = asyncio.create_task(watch.run(), name=f"watch {target.name}")
            task.add_done_callback(_report_crash)
            self._watches[key] = (watch, task)
            added.append(target)
        if not added:
            return
        if not self._started:
            self._started = True
            log.info(
                "watching",
                resources=len(added),
                full_objects=sorted(t.name for t in added if t.full_objects),
                names=sorted(t.name for t in added),
            )
            return
        for target in added:
            log.info("watching", resource=target.name, full_objects=target.full_objects)


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("watch task ended", task=task.get_name(), exc_info=task.exception())
