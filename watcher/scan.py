"""`fightwatch scan` (`kubectl fightwatch`): a read-only, time-boxed diagnosis from an engineer's laptop.

The composition root of a scan: the kubeconfig's credentials, discovery, the resources these credentials may list
and watch (`sources.permissions`), the cluster watch and the detection pipeline `run` and `replay` use, for `--for`
a duration or until Ctrl-C; then the findings as `replay` prints them. It lists and watches, and asks the API
server what it may watch (access reviews, which persist nothing): no Event, no Lease, no listening port, nothing
written in the cluster. While it runs, standard error shows a status line and each finding as it opens
(`rendering.terminal`); standard output gets the result only.

With `--audit-follow LOG` (a managed cluster's audit events as its CLI prints them) or `--audit LOG`, audit
events are read in a thread and joined with the watch, as `replay --audit` joins them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

from watcher.config import Config, LogSettings, WatchSettings
from watcher.exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from watcher.logs import configure_logging
from watcher.model import ChangeKind, Finding, FindingChange, format_time
from watcher.pipeline import Invalid, Pipeline
from watcher.rendering.output import counted, write_findings
from watcher.rendering.tally import WriteTally
from watcher.rendering.terminal import Console, duration, opened_line, status_line
from watcher.sources.audit import AuditStats, read_audit_logs
from watcher.sources.capture import CaptureError
from watcher.sources.cluster import ClusterWatch
from watcher.sources.discovery import ApiResource, Target, discover, resolve
from watcher.sources.kube import ApiError, ConnectError, KubeApi, connect, event_loop_factory
from watcher.sources.permissions import Denied, Permissions, who_am_i
from watcher.sources.tls_records import read_by_record
from watcher.sources.watch import State

TICK = 1.0  # seconds between two status lines (and engine clock advances)
RATE_WINDOW = 5.0  # events/s is the rate over about this long
STOP_DEADLINE = 10.0
DEFAULT_NAMESPACE = "default"  # kubectl's, where the context names none


class ScanError(Exception):
    """The scan cannot start (credentials, an unknown resource type, nothing to watch): the message says why."""


@dataclass
class Options:
    """What the command line asks of a scan."""

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None  # None: every namespace (-A)
    resources: tuple[str, ...] = ()  # as kubectl names them: `deploy`, `cm`, `widgets.example.com`
    selector: str = ""
    seconds: float | None = 300.0  # None: until Ctrl-C
    record: Path | None = None
    audit: tuple[str, ...] = ()
    audit_follow: str | None = None
    audit_format: Any = None
    engine: str = "auto"
    output: str = "table"
    incidents: bool = False
    html: Path | None = None
    fail_on_findings: bool = False
    skip_invalid: bool = False


@dataclass
class _Progress:
    """The scan's counts for the status line."""

    rates: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, events) over RATE_WINDOW

    def rate(self, now: float, events: int) -> float:
        self.rates.append((now, events))
        while len(self.rates) > 2 and now - self.rates[1][0] >= RATE_WINDOW:
            self.rates.pop(0)
        (t0, e0), (t1, e1) = self.rates[0], self.rates[-1]
        return (e1 - e0) / (t1 - t0) if t1 > t0 else 0.0


