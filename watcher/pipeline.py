"""The detection every command runs, composed once: watch events and audit requests in, finding changes out.

`run`, `scan` and the offline commands (`replay`, `demo`, `audit`) each build one `Pipeline` and add only what is
their own: serving and delivery, the console, the files. The pipeline holds

- the watch engine (`detection.engine`), where there are watch events: it decodes them (`decode`, the attribution
  implementation's) and attributes each write;
- the request engine (`detection.request_engine`), where there are audit events;
- their join (`detection.join.Joined`) where there are both: every watch event and every request then goes to it.

It chooses between them here, once; a command never does. Each watch event is recorded first (`--record`: a Secret's
data only as a digest), so a replay sees what the engine saw, then analysed; an event the engine cannot read (labels
that are not strings, ...) is counted and handed to the command's `on_invalid`, and only that event is lost. Every
finding change (of a watch event, of a request, of the clock moving on) goes to the command's `on_changes`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from watcher.config import DetectionSettings, RecordSettings
from watcher.detection.attribution import Attribution, Decoder
from watcher.detection.engine import Engine, Stats
from watcher.detection.events import ObjectEvent
from watcher.detection.join import Joined, guessed_resource
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request
from watcher.model import Finding, FindingChange, ObjectRef, Writer

if TYPE_CHECKING:  # (the offline commands import no logging or client library: see `record`)
    from watcher.recording import Recording
    from watcher.sources.discovery import ApiResource


@dataclass(frozen=True, slots=True)
class Invalid:
    """A watch event the engine could not read, skipped: where it was (what the reader knows of it) and why."""

    error: ValueError
    resource: str | None = None  # kubectl's name of its resource, where the watch tells it
    namespace: str | None = None
    name: str | None = None


def _ignore(_changes: list[FindingChange]) -> None:
    return None


def _raise(invalid: Invalid) -> None:
    raise invalid.error


def _unwatched(_event: ObjectEvent) -> list[FindingChange]:
    raise AssertionError("a pipeline without watch events takes none")


def _unaudited(_request: Request) -> list[FindingChange]:
    raise AssertionError("a pipeline without audit requests takes none")


class Pipeline:
    """The engines a command's inputs need, joined where there are both; the finding changes, to the command."""

    def __init__(
        self,
        detection: DetectionSettings,
        *,
        watch: bool = True,
        requests: bool = False,
        engine: Attribution | str = "auto",
        on_changes: Callable[[list[FindingChange]], None] = _ignore,
        on_invalid: Callable[[Invalid], None] = _raise,
        on_write: Callable[[ObjectRef, Sequence[Writer]], None] | None = None,
        on_conflict: Callable[[str, str], None] | None = None,
        resource: Callable[[ObjectRef], str] = guessed_resource,
    ) -> None:
        """Build the engines for watch events (`watch`), audit requests (`requests`) or both (joined).

        `engine`: the attribution implementation (`auto`: native where it is built; raises ImportError for `native`
        where it is not). `on_write` is told of every watch write and its writers, `on_conflict` of every conflict a
        request shows; `resource` names an object's resource (discovery's, live; the API server's guess offline).
        """
        if not (watch or requests):
            raise ValueError("a pipeline analyses watch events, audit requests or both")
        self.watch = Engine(detection, attribution=engine, on_write=on_write) if watch else None
        self.requests = RequestEngine(detection, on_conflict=on_conflict) if requests else None
        self.joined = (
            Joined(self.watch, self.requests, resource=resource)
            if self.watch is not None and self.requests is not None
            else None
        )
        found = self.joined or self.watch or self.requests
        assert found is not None  # (one is built: checked above)
        self._findings: Engine | Joined | RequestEngine = found
        # Where every watch event and every request goes, chosen here once: the join where there are both.
        watched = self.joined or self.watch
        self._process: Callable[[ObjectEvent], list[FindingChange]] = (
            watched.process if watched is not None else _unwatched
        )
        self._analyse: Callable[[Request], list[FindingChange]] = _unaudited
        if self.joined is not None:
            self._analyse = self.joined.process_request
        elif self.requests is not None:
            self._analyse = self.requests.process
        self._on_changes = on_changes
        self._on_invalid = on_invalid
        self.recording: Recording | None = None
        self.invalid_events = 0

    def record(self, path: Path, settings: RecordSettings) -> None:
        """Record every watch event from here on (`--record`), rotating as `settings` say; raises OSError."""
        from watcher.recording import Recording  # noqa: PLC0415 - (structlog, for the live commands only)

        self.recording = Recording(path, max_bytes=settings.max_bytes, keep=settings.keep)

    def flush(self) -> None:
        """Write what the recording holds through to its file."""
        if self.recording is not None:
            self.recording.flush()

    def close(self) -> None:
        """Close the recording."""
        if self.recording is not None:
            self.recording.close()

    # ------------------------------------------------------------------------------------------------- inputs

    @property
    def decode(self) -> Decoder:
        """The watch engine's decoder: a watch event's JSON text into the event the engine reads."""
        if self.watch is None:
            raise TypeError("a pipeline without watch events decodes none")
        return self.watch.decode

    def event(self, event: ObjectEvent, resource: ApiResource | None = None) -> bool:
        """Record a watch event of `resource` (where the watch tells it), analyse it, hand its finding changes over.

        False: the engine could not read it (skipped, or the command's `on_invalid` raised).
        """
        if self.recording is not None:
            self.recording.write(event, secret=resource is not None and resource.is_secret)
        try:
            changes = self._process(event)
        except ValueError as exc:  # values the engine cannot read: this event only
            self.invalid(Invalid(exc, resource.name if resource else None, event.namespace, event.name))
            return False
        if changes:
            self._on_changes(changes)
        return True

    def refused(self, resource: ApiResource, error: ValueError) -> None:
        """Skip a watch event of `resource` that the decoder refused (the watch's `on_invalid`)."""
        self.invalid(Invalid(error, resource.name))

    def invalid(self, invalid: Invalid) -> None:
        """Count an event skipped as invalid (by the decoder or the engine) and tell the command."""
        self.invalid_events += 1
        self._on_invalid(invalid)

    def request(self, request: Request) -> None:
        """Analyse an audit request and hand its finding changes over."""
        changes = self._analyse(request)
        if changes:
            self._on_changes(changes)

    def advance(self, now: float) -> None:
        """Move the clock: findings quiet long enough resolve, and their changes are handed over."""
        changes = self._findings.advance(now)
        if changes:
            self._on_changes(changes)

    # ------------------------------------------------------------------------------------------------ results

    def active(self) -> list[Finding]:
        return self._findings.active()

    def resolved(self) -> list[Finding]:
        return self._findings.resolved()

    def findings(self) -> list[Finding]:
        """Active, then resolved."""
        return self._findings.findings()

    @property
    def stats(self) -> Stats:
        """The watch engine's counts (none without watch events)."""
        return self.watch.stats if self.watch is not None else Stats()

    @property
    def tracked_objects(self) -> int:
        return self.watch.tracked_objects if self.watch is not None else 0

    @property
    def implementation(self) -> str:
        return self.watch.implementation if self.watch is not None else "none"
