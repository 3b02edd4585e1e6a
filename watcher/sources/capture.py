"""Read recorded watch streams: what `kubectl get -w --output-watch-events -o json` prints, or JSON Lines.

kubectl prints each event as a pretty-printed JSON object whose closing brace is the only thing at column 0 of
its last line; JSON Lines put one event on each line. Both are read line by line, so memory does not grow
with the file, and every problem is reported with the file and line where the bad event starts.
Files ending in `.gz` (or starting with the gzip magic) are decompressed on the fly; `-` is standard input.
"""

from __future__ import annotations

import gzip
import heapq
import io
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Final, TypeVar, cast

import orjson

from watcher.model import EventType, WatchEvent, new_tuple, parse_time

if TYPE_CHECKING:
    from watcher._native import Front, Parsed

_EVENT_TYPES: Final = {t.value: t for t in EventType}
_SKIPPED_TYPES: Final = {"BOOKMARK", "ERROR"}
_E = TypeVar("_E")  # an event as a reader yields it
READ_BUFFER: Final = 1 << 20  # bytes read at a time: a line of a capture is a few KiB (8 KiB, the default, is slow)


class CaptureError(ValueError):
    """A capture that cannot be read; the message starts with `file:line:`."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        super().__init__(f"{source}:{line}: {message}" if line is not None else f"{source}: {message}")
        self.source = source
        self.line = line


@dataclass(slots=True)
class ReadStats:
    events: int = 0
    skipped_invalid: int = 0
    skipped_other: int = 0  # BOOKMARK and ERROR events
    problems: list[str] = field(default_factory=list)  # first few skipped problems, for the report
    source: str = ""  # where the event yielded last starts: file ...
    line: int = 0  # ... and line

    def note(self, problem: str) -> None:
        self.skipped_invalid += 1
        if len(self.problems) < 5:
            self.problems.append(problem)


def read_capture(source: str, *, stats: ReadStats, skip_invalid: bool = False) -> Iterator[WatchEvent]:
    """Yield the events of one capture file (`-` for stdin) in file order."""
    return _read(source, _to_event, stats=stats, skip_invalid=skip_invalid)


def read_captures(sources: Iterable[str], *, stats: ReadStats, skip_invalid: bool = False) -> Iterator[WatchEvent]:
    """Yield the events of several captures merged by event time (each file is read in its own order)."""
    streams = [read_capture(s, stats=stats, skip_invalid=skip_invalid) for s in sources]
    return streams[0] if len(streams) == 1 else heapq.merge(*streams, key=event_time)


def read_parsed(source: str, front: Front, *, stats: ReadStats, skip_invalid: bool = False) -> Iterator[Parsed]:
    """`read_capture` through the native front end: events parsed natively, for `Engine.process_parsed`.

    What the native parser does not read goes to the reference reader (`to_event`), which names the problem."""

    def parse(chunk: bytes, complete: bool) -> Parsed | None:
        parsed = front.parse(chunk) if complete else "truncated"
        if isinstance(parsed, str):
            _refused(chunk, complete=complete, why=parsed)
            return None
        return parsed

    return _read(source, parse, stats=stats, skip_invalid=skip_invalid)


def read_parsed_captures(
    sources: Iterable[str], front: Front, *, stats: ReadStats, skip_invalid: bool = False
) -> Iterator[Parsed]:
    """`read_captures` through the native front end."""
    streams = [read_parsed(s, front, stats=stats, skip_invalid=skip_invalid) for s in sources]
    return streams[0] if len(streams) == 1 else heapq.merge(*streams, key=parsed_time)


def _read(
    source: str, decode: Callable[[bytes, bool], _E | None], *, stats: ReadStats, skip_invalid: bool
) -> Iterator[_E]:
    """The events of one capture as `decode(text, complete)` makes them (None: an event to skip, BOOKMARK or
    ERROR); a `ValueError` it raises is reported with the file and line, or counted with `skip_invalid`."""
    with _open(source) as stream:
        for line, chunk, complete in _chunks(stream):
            try:
                event = decode(chunk, complete)
            except ValueError as exc:
                if not skip_invalid:
                    raise CaptureError(source, line, str(exc)) from None
                stats.note(f"{source}:{line}: {exc}")
                continue
            if event is None:
                stats.skipped_other += 1
                continue
            stats.events += 1
            stats.source, stats.line = source, line
            yield event


def _to_event(chunk: bytes, complete: bool) -> WatchEvent | None:
    return to_event(_loads(chunk, complete=complete))


def _refused(chunk: bytes, *, complete: bool, why: str) -> None:
    """An event the native parser did not read: the reference reader names what is wrong with it (None for the
    events it skips too); one it reads after all is an error of its own, not passed over in silence."""
    if to_event(_loads(chunk, complete=complete)) is not None:
        raise ValueError(f"an event the native reader does not read ({why}): use --engine python")


def parsed_time(event: Parsed) -> float:
    """`event_time` of a natively parsed event."""
    time = event.time
    return time if time is not None else 0.0


def event_time(event: WatchEvent) -> float:
    """When the event happened: its receive time, else the newest managedFields time of the object."""
    if event.observed_at is not None:
        return event.observed_at
    entries = (event.object.get("metadata") or {}).get("managedFields") or ()
    newest = max((e.get("time") or "" for e in entries if isinstance(e, dict)), default="")
    return parse_time(newest) if newest else 0.0


def to_event(doc: Any) -> WatchEvent | None:
    """Validate one decoded document as a watch event; None for events that carry no object change."""
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
    if "object" in doc or "type" in doc:
        kind = doc.get("type")
        if kind in _SKIPPED_TYPES:
            return None
        if kind not in _EVENT_TYPES:
            raise ValueError(f"unknown watch event type {kind!r} (expected ADDED, MODIFIED, DELETED, BOOKMARK)")
        obj = doc.get("object")
        event_type = _EVENT_TYPES[kind]
    elif "metadata" in doc and "kind" in doc:
        if str(doc.get("kind", "")).endswith("List"):
            raise ValueError(
                "this is a List, not a watch stream: capture with "
                "`kubectl get KIND -A --watch --output-watch-events -o json --show-managed-fields`"
            )
        obj, event_type = doc, EventType.MODIFIED  # `kubectl get -w -o json` without --output-watch-events
    else:
        raise ValueError('not a watch event: expected {"type": ..., "object": {...}}')
    _check_object(obj)
    obj = cast(dict[str, Any], obj)
    observed = doc.get("observedAt")
    if observed is None:
        return new_tuple(WatchEvent, (event_type, obj, None))
    if not isinstance(observed, str):
        raise ValueError(f"observedAt must be an RFC 3339 string, got {observed!r}")
    try:
        return new_tuple(WatchEvent, (event_type, obj, parse_time(observed)))
    except ValueError:
        raise ValueError(f"observedAt {observed!r} is not an RFC 3339 time") from None


def _check_object(obj: Any) -> None:
    # (`type(x) is`, not isinstance: decoded JSON has no subclasses, and this runs for every event)
    if type(obj) is not dict:
        raise ValueError("the event's object is not a JSON object")
    meta = obj.get("metadata")
    if type(meta) is not dict:
        raise ValueError("the object has no metadata")
    uid, name = meta.get("uid"), meta.get("name")
    if type(uid) is not str or not uid:
        raise ValueError("the object has no metadata.uid")
    if type(name) is not str or not name:
        raise ValueError("the object has no metadata.name")
    if type(obj.get("kind")) is not str or type(obj.get("apiVersion")) is not str:
        raise ValueError(f"object {name!r} has no kind or apiVersion")
    managed = meta.get("managedFields")
    if managed is not None and type(managed) is not list:
        raise ValueError(f"metadata.managedFields of {name!r} is not a list")


def _chunks(stream: IO[bytes]) -> Iterator[tuple[int, bytes, bool]]:
    """Split a stream into JSON texts: one per line, or pretty-printed ones ending with `}` at column 0.

    Yields (line where the text starts, text, whether it is complete); the text is decoded by the caller.
    """
    pending: list[bytes] = []
    start = 0
    for number, line in enumerate(stream, 1):
        if pending:
            pending.append(line)
            if line[:1] == b"}":
                yield start, b"".join(pending), True
                pending = []
            continue
        if line[:1] == b"{" and line[-2:] == b"}\n":  # the JSON Lines fast path: no copy
            yield number, line, True
            continue
        text = line.strip()
        if text == b"{":
            pending, start = [line], number
        elif text:
            yield number, text, True
    if pending:
        yield start, b"".join(pending), False


def _loads(data: bytes, *, complete: bool) -> Any:
    if not complete:
        raise ValueError("the capture ends inside this event (truncated file?)")
    if data[:1] != b"{":
        raise ValueError(f"expected a JSON object, found {data[:40]!r}")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None


@contextmanager
def _open(source: str) -> Iterator[BinaryIO]:
    """The capture's bytes: stdin for `-`, gunzipped when the content starts with the gzip magic."""
    if source == "-":
        raw = io.BufferedReader(io.FileIO(sys.stdin.fileno(), "rb", closefd=False), READ_BUFFER)
    else:
        try:
            raw = io.BufferedReader(io.FileIO(source, "rb"), READ_BUFFER)
        except OSError as exc:
            raise CaptureError(source, None, f"cannot open: {exc.strerror or exc}") from None
    try:
        if raw.peek(2)[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=raw) as unpacked:
                yield cast(BinaryIO, unpacked)
        else:
            yield raw
    finally:
        raw.close()