class Scan:
    """One scan: connect, choose what may be watched, watch and detect until the time is up, then the result."""

    def __init__(self, config: Config, options: Options, *, console: Console) -> None:
        self.config = config
        self.options = options
        self.console = console
        self.tally = WriteTally() if options.html is not None else None
        self.pipeline = Pipeline(
            config.detection,
            requests=bool(options.audit or options.audit_follow),
            engine=options.engine,
            on_changes=self._tell,
            on_invalid=self._invalid,
            on_write=self.tally,
        )
        self.audit_stats = AuditStats()
        self.audit_error: CaptureError | None = None
        self.started: float | None = None
        self.ended: float | None = None
        self.server = ""
        self.user: str | None = None  # as the API server knows these credentials
        self._cluster: ClusterWatch | None = None
        self._permissions: Permissions | None = None
        self._api: KubeApi | None = None
        self._stop = asyncio.Event()
        self._audit_done = threading.Event()
        self._watched: list[Target] | None = None  # the first discovery pass's targets
        self._ready = False  # every watch has listed and is open

    # ------------------------------------------------------------------------------------------------- run

    async def run(self) -> None:
        """Scan until the time is up or `stop`; raises ScanError when it cannot start."""
        options = self.options
        try:
            connection = await connect(
                kubeconfig=options.kubeconfig,
                context=options.context,
                service_account_dir=self.config.kube.service_account_dir,
            )
        except ConnectError as exc:
            raise ScanError(f"cannot connect: {exc}") from None
        try:
            self.server = connection.server
            api = self._api = KubeApi(connection.api_client, request_timeout=self.config.watch.request_timeout)
            settings = await self._settings(api)
            fallback = () if options.namespace else (connection.namespace or DEFAULT_NAMESPACE,)
            self._permissions = Permissions(api, settings, fallback_namespaces=fallback)
            user = self.user = await who_am_i(api)
            self._open_recording()
            self._cluster = ClusterWatch(
                api,
                on_event=self.pipeline.event,
                decode=self.pipeline.decode,
                on_invalid=self.pipeline.refused,
                settings=settings,
                choose=self._choose,
            )
            span = "until Ctrl-C" if options.seconds is None else f"for {duration(options.seconds)}"
            where = f"namespace {options.namespace}" if options.namespace else "all namespaces"
            self.console.print(
                f"Scanning {connection.server} ({where}) as {user or 'an unknown user'} {span}; read-only. "
                "Ctrl-C ends it early."
            )
            await self._watch(self._cluster)
        finally:
            await connection.close()
            self.pipeline.close()

    def stop(self) -> None:
        self._stop.set()

    @property
    def nothing_watchable(self) -> bool:
        """These credentials may watch none of the resources asked for."""
        return self._watched is not None and not self._watched

    async def _settings(self, api: KubeApi) -> WatchSettings:
        """Return the config's watch settings with the command line's resources, namespace and selector."""
        options = self.options
        update: dict[str, Any] = {"label_selector": options.selector}
        if options.namespace:
            update["namespaces"] = (options.namespace,)
            update["exclude_namespaces"] = ()
        if options.resources:
            try:
                found = await discover(api)
            except Exception as exc:  # (the API server unreachable, or refusing discovery)
                raise ScanError(f"cannot read the API server's resource types: {exc}") from None
            names: list[str] = []
            for name in options.resources:
                matched = resolve(name, found.resources)
                if not matched:
                    raise ScanError(f'the server doesn\'t have a resource type "{name}"')
                names += [r.name for r in matched]
            update["resources"] = tuple(dict.fromkeys(names))
            update["exclude_resources"] = ()  # (asked for by name: pods and events too)
        return self.config.watch.model_copy(update=update)

    async def _choose(self, resources: list[ApiResource]) -> list[Target]:
        assert self._permissions is not None
        if self.options.namespace:  # (one namespace's objects: no cluster-scoped ones)
            resources = [r for r in resources if r.namespaced]
        targets = await self._permissions.choose(resources)
        denied = self._permissions.take_denied()
        if self._watched is None:
            if targets and self.options.selector:
                await self._check_selector(targets[0])
            self._watched = targets
            if denied:
                self.console.print(not_watched(denied, targets, user=self.user))
            if not targets:
                self.stop()
        elif denied:
            self.console.print(not_watched(denied, targets, user=self.user, later=True))
        return targets

    async def _check_selector(self, target: Target) -> None:
        """Stop the scan at start on a selector the API server refuses.

        Not every watch, retrying forever.
        """
        assert self._api is not None
        try:
            await self._api.get(target.path, query=[("limit", "1"), ("labelSelector", self.options.selector)])
        except ApiError as exc:
            if exc.status == HTTPStatus.BAD_REQUEST:
                raise ScanError(f"-l {self.options.selector}: {exc.message}") from None

    async def _watch(self, cluster: ClusterWatch) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stop)
        self.started = time.time()
        deadline = None if self.options.seconds is None else time.monotonic() + self.options.seconds
        tasks = [asyncio.create_task(cluster.run(), name="discovery")]
        reader = self._start_audit(loop)
        progress = _Progress()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                wait = TICK if deadline is None else min(TICK, deadline - now)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._stop.wait()
                for task in tasks:
                    if task.done() and not task.cancelled() and task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]  # (a bug: discovery only ends cancelled)
                self.pipeline.advance(time.time())
                self.pipeline.flush()
                self._note_ready(cluster)
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                self._show_status(left, progress)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            self.ended = time.time()
            for task in tasks:
                task.cancel()
            self._audit_done.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_DEADLINE):
                    await asyncio.gather(*tasks, return_exceptions=True)
                    await cluster.stop()
                    if reader is not None:
                        await reader
            self.console.close()
        self.pipeline.advance(time.time())

    def _note_ready(self, cluster: ClusterWatch) -> None:
        """Say once when every watch is open: writes from then on are seen as they happen."""
        if self._ready or not cluster.watches or not cluster.ready():
            return
        self._ready = True
        watches = cluster.watches
        objects = sum(w.status.objects for w in watches)
        self.console.print(f"Watching {len(watches)} resource watch{'es' * (len(watches) != 1)} ({objects:,} objects).")

    def _show_status(self, left: float | None, progress: _Progress) -> None:
        cluster = self._cluster
        watched = len(cluster.resource_states()[0]) if cluster is not None else 0
        events = self.pipeline.stats.events
        self.console.status(
            status_line(
                left=left,
                resources=watched,
                events_per_second=progress.rate(time.monotonic(), events),
                objects=self.pipeline.tracked_objects,
                findings=self.findings(),
            )
        )

    # ---------------------------------------------------------------------------------------------- events

    def _invalid(self, invalid: Invalid) -> None:
        """Say so of the first event skipped as invalid (the totals count them all)."""
        if self.pipeline.invalid_events == 1:
            where = "/".join(p for p in (invalid.namespace, invalid.name) if p)
            self.console.print(f"warning: skipped an invalid event of {invalid.resource} {where}: {invalid.error}")

    def _tell(self, changes: Iterable[FindingChange]) -> None:
        for change in changes:
            if change.kind is ChangeKind.OPENED:
                self.console.print(opened_line(change.finding))

    def _open_recording(self) -> None:
        path = self.options.record
        if path is None:
            return
        try:
            self.pipeline.record(path, self.config.record)
        except OSError as exc:
            raise ScanError(f"--record {path}: {exc.strerror or exc}") from None

    # ----------------------------------------------------------------------------------------------- audit

    def _start_audit(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None] | None:
        """Read the audit logs in a thread (their readers block), each request handed to the event loop."""
        options = self.options
        if self.pipeline.requests is None:
            return None
        files = [options.audit_follow] if options.audit_follow else list(options.audit)
        follow = self._audit_idle if options.audit_follow else None

        def read() -> None:
            requests = read_audit_logs(
                files,
                stats=self.audit_stats,
                skip_invalid=options.skip_invalid,
                envelope=options.audit_format,
                follow=follow,
            )
            try:
                for request in requests:
                    if self._audit_done.is_set():
                        break
                    loop.call_soon_threadsafe(self.pipeline.request, request)
            except CaptureError as exc:
                self.audit_error = exc
                loop.call_soon_threadsafe(self.console.print, f"warning: audit events no longer read: {exc}")
            except _AuditEndedError:
                pass
            finally:
                requests.close()

        return loop.run_in_executor(None, read)

    def _audit_idle(self) -> None:
        """While the followed log is quiet: end the reader once the scan is over."""
        if self._audit_done.is_set():
            raise _AuditEndedError

    # ---------------------------------------------------------------------------------------------- result

    def findings(self) -> list[Finding]:
        return self.pipeline.findings()

    def totals(self) -> str:
        s = self.pipeline.stats
        span = ""
        if self.started is not None and self.ended is not None:
            span = f" from {format_time(self.started)} to {format_time(self.ended)}"
        watched = len(self._watched or ())
        auditing = self.pipeline.requests is not None
        lines = [
            counted(self.findings(), watch=True, requests=auditing),
            f"{s.events:,} watch events ({s.writes:,} writes) over {self.pipeline.tracked_objects:,} objects from "
            f"{watched} watch{'es' * (watched != 1)}{span}.",
        ]
        if auditing:
            lines.append(f"{self.audit_stats.events:,} audit events.")
        if self.pipeline.invalid_events:
            lines.append(f"{self.pipeline.invalid_events:,} invalid events skipped.")
        forbidden = self._forbidden()
        if forbidden:
            lines.append(f"Forbidden while watching (not scanned): {', '.join(forbidden)}.")
        return "\n".join(lines)

    def _forbidden(self) -> list[str]:
        cluster = self._cluster
        if cluster is None:
            return []
        return sorted({w.target.name for w in cluster.watches if w.status.state is State.FORBIDDEN})

    def nothing_found(self) -> str:
        kinds = "controller fights or hot loops" if self.pipeline.requests is None else "fights, hot loops or conflicts"
        return f"No {kinds} found."

    def write_report(self, path: Path, findings: list[Finding]) -> None:
        """Write the self-contained HTML report; whole or not at all. Raises OSError."""
        from watcher.rendering.page import write_report  # noqa: PLC0415 - the template engine only for a report

        assert self.tally is not None
        notes = [f"a scan of {self.server}"]
        if self.pipeline.invalid_events:
            notes.append(f"{self.pipeline.invalid_events:,} invalid events skipped")
        summary = self.tally.summary(
            sources=(self.server,),
            events=self.pipeline.stats.events + self.audit_stats.events,
            first=self.started,
            last=self.ended,
            note="; ".join(notes),
        )
        write_report(path, findings, summary=summary, now=self.ended or time.time())


