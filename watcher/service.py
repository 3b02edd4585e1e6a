"""`fightwatch run`: the live watcher, the pipeline every command runs with what is run's own added.

The cluster watch (sources) feeds the detection pipeline `scan` and `replay` build too (`pipeline.Pipeline`: the
engines, recording, invalid events), with the audit webhook's requests where it is on (`audit_intake`). What is
run's own: the finding changes go to the log, the metrics (one `Metrics` on one registry, served at `/metrics`
with the other HTTP endpoints) and delivery (Kubernetes Events through the service's own API client,
Alertmanager, webhooks). It runs them on one event loop until SIGTERM or SIGINT, then stops the watches, hands
the last changes over, gives delivery a few seconds to drain, flushes the recording and exits 0. Events are
handled as they are read, one at a time, so the engine sees each resource's events in order; delivery never
blocks that (bounded queues per sink).

With leader election every replica watches, detects and serves its endpoints, and only the Lease holder delivers
(`leadership`). On SIGTERM the leader drains its delivery first and then releases the Lease, so a standby takes
over at once. With sharding (`sharding.shard` of `total_shards`) this process watches only its share of the
resources. The endpoints' TLS and guard are `serving.security`'s; what the parts count as plain numbers reaches
`/metrics` through `metrics.samples`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from watcher import __version__
from watcher.audit_intake import AuditIntake
from watcher.config import Config
from watcher.delivery.credentials import CredentialError
from watcher.delivery.dispatch import Delivery
from watcher.delivery.outlets import build_sinks
from watcher.detection.events import ObjectEvent
from watcher.detection.incidents import IncidentIndex
from watcher.detection.join import guessed_resource
from watcher.detection.native import implementation, native_available
from watcher.exits import EXIT_ERROR, EXIT_OK
from watcher.leadership.gate import leader_elector
from watcher.logs import configure_logging, log_change
from watcher.metrics.exporter import Metrics, Samples, exposition, new_registry
from watcher.metrics.samples import (
    cluster_samples,
    engine_samples,
    event_loop_samples,
    recording_samples,
    serving_samples,
)
from watcher.model import Finding, FindingChange, Incident, ObjectRef
from watcher.pipeline import Invalid, Pipeline
from watcher.serving.endpoints import ServedRequests, StateReaders, make_app
from watcher.serving.security import ServingSecurity
from watcher.serving.server import HttpServer
from watcher.serving.tls import CertificateError
from watcher.sources.cluster import ClusterWatch
from watcher.sources.discovery import ApiResource, log_server_version
from watcher.sources.kube import ConnectError, Connection, KubeApi, connect, event_loop_factory
from watcher.sources.tls_records import read_by_record

if TYPE_CHECKING:  # (imported where leader election is on: `leadership.gate`)
    from watcher.leadership.lease import LeaderElector

TICK = 1.0  # seconds between two engine clock advances (findings resolve), recording flushes, heartbeats
ALIVE_WITHIN = 30.0  # /healthz fails when the event loop has not ticked for this long
STOP_DEADLINE = 10.0  # seconds for the watches to stop before giving up on stragglers
DRAIN_DEADLINE = 5.0  # seconds delivery gets at shutdown to send what is queued (resolutions, last updates)
LOGGED_INVALID_EVENTS = 10  # invalid events logged one by one; more are only counted

log = structlog.get_logger("fightwatch")


class Service:
    """One watcher: connection, cluster watch, engine, sinks."""

    def __init__(
        self,
        config: Config,
        *,
        kubeconfig: Path | None,
        context: str | None,
        record: Path | None,
        engine: str = "auto",
    ) -> None:
        """`engine`: which attribution implementation the engine runs on (`auto`: native where it is built)."""
        self.config = config
        self.registry = new_registry()
        sharding = config.sharding
        attribution = implementation(engine)
        self.metrics = Metrics(
            self.registry,
            config.metrics,
            shard=sharding.shard,
            total_shards=sharding.total_shards,
            engine=attribution.name,
            alerts_per=config.delivery.per,
        )
        # With the audit webhook, API requests are analysed too, joined with the watch.
        self.audit = AuditIntake(config.audit_webhook)
        self.pipeline = Pipeline(
            config.detection,
            requests=config.audit_webhook.enabled,
            engine=attribution,
            on_changes=self._hand_over,
            on_invalid=self._invalid,
            on_write=self.metrics.count_write,
            on_conflict=self.metrics.count_conflict,
            resource=self._resource,
        )
        self.metrics.active = self.pipeline.active  # scrapes read the findings as of the last write
        self.metrics.read_at_scrape(self._samples)
        self._kubeconfig = kubeconfig
        self._context = context
        self._record_path = record
        self._cluster: ClusterWatch | None = None
        self._delivery: Delivery | None = None
        self._elector: LeaderElector | None = None
        self._heartbeat = time.monotonic()
        self._lag = 0.0
        self.served = ServedRequests()
        self._incidents = IncidentIndex(self.pipeline.active)
        self._security: ServingSecurity | None = None  # (TLS, the guard: set up when serving starts)

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
            try:  # the Events sink writes through the watcher's own client: the same credentials and CA
                sinks = build_sinks(
                    settings.delivery,
                    api_client=connection.api_client,
                    page=settings.serve.external_url,
                    incident_of=self.incident_of,
                    shard=settings.sharding.shard if settings.sharding.total_shards > 1 else None,
                )
                delivery = self._delivery = Delivery(sinks, settings.delivery, metrics=self.metrics)
            except (CredentialError, ValueError) as exc:  # (a credential, or two sinks by one name)
                return _cannot_start("cannot deliver", config="delivery", error=str(exc))
            elector = self._elector = (
                leader_elector(settings, connection, delivery=delivery, metrics=self.metrics, findings=self.pipeline)
                if settings.leader_election.enabled
                else None
            )
            await delivery.start(paused=elector is not None)
            election = asyncio.create_task(elector.run(), name="leader election") if elector is not None else None
            try:
                status = await self._listen(connection)
            finally:
                await delivery.stop(drain=DRAIN_DEADLINE)
                if election is not None and elector is not None:  # (the Lease is kept until delivery drained)
                    election.cancel()
                    await asyncio.gather(election, return_exceptions=True)
                    await elector.release()
            if self._cluster is not None:  # (it ran: the last line says so, after delivery drained)
                s, recording = self.pipeline.stats, self.pipeline.recording
                log.info(
                    "stopped",
                    events=s.events,
                    writes=s.writes,
                    active_findings=len(self.pipeline.active()),
                    recorded_events=recording.events if recording else None,
                )
            return status
        finally:
            await connection.close()
            self.pipeline.close()

    async def _listen(self, connection: Connection) -> int:
        settings = self.config
        if self._record_path is not None:
            try:
                self.pipeline.record(self._record_path, settings.record)
            except OSError as exc:
                return _cannot_start("cannot record", file=str(self._record_path), error=exc.strerror or str(exc))
        api = KubeApi(connection.api_client, request_timeout=settings.watch.request_timeout)
        serve = settings.serve
        try:
            security = self._security = ServingSecurity(serve, api.create)
        except CertificateError as exc:
            return _cannot_start("cannot serve TLS", config="serve.tls", error=str(exc))
        server = HttpServer(
            make_app(self._state_readers(), security.guard, self.served, refresh=serve.page_refresh),
            address=serve.address,
            port=serve.port,
            tls=security.context,
        )
        try:
            url = await server.start()
        except OSError as exc:
            where = f"{serve.address}:{serve.port}"
            return _cannot_start("cannot listen", address=where, config="serve", error=exc.strerror or str(exc))
        try:
            try:
                await self.audit.start(security)
            except (OSError, CertificateError) as exc:
                where = f"{settings.audit_webhook.address}:{settings.audit_webhook.port}"
                return _cannot_start(
                    "cannot receive audit events", address=where, config="audit_webhook", error=str(exc)
                )
            return await self._serve(connection, api, url, security)
        finally:
            await server.stop()
            await self.audit.stop()

    async def _serve(self, connection: Connection, api: KubeApi, url: str, security: ServingSecurity) -> int:
        cluster = self._cluster = ClusterWatch(
            api,
            on_event=self._on_event,
            decode=self.pipeline.decode,
            on_invalid=self.pipeline.refused,
            settings=self.config.watch,
            sharding=self.config.sharding,
            observer=self.metrics,
            on_resources=self.metrics.set_resources,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        log.info(
            "started",
            version=__version__,
            engine=self.pipeline.implementation,
            server=connection.server,
            credentials=connection.source,
            listening=url,
            tls=security.certificate(),
            audit_webhook=self.audit.url,
            recording=str(self._record_path) if self._record_path else None,
            delivery=[sink.name for sink in self._delivery.sinks] if self._delivery else [],
            shard=f"{self.config.sharding.shard}/{self.config.sharding.total_shards}",
            lease=self._elector.status()["lease"] if self._elector else None,
            identity=self._elector.identity if self._elector else None,
        )
        tasks = [
            asyncio.create_task(cluster.run(), name="discovery"),
            asyncio.create_task(self._tick(), name="tick"),
            *self.audit.tasks(self.pipeline.request),
        ]
        checked = asyncio.create_task(security.check_review_permissions()) if security.access is not None else None
        versioned = asyncio.create_task(log_server_version(api))
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
            versioned.cancel()
            if checked is not None:
                checked.cancel()
            for task in tasks:
                task.cancel()
            async with asyncio.timeout(STOP_DEADLINE):
                await asyncio.gather(
                    *tasks, versioned, *([checked] if checked is not None else []), return_exceptions=True
                )
                await cluster.stop()
        self.pipeline.advance(time.time())  # (findings quiet long enough resolve; the changes still reach delivery)
        self.pipeline.flush()
        return EXIT_ERROR if crashed else EXIT_OK

    # --------------------------------------------------------------------------------------------- events

    def _on_event(self, event: ObjectEvent, resource: ApiResource) -> None:
        """Every event: recorded, analysed and handed over (the pipeline), then counted."""
        started = time.perf_counter()
        self.pipeline.event(event, resource)
        received = event.observed_at
        written = event.written_at
        self.metrics.observe_event(
            (resource.group, resource.plural),
            event.type,
            duration=time.perf_counter() - started,
            lag=received - written
            if event.type == "MODIFIED" and received is not None and written is not None
            else None,
            received_at=received,
        )

    def _invalid(self, invalid: Invalid) -> None:
        """Log the first few events skipped as invalid (the decoder refused them, or the engine could not read them)."""
        if self.pipeline.invalid_events <= LOGGED_INVALID_EVENTS:
            log.warning(
                "invalid event skipped",
                resource=invalid.resource,
                namespace=invalid.namespace,
                name=invalid.name,
                error=str(invalid.error),
            )

    def _hand_over(self, changes: list[FindingChange]) -> None:
        """Hand finding changes to every sink: the log, the metrics, delivery (queued, never waited for)."""
        if not changes:
            return
        for change in changes:
            log_change(change)
        self.metrics.on_changes(changes)
        if self._delivery is not None:
            self._delivery.submit(changes)

    def _resource(self, ref: ObjectRef) -> str:
        """Return the resource of an object's kind, as discovery serves it (else the API server's own guess)."""
        plural = self._cluster.plural(ref.group, ref.kind) if self._cluster is not None and ref.kind else None
        return plural or guessed_resource(ref)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK
            await asyncio.sleep(TICK)
            self._lag = max(0.0, loop.time() - due)
            self._heartbeat = time.monotonic()
            self.pipeline.advance(time.time())
            if self._security is not None:
                self._security.check()
            self.metrics.set_tracked(self.pipeline.tracked_objects)
            self.pipeline.flush()

    # ------------------------------------------------------------------------------------------- endpoints

    def incident_of(self, finding: Finding) -> Incident | None:
        """Return the incident a finding is part of, among the active findings, when it has others too."""
        return self._incidents.of(finding, time.monotonic())

    def readiness(self) -> dict[str, Any]:
        if self._cluster is None:
            report: dict[str, Any] = {"ready": False, "discovery": {"ok": False}, "resources": {}}
        else:
            report = self._cluster.report()
        sharding = self.config.sharding
        if sharding.total_shards > 1:
            report["shard"] = {"shard": sharding.shard, "total_shards": sharding.total_shards}
        if self._elector is not None:
            report["leader_election"] = self._elector.status()
        return report

    def liveness(self) -> dict[str, Any]:
        silent = time.monotonic() - self._heartbeat
        return {"alive": silent < ALIVE_WITHIN, "last_tick_seconds_ago": round(silent, 3)}

    def _state_readers(self) -> StateReaders:
        return StateReaders(
            findings=self.pipeline.findings,
            readiness=self.readiness,
            liveness=self.liveness,
            metrics=lambda accept: exposition(self.registry, accept),
            resource=self._resource,
        )

    def _samples(self) -> Samples:
        """Read every part's plain numbers (`metrics.samples`): the collected families' samples at scrape time."""
        pipeline, recording = self.pipeline, self.pipeline.recording
        return {
            **event_loop_samples(self._lag),
            **engine_samples(
                pipeline.stats, invalid=pipeline.invalid_events, max_objects=self.config.detection.max_objects
            ),
            **self.audit.samples(pipeline.requests),
            **serving_samples(self.served, self._security),
            **(recording_samples(recording) if recording is not None else {}),
            **cluster_samples(self._cluster),
        }


def _cannot_start(event: str, **context: Any) -> int:
    log.error(event, **context)
    return EXIT_ERROR


def run(
    config: Config, *, kubeconfig: Path | None, context: str | None, record: Path | None, engine: str = "auto"
) -> int:
    """Run the watcher until SIGTERM/SIGINT; the exit status."""
    configure_logging(config.log)
    if engine == "auto" and not native_available():
        log.warning(
            "native engine not built: running on the Python engine (same findings, more CPU per event)",
            hint="install with Rust's cargo (rustup) to build it: scripts/native.sh fetches its crates from crates.io",
        )
    try:
        service = Service(config, kubeconfig=kubeconfig, context=context, record=record, engine=engine)
    except ImportError:
        return _cannot_start("cannot start the native engine", error="it is not built in this installation")
    read_by_record()  # (a watch event is a TLS record: 256 KiB allocated for each fragmented the heap)
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(service.run())
    return EXIT_OK
