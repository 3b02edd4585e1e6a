"""The offline commands, `replay`, `demo` and `audit`.

Recorded watch events and audit events read, joined and analysed, then the table, JSON or report page. The command line
(`watcher.cli`) imports this module for them only, so that `run` holds none of the readers.
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import ExitStack
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from watcher.config import Config
from watcher.detection.engine import Engine, Stats
from watcher.detection.events import ObjectEvent
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request
from watcher.exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from watcher.model import Finding, FindingChange, format_time
from watcher.pipeline import Invalid, Pipeline
from watcher.rendering.output import counted, table_width, write_findings
from watcher.rendering.tally import WriteTally
from watcher.sources.audit import AuditStats, read_audit_logs
from watcher.sources.capture import CaptureError, ReadStats, merged, read_captures
from watcher.sources.envelopes import Envelope, EnvelopeStats

DEMO_CAPTURE = "demo-capture.jsonl.gz"
DEMO_AUDIT = "demo-audit.jsonl.gz"  # the audit log of the same run
DEMO_RECORD = "demo-capture.json"  # how the demo was recorded: the Kubernetes release, the programs, the day
NOT_BUILT = "the native engine is not built in this installation (see `fightwatch --version`)"


def run(args: argparse.Namespace, config: Config) -> int:
    """`fightwatch replay`, `fightwatch demo` and `fightwatch audit`."""
    tally = WriteTally() if args.html is not None else None
    if args.command == "audit":
        if args.follow:
            return _follow(args, config, tally)
        return _analyse(Analysis(config, requests=args.files, envelope=args.audit_format, tally=tally), args)
    with ExitStack() as stack:
        audit = getattr(args, "audit", None) or []
        if args.command == "demo":
            data = resources.files("watcher") / "data"
            files = [str(stack.enter_context(resources.as_file(data / DEMO_CAPTURE)))]
            audit = [str(stack.enter_context(resources.as_file(data / DEMO_AUDIT)))]
            banner = (
                f"Replaying the bundled demo capture ({Path(files[0]).name}) with its audit log, {_demo_origin(data)}."
            )
            width = table_width(sys.stderr)
            print((banner if width is None else textwrap.fill(banner, max(width, 20))) + "\n", file=sys.stderr)
        else:
            files = args.files
        try:
            analysis = Analysis(
                config,
                captures=files,
                requests=audit,
                engine=args.engine,
                envelope=getattr(args, "audit_format", None),
                tally=tally,
            )
        except ImportError:
            print(f"fightwatch: --engine native: {NOT_BUILT}", file=sys.stderr)
            return EXIT_ERROR
        return _analyse(analysis, args)
    return EXIT_OK  # pragma: no cover - ExitStack does not swallow exceptions


def _demo_origin(data: Traversable) -> str:
    """Where and when the demo capture was recorded, as its record (DEMO_RECORD, written with it) says."""
    record = json.loads((data / DEMO_RECORD).read_text())
    return (
        f"recorded from a real kube-apiserver {record['kubernetes']} on {record['recorded']} while real programs "
        f"fought: cert-manager's cainjector {record['cainjector']}, Flux's kustomize-controller "
        f"{record['kustomize-controller']}, Helm {record['helm-v3']} and {record['helm-v4']}, "
        "kube-controller-manager's controllers, kubectl and curl"
    )


class Analysis:
    """An offline analysis: captures of watch events, audit logs, or both (joined), fed in time order."""

    def __init__(
        self,
        config: Config,
        *,
        captures: Sequence[str] = (),
        requests: Sequence[str] = (),
        engine: str = "auto",
        envelope: Envelope | None = None,
        tally: WriteTally | None = None,
        on_change: Callable[[FindingChange], None] | None = None,
    ) -> None:
        """Set up the offline analysis; `engine`: the watch engine's attribution (ImportError: `native`, not built).

        `on_change` (with one audit log and no captures) follows the log as it is written (`audit --follow`) and
        is told of every finding opened, updated or resolved on the way.
        """
        self.captures, self.audit_logs = list(captures), list(requests)
        self.envelope = envelope  # of the audit logs: None to tell by each file's first record
        self.on_change = on_change
        self._quiet_since = time.monotonic()  # (following: when the last request arrived)
        self.tally = tally
        self.pipeline = Pipeline(
            config.detection,
            watch=bool(captures),
            requests=bool(requests),
            engine=engine,
            on_changes=self._changed,
            on_invalid=self._invalid,
            on_write=tally,
        )
        self._skip_invalid = False
        self.read = ReadStats()
        self.audit = AuditStats()
        # The earliest and the latest time of the events read (each its own time, in whatever order the files hold
        # them); None while none told its time.
        self.first: float | None = None
        self.last: float | None = None

    @property
    def files(self) -> list[str]:
        return self.captures + self.audit_logs

    @property
    def events(self) -> int:
        """Events analysed (watch events and audit events)."""
        return self.read.events + self.audit.events

    @property
    def skipped_invalid(self) -> int:
        return self.read.skipped_invalid + self.audit.read.skipped_invalid

    @property
    def watched(self) -> bool:
        """Watch events are analysed (captures were given)."""
        return self.pipeline.watch is not None

    @property
    def audited(self) -> bool:
        """Audit events are analysed (audit logs were given)."""
        return self.pipeline.requests is not None

    def findings(self) -> list[Finding]:
        return self.pipeline.findings()

    def run(self, *, skip_invalid: bool) -> None:
        """Feed everything to the engines, keeping the times of the first and the last event analysed.

        A `CaptureError` ends it: a bad event (unless skipped), or a file that broke off.
        """
        self._skip_invalid = skip_invalid
        streams: list[Generator[ObjectEvent | Request, None, None]] = []
        if self.watched:
            streams.append(
                read_captures(self.captures, self.pipeline.decode, stats=self.read, skip_invalid=skip_invalid)
            )
        if self.audited:
            follow = self._idle if self.on_change is not None else None
            streams.append(
                read_audit_logs(
                    self.audit_logs, stats=self.audit, skip_invalid=skip_invalid, envelope=self.envelope, follow=follow
                )
            )
        items = streams[0] if len(streams) == 1 else merged(streams, _time)
        try:
            for item in items:
                if isinstance(item, Request):
                    self._request(item)
                elif self.pipeline.event(item):
                    self._saw(item.time)
        finally:
            items.close()

    def _invalid(self, invalid: Invalid) -> None:
        """Stop at an event with values the engine cannot read (found while analysing), or note it as skipped."""
        if not self._skip_invalid:
            raise CaptureError(self.read.source, self.read.line, str(invalid.error))
        self.read.note(f"{self.read.source}:{self.read.line}: {invalid.error}")

    def _request(self, request: Request) -> None:
        if self.tally is not None and not self.watched and request.is_write and request.object.name:
            self.tally.request(request)
        if self.on_change is not None:  # (following: the log is quiet from here on until the next request)
            self._quiet_since = time.monotonic()
        self.pipeline.request(request)
        self._saw(request.time)

    def _changed(self, changes: list[FindingChange]) -> None:
        if self.on_change is not None:
            for change in changes:
                self.on_change(change)

    def _idle(self) -> None:
        """While a followed log is quiet, its clock runs on: the time of its last request, plus the time since."""
        if self.last is not None:
            self.pipeline.advance(self.last + time.monotonic() - self._quiet_since)

    def _saw(self, at: float | None) -> None:
        """Widen the time range read to take in an event's own time (None: an event that does not tell it).

        Not the engines' clocks: those move only with what they analyse (a request they ignore moves neither), and never
        back.
        """
        if at is None:
            return
        self.first = at if self.first is None else min(self.first, at)
        self.last = at if self.last is None else max(self.last, at)

    def nothing_found(self) -> str:
        kinds = ["controller fights", "hot loops"] if self.watched else []
        kinds += ["conflict storms", "stuck appliers", "no-op write loops"] if self.audited else []
        return f"No {', '.join(kinds[:-1])} or {kinds[-1]} found."

    def problems(self) -> list[str]:
        return self.read.problems + self.audit.read.problems

    def totals(self) -> str:
        found = counted(self.findings(), watch=self.watched, requests=self.audited)
        span = ""
        if self.first is not None and self.last is not None:  # (the events' own times: the earliest, the latest)
            span = f" from {format_time(self.first)} to {format_time(self.last)}"
        lines = [found, f"{self.events:,} events{span}."]
        if self.pipeline.watch is not None:
            lines += _watch_totals(self.pipeline.watch, self.read, audited=self.audited)
        if self.pipeline.requests is not None:
            lines += _request_totals(self.pipeline.requests, self.audit)
        if self.skipped_invalid:
            lines.append(f"{self.skipped_invalid:,} invalid events skipped.")
        return "\n".join(lines)


def _time(item: ObjectEvent | Request) -> float:
    time = item.time
    return time if time is not None else 0.0


def _follow(args: argparse.Namespace, config: Config, tally: WriteTally | None) -> int:
    """Run `fightwatch audit --follow LOG`: every finding as it opens, changes and resolves.

    Each is logged as `run` logs them (on standard output), then on Ctrl-C, SIGTERM or the end of a pipe the summary, as
    without --follow.
    """
    from watcher.logs import configure_logging, log_change  # noqa: PLC0415 - structlog only when following

    if len(args.files) != 1:
        print("fightwatch: audit --follow reads one log (a file, or - for standard input)", file=sys.stderr)
        return EXIT_ERROR
    configure_logging(config.log, stream=sys.stdout)
    signal.signal(signal.SIGTERM, _interrupt)
    analysis = Analysis(config, requests=args.files, envelope=args.audit_format, tally=tally, on_change=log_change)
    return _analyse(analysis, args)


def _interrupt(_signal: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _analyse(analysis: Analysis, args: argparse.Namespace) -> int:
    tune_gc()
    error = None
    try:
        analysis.run(skip_invalid=args.skip_invalid)
    except KeyboardInterrupt:
        if analysis.on_change is None:
            raise
        print(file=sys.stderr)  # (after the ^C the terminal shows)
    except CaptureError as exc:
        if analysis.events == 0 and not analysis.skipped_invalid:  # nothing analysed: the error is all there is
            print(f"fightwatch: {exc}", file=sys.stderr)
            return EXIT_ERROR
        error = exc
    findings = analysis.findings()
    write_findings(
        findings, args.output, incidents=args.incidents, totals=analysis.totals(), empty=analysis.nothing_found()
    )
    if args.html is not None and not _write_report(args.html, analysis, findings, error):
        return EXIT_ERROR
    for problem in analysis.problems():
        print(f"fightwatch: skipped {problem}", file=sys.stderr)
    if analysis.events == 0 and error is None:
        lines = analysis.read.lines + analysis.audit.read.lines
        invalid = ", all invalid" if analysis.skipped_invalid else ""
        print(
            f"fightwatch: warning: no events were read from {', '.join(analysis.files)} "
            f"({lines:,} lines{invalid}): nothing was analysed",
            file=sys.stderr,
        )
    if error is not None:
        print(f"fightwatch: {error}", file=sys.stderr)
        # (a file that broke off, with no line, is past what skipping can help)
        advice = "; use --skip-invalid to skip bad events" if error.line is not None else ""
        print(
            f"fightwatch: the findings above cover the {analysis.events:,} events read before this point{advice}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if args.fail_on_findings and findings:
        return EXIT_FINDINGS
    return EXIT_OK


def _write_report(path: Path, analysis: Analysis, findings: list[Finding], error: CaptureError | None) -> bool:
    """Write the self-contained HTML report (`--html`): whole or not at all (a temporary file renamed into place)."""
    from watcher.rendering.page import write_report  # noqa: PLC0415 - the template engine only for a report

    assert analysis.tally is not None
    notes = [f"{analysis.skipped_invalid:,} invalid events skipped"] if analysis.skipped_invalid else []
    if error is not None:
        notes.append(f"the analysis stopped at {error}: this report covers the events read before it")
    sources = tuple(Path(f).name if f != "-" else "(standard input)" for f in analysis.files)
    summary = analysis.tally.summary(
        sources=sources, events=analysis.events, first=analysis.first, last=analysis.last, note="; ".join(notes)
    )
    # (an active finding's timeline runs to now: the time of the latest event read; where none told it, the findings')
    now = analysis.last if analysis.last is not None else max((f.last_seen for f in findings), default=time.time())
    try:
        write_report(path, findings, summary=summary, now=now)
    except OSError as exc:
        print(f"fightwatch: --html {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    print(f"fightwatch: wrote the report to {path}", file=sys.stderr)
    return True


def tune_gc() -> None:
    """Streaming allocates many short-lived dicts and keeps few: collect the young generation less often.

    The engine's state holds no reference cycles worth chasing every few hundred allocations; with the default
    thresholds the collector spends a tenth of a replay re-scanning it.
    """
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _watch_totals(engine: Engine, read: ReadStats, *, audited: bool) -> list[str]:
    s = engine.stats
    lines = [
        f"Watch: {read.events:,} events, {s.writes:,} writes to {engine.tracked_objects:,} objects "
        f"({s.unattributed_writes:,} unattributed), {s.ignored_events:,} ignored, {s.duplicate_events:,} duplicates."
    ]
    if s.without_managed_fields:
        lines.append(_without_managed_fields(s))
    if s.ignored_fights:
        lines.append(
            f"Note: {s.ignored_fights:,} fight{'s' * (s.ignored_fights != 1)} over what your ignore rules leave out "
            "(detection.ignore) were found and not reported."
        )
    if s.unattributed_writes and s.without_managed_fields < s.events:
        lines.append(_unattributed(engine, audited=audited))
    if s.untimed_events:
        lines.append(
            f"Warning: {s.untimed_events:,} events had neither observedAt nor a managedFields time; hot loops "
            "cannot be measured on them."
        )
    return lines


def _unattributed(engine: Engine, *, audited: bool) -> str:
    """Say why some writes could not be attributed, and what would name them."""
    note = (
        f"Note: {engine.stats.unattributed_writes:,} writes no managedFields entry names: the API server stamps none "
        "for a write that only removes fields (a three-way merge patch resetting one, a status rewritten whole)"
    )
    if not engine.subresources_seen:
        note += (
            "; and no entry here names a subresource: on an API server before 1.22 a write through the scale "
            "subresource leaves no entry, and a writer rewriting its own fields does not stamp its entry"
        )
    if audited:
        return note + ". The findings name those writers from the audit events where their requests tell."
    return note + ". With the API server's audit log (`--audit`), the findings name those writers."


def _without_managed_fields(s: Stats) -> str:
    """Say why events lacked managedFields, from what the input shows."""
    kinds = ", ".join(f"{kind or '?'} {n:,}" for kind, n in sorted(s.kinds_without_managed_fields.items()))
    head = f"Warning: {s.without_managed_fields:,} of {s.events:,} events carried no managedFields ({kinds}), so "
    if s.without_managed_fields_watched == s.without_managed_fields:
        return (
            head + "their writers cannot be named. They came straight from a watch, so the API server sent them so: "
            "a client reset their managedFields (`managedFields: [{}]`), or an API server that keeps none serves them "
            "(an aggregated API)."
        )
    if s.without_managed_fields == s.events:
        return (
            head + "their writers cannot be named: this capture was made without them. `kubectl get --watch -o json` "
            "leaves them out unless it is given `--show-managed-fields`; `kubectl fightwatch --record` keeps them."
        )
    return (
        head + "their writers cannot be named: the capture left them out for these objects (`kubectl get` without "
        "`--show-managed-fields`), or a client reset them (`managedFields: [{}]`)."
    )


def _request_totals(engine: RequestEngine, audit: AuditStats) -> list[str]:
    """Say what the audit events were: every event read is in one count here."""
    s = engine.stats
    analysed = s.writes + s.conflicts + s.apply_conflicts + s.failed
    counts = [
        f"{analysed:,} writes analysed ({s.conflicts:,} conflicts, {s.apply_conflicts:,} apply conflicts, "
        f"{s.noop_writes:,} no-op writes)",
        f"{s.reads:,} reads",
        f"{s.ignored:,} ignored",
    ]
    counts += [
        f"{n:,} {what}"
        for n, what in (
            (s.stores_nothing, "reviews and token requests (nothing stored)"),
            (s.without_name, "writes to collections"),
            (s.dry_run, "dry runs"),
        )
        if n
    ]
    line = f"Audit: {audit.events:,} events: {s.requests:,} completed requests on objects: {', '.join(counts)}"
    line += f"; {audit.without_object:,} non-resource requests"
    if audit.stages_skipped:
        line += "; of other stages, skipped: " + ", ".join(
            f"{n:,} {stage}" for stage, n in sorted(audit.stages_skipped.items())
        )
    if audit.invalid_items:
        line += f"; {audit.invalid_items:,} batch items that are no audit event, skipped"
    return [line + ".", *_envelope_totals(audit.envelopes), *_backwards(audit)]


def _backwards(audit: AuditStats) -> list[str]:
    if not audit.backwards:
        return []
    files = ", ".join(f"{n:,} in {Path(f).name if f != '-' else 'standard input'}" for f, n in audit.backwards.items())
    return [
        f"Warning: requests older than one read before them by more than a minute ({files}): is the log newest "
        "first? `gcloud logging read` and Log Analytics queries print so unless asked otherwise (`--order=asc`, "
        "`| order by TimeGenerated asc`); findings need a log read oldest first."
    ]


def _envelope_totals(stats: EnvelopeStats) -> list[str]:
    """Say what the envelopes held, where they were not (all) raw.

    Records by envelope (the cloud's records, each holding at most one audit event), those without audit events, and
    those whose event could not be mapped, with an example of each.
    """
    if not stats.records or set(stats.records) == {Envelope.RAW}:
        return []
    records = ", ".join(f"{n:,} records of {envelope.label}" for envelope, n in stats.records.most_common())
    line = f"Envelopes: {records}"
    if stats.skipped:
        skipped = ", ".join(f"{n:,} of {what}" for what, n in stats.skipped.most_common())
        line += f"; skipped, holding no audit event: {skipped}"
    if stats.unread:
        unread = ", ".join(f"{n:,} of {why} (e.g. {stats.examples[why]})" for why, n in stats.unread.most_common())
        line += f"; not read, {sum(stats.unread.values()):,} records: {unread}"
    return [line + "."]