class _AuditEndedError(Exception):
    """The scan is over: the followed audit log is read no further."""


def not_watched(denied: list[Denied], targets: list[Target], *, user: str | None, later: bool = False) -> str:
    """Say what these credentials may not watch, and where the scan watches instead.

    Said once, at start; `later`: a resource discovered since.
    """
    who = f"user {user}" if user else "these credentials"
    everywhere = sorted(d.resource.name for d in denied if d.namespace is None)
    by_namespace: dict[str, list[str]] = {}
    for d in denied:
        if d.namespace is not None:
            by_namespace.setdefault(d.namespace, []).append(d.resource.name)
    lines = [f"Not watched: {who} may not list and watch {len(denied)} resource type{'s' * (len(denied) != 1)}"]
    if everywhere:
        lines.append(_listed("anywhere", everywhere))
    for namespace, names in sorted(by_namespace.items()):
        lines.append(_listed(f"in namespace {namespace}", sorted(names)))
    narrowed: dict[str, list[str]] = {}
    for target in targets:
        if target.namespace is not None and not later:
            narrowed.setdefault(target.namespace, []).append(target.resource.name)
    for namespace, names in sorted(narrowed.items()):
        lines.append(f"Watched in namespace {namespace} only (not cluster-wide): {len(names)} resource types.")
    reasons = sorted({d.reason for d in denied if d.reason and "not allowed" not in d.reason})
    lines += [f"  (the authorizer: {reason})" for reason in reasons[:3]]
    return "\n".join(lines)


