"""`fightwatch run`: the composition root of the live watcher.

Wires the cluster watch (sources) into the same detection engine `replay` uses, and the engine's finding
changes into the sinks (log lines, the recording, the HTTP endpoints); runs them on one event loop until
SIGTERM or SIGINT, then stops the watches, flushes the recording and exits 0. Events are handled as they are
read, one at a time, so the engine sees each resource's events in order and no queue can grow unbounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import structlog

from watcher import __version__
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.model import Finding, WatchEvent
from watcher.sinks import self_metrics as metrics
from watcher.sinks.http import HttpServer, Sources, make_app
from watcher.sinks.log import configure_logging, log_change
from watcher.sinks.recording import Recording
from watcher.sources.cluster import ClusterWatch
from watcher.sources.discovery import ApiResource
from watcher.sources.kube import ConnectError, Connection, KubeApi, connect
from watcher.sources.watch import Failure, State

EXIT_OK = 0
EXIT_ERROR = 2
TICK = 1.0  # seconds between two engine clock advances (findings resolve), recording flushes, heartbeats
ALIVE_WITHIN = 30.0  # /healthz fails when the event loop has not ticked for this long
STOP_DEADLINE = 10.0  # seconds for a clean shutdown before giving up on stragglers
LOGGED_INVALID_EVENTS = 10  # invalid events logged one by one; more are only counted

log = structlog.get_logger("fightwatch")
_Series = list[tuple[Sequence[str], float]]


class Service:
    """One watcher: connection, cluster watch, engine, sinks."""

    def __init__(self, config: Config, *, kubeconfig: Path | None, context: str | None, record: Path | None) -> None:
        self.config = config
        self.engine = Engine(config.detection)
        self.invalid_events = 0
        self._kubeconfig = kubeconfig
        self._context = context
        self._record_path = record
        self._recording: Recording | None = None
        self._cluster: ClusterWatch | None = None
        self._heartbeat = time.monotonic()
        self._lag = 0.0
        self._registry = metrics.new_registry(self._samples)

    async def run(self) -> int:
        settings = self.config
        try:
            connection = await connect(
                kubeconfig=self._kubeconfig,
                context=self._context,
                service_account_dir=settings.kube.service_account_dir,
            )
        except ConnectError as exc:
            return _cannot_start("cannot connect", error=str(exc))
        try:
            if self._record_path is not None:
                try:
                    self._recording = Recording(
                        self._record_path, max_bytes=settings.record.max_bytes, keep=settings.record.keep
                    )
                except OSError as exc:
                    return _cannot_start("cannot record", file=str(self._record_path), error=exc.strerror or str(exc))
            server = HttpServer(make_app(self._sources()), address=settings.serve.address, port=settings.serve.port)
            try:
                url = await server.start()
            except OSError as exc:
                where = f"{settings.serve.address}:{settings.serve.port}"
                return _cannot_start("cannot listen", address=where, config="serve", error=exc.strerror or str(exc))
            try:
                return await self._serve(connection, url)
            finally:
                await server.stop()
        finally:
            await connection.close()
            if self._recording is not None:
                self._recording.close()

    async def _serve(self, connection: Connection, url: str) -> int:
        api = KubeApi(connection.api_client, request_timeout=self.config.watch.request_timeout)
        cluster = self._cluster = ClusterWatch(api, self._deliver, settings=self.config.watch)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        log.info(
            "started",
            version=__version__,
            server=connection.server,
            credentials=connection.source,
            listening=url,
            recording=str(self._record_path) if self._record_path else None,
        )
        tasks = [
            asyncio.create_task(cluster.run(), name="discovery"),
            asyncio.create_task(self._tick(), name="tick"),
        ]
        stopped = asyncio.create_task(stop.wait())
        crashed: list[asyncio.Task[Any]] = []
        try:
            done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
            crashed = [t for t in done if t is not stopped]
            for task in crashed:  # run() and _tick() only end by cancellation: anything else is a bug
                log.error("task ended", task=task.get_name(), exc_info=task.exception())
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            stopped.cancel()
            for task in tasks:
                task.cancel()
            async with asyncio.timeout(STOP_DEADLINE):
                await asyncio.gather(*tasks, return_exceptions=True)
                await cluster.stop()
        self._advance()
        if self._recording is not None:
            self._recording.flush()
        s = self.engine.stats
        log.info(
            "stopped",
            events=s.events,
            writes=s.writes,
            active_findings=len(self.engine.active()),
            recorded_events=self._recording.events if self._recording else None,
        )
        return EXIT_ERROR if crashed else EXIT_OK

    # --------------------------------------------------------------------------------------------- events

    def _deliver(self, event: WatchEvent, resource: ApiResource) -> None:
        """Every event: recorded first (so a replay sees what the engine saw), then analysed."""
        if self._recording is not None:
            self._recording.write(event)
        try:
            changes = self.engine.process(event)
        except ValueError as exc:  # malformed managedFields and the like: this event only
            self.invalid_events += 1
            if self.invalid_events <= LOGGED_INVALID_EVENTS:
                meta = event.object.get("metadata") or {}
                log.warning(
                    "invalid event skipped",
                    resource=resource.name,
                    namespace=meta.get("namespace"),
                    name=meta.get("name"),
                    error=str(exc),
                )
            return
        for change in changes:
            log_change(change)

    def _advance(self) -> None:
        for change in self.engine.advance(time.time()):
            log_change(change)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK
            await asyncio.sleep(TICK)
            self._lag = max(0.0, loop.time() - due)
            self._heartbeat = time.monotonic()
            self._advance()
            if self._recording is not None:
                self._recording.flush()

    # ------------------------------------------------------------------------------------------- endpoints

    def findings(self) -> list[Finding]:
        return self.engine.active() + self.engine.resolved()

    def readiness(self) -> dict[str, Any]:
        if self._cluster is None:
            return {"ready": False, "discovery": {"ok": False}, "resources": {}}
        return self._cluster.report()

    def liveness(self) -> dict[str, Any]:
        silent = time.monotonic() - self._heartbeat
        return {"alive": silent < ALIVE_WITHIN, "last_tick_seconds_ago": round(silent, 3)}

    def _sources(self) -> Sources:
        return Sources(
            findings=self.findings,
            readiness=self.readiness,
            liveness=self.liveness,
            metrics=lambda: metrics.exposition(self._registry),
            metrics_content_type=metrics.CONTENT_TYPE,
        )

    def _samples(self) -> dict[str, Iterable[tuple[Sequence[str], float]]]:
        none: tuple[str, ...] = ()
        samples: dict[str, Iterable[tuple[Sequence[str], float]]] = {
            "fightwatch_build_info": [((__version__,), 1.0)],
            "fightwatch_event_loop_lag_seconds": [(none, self._lag)],
            "fightwatch_engine_invalid_events": [(none, float(self.invalid_events))],
            "fightwatch_engine_tracked_objects": [(none, float(self.engine.tracked_objects))],
        }
        stats = self.engine.stats
        for field in fields(stats):
            samples[f"fightwatch_engine_{field.name}"] = [(none, float(getattr(stats, field.name)))]
        if self._recording is not None:
            samples["fightwatch_recording_events"] = [(none, float(self._recording.events))]
            samples["fightwatch_recording_bytes"] = [(none, float(self._recording.bytes_written))]
        cluster = self._cluster
        if cluster is None:
            return samples
        d = cluster.discovery
        watches = cluster.watches
        samples |= {
            "fightwatch_ready": [(none, float(cluster.ready()))],
            "fightwatch_discovery_ok": [(none, float(d.ok))],
            "fightwatch_discovery_passes": [(none, float(d.passes))],
            "fightwatch_discovery_errors": [(none, float(d.errors))],
            "fightwatch_discovered_resources": [(none, float(d.resources))],
            "fightwatch_watched_resources": [(none, float(len(watches)))],
        }
        state: _Series = []
        events: _Series = []
        size: _Series = []
        lists: _Series = []
        relists: _Series = []
        rewatches: _Series = []
        errors: _Series = []
        objects: _Series = []
        for watch in watches:
            name, status = watch.target.name, watch.status
            state += [((name, s.value), float(status.state is s)) for s in State]
            events += [((name, kind), float(n)) for kind, n in sorted(status.events.items())]
            size.append(((name,), float(status.bytes)))
            lists.append(((name,), float(status.lists)))
            relists.append(((name,), float(status.relists)))
            rewatches.append(((name,), float(status.rewatches)))
            errors += [((name, f.value), float(status.errors[f])) for f in Failure if status.errors[f]]
            objects.append(((name,), float(status.objects)))
        samples |= {
            "fightwatch_watch_state": state,
            "fightwatch_watch_events": events,
            "fightwatch_watch_bytes": size,
            "fightwatch_watch_lists": lists,
            "fightwatch_watch_relists": relists,
            "fightwatch_watch_rewatches": rewatches,
            "fightwatch_watch_errors": errors,
            "fightwatch_watch_objects": objects,
        }
        return samples


def _cannot_start(event: str, **context: Any) -> int:
    log.error(event, **context)
    return EXIT_ERROR


def run(config: Config, *, kubeconfig: Path | None, context: str | None, record: Path | None) -> int:
    """Run the watcher until SIGTERM/SIGINT; the exit status."""
    configure_logging(config.log)
    service = Service(config, kubeconfig=kubeconfig, context=context, record=record)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(service.run())
    return EXIT_OK