def _listed(where: str, names: list[str]) -> str:
    width = max(shutil.get_terminal_size((100, 24)).columns, 60)
    return textwrap.fill(
        f"{where}: {', '.join(names)}.",
        width=width,
        initial_indent="  ",
        subsequent_indent="    ",
        break_on_hyphens=False,
    )


def run(config: Config, options: Options) -> int:
    """Scan; print the result; the exit status."""
    console = Console(sys.stderr)
    configure_logging(LogSettings(level="warning", format="console"), stream=console)  # type: ignore[arg-type]
    try:
        scan = Scan(config, options, console=console)
    except ImportError:
        print("fightwatch: --engine native: the native engine is not built in this installation", file=sys.stderr)
        return EXIT_ERROR
    read_by_record()  # (as `run`: a watch event is a TLS record, and 256 KiB read for each fragments the heap)
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(scan.run())
    except ScanError as exc:
        console.close()
        print(f"fightwatch: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # (before the watch began: after, Ctrl-C ends the scan with its result)
        console.close()
        print("fightwatch: interrupted before the scan began", file=sys.stderr)
        return EXIT_ERROR
    if scan.nothing_watchable:
        print("fightwatch: these credentials may not list and watch any resource: nothing was scanned", file=sys.stderr)
        return EXIT_ERROR
    return _result(scan, options)


def _result(scan: Scan, options: Options) -> int:
    findings = scan.findings()
    write_findings(
        findings, options.output, incidents=options.incidents, totals=scan.totals(), empty=scan.nothing_found()
    )
    status = EXIT_OK
    if options.html is not None:
        try:
            scan.write_report(options.html, findings)
            print(f"fightwatch: wrote the report to {options.html}", file=sys.stderr)
        except OSError as exc:
            print(f"fightwatch: --html {options.html}: {exc.strerror or exc}", file=sys.stderr)
            status = EXIT_ERROR
    if options.record is not None:
        print(f"fightwatch: recorded the watch events to {options.record} (replay reads it)", file=sys.stderr)
    if scan.audit_error is not None:
        print(f"fightwatch: {scan.audit_error}", file=sys.stderr)
        status = EXIT_ERROR
    if status == EXIT_OK and options.fail_on_findings and findings:
        return EXIT_FINDINGS
    return status


def options_of(args: argparse.Namespace) -> Options:
    """Read the scan's options from `fightwatch scan`'s command line."""
    return Options(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        resources=tuple(n.strip() for part in args.resources or () for n in part.split(",") if n.strip()),
        selector=args.selector or "",
        seconds=args.duration,
        record=args.record,
        audit=tuple(args.audit or ()),
        audit_follow=args.audit_follow,
        audit_format=args.audit_format,
        engine=args.engine,
        output=args.output,
        incidents=args.incidents,
        html=args.html,
        fail_on_findings=args.fail_on_findings,
        skip_invalid=args.skip_invalid,
    )
