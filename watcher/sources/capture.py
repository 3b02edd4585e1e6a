"""Read recorded watch streams: what `kubectl get -w --output-watch-events -o json` prints, or JSON Lines.

kubectl prints each event as a pretty-printed JSON object whose closing brace is the only thing at column 0 of
its last line; JSON Lines put one event on each line. Both are read line by line, so memory does not grow
with the file, and each event's text goes to the engine's decoder (`Engine.decode`): every problem is reported
with the file and line where the bad event starts. Files ending in `.gz` (or starting with the gzip magic) are
decompressed on the fly; `-` is standard input. A file that breaks off (a truncated or corrupt gzip stream, a
read error) is reported with how far it was read; the events before the break have been yielded.
"""

from __future__ import annotations

import gzip
import heapq
import io
import sys
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, BinaryIO, ClassVar, Final, NoReturn, Protocol, TypeVar, cast

from watcher.detection.attribution import Decoder
from watcher.detection.events import ObjectEvent
from watcher.sources.streams import Filling

T = TypeVar("T")

BOM: Final = b"\xef\xbb\xbf"  # UTF-8's byte-order mark
READ_BUFFER: Final = 1 << 20  # bytes read at a time: a line of a capture is a few KiB (8 KiB, the default, is slow)


class CaptureError(ValueError):
    """A capture that cannot be read; the message starts with `file:line:`."""

    noun: ClassVar[str] = "capture"  # what the file is, in messages

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
    lines: int = 0  # lines read, in every file
    file_lines: int = 0  # lines read of the file being read

    def note(self, problem: str) -> None:
        self.skipped_invalid += 1
        if len(self.problems) < 5:
            self.problems.append(problem)


def read_capture(
    source: str,
    decode: Callable[[bytes], T | None],
    *,
    stats: ReadStats,
    skip_invalid: bool = False,
    error: type[CaptureError] = CaptureError,
) -> Generator[T, None, None]:
    """Yield the events of one capture file (`-` for stdin) in file order, as `decode` makes them.

    `decode` is an engine's decoder, `Engine.decode`; or another reader's, e.g. of audit logs, with its own `error`
    class.

    A `ValueError` of `decode` is reported as an `error` with the file and line, or (with `skip_invalid`)
    counted and skipped; events it skips (None: BOOKMARK, ERROR) are counted.
    """
    with open_source(source, error) as stream:
        yield from read_texts(stream, source, decode, stats=stats, skip_invalid=skip_invalid, error=error)


def read_texts(
    stream: IO[bytes],
    source: str,
    decode: Callable[[bytes], T | None],
    *,
    stats: ReadStats,
    skip_invalid: bool = False,
    error: type[CaptureError] = CaptureError,
) -> Generator[T, None, None]:
    """`read_capture` of a stream already open (`open_source`): its JSON texts, one a line or pretty-printed."""
    try:
        for line, chunk, complete in _chunks(stream, stats):
            try:
                event = decode(chunk) if complete else _incomplete(error)
            except ValueError as exc:
                if not skip_invalid:
                    raise error(source, line, str(exc)) from None
                stats.note(f"{source}:{line}: {exc}")
                continue
            if event is None:
                stats.skipped_other += 1
                continue
            stats.events += 1
            stats.source, stats.line = source, line
            yield event
    except _BrokenFileError as exc:
        raise error(source, None, str(exc)) from None


def read_captures(
    sources: Iterable[str], decode: Decoder, *, stats: ReadStats, skip_invalid: bool = False
) -> Generator[ObjectEvent, None, None]:
    """Yield the events of several captures merged by event time.

    Each file is read in its own order. Close it when leaving it early: its files are closed then (a compiled generator
    is not closed when collected).
    """
    streams = [read_capture(s, decode, stats=stats, skip_invalid=skip_invalid) for s in sources]
    return streams[0] if len(streams) == 1 else merged(streams, event_time)


def merged(streams: list[Generator[T, None, None]], key: Callable[[T], float]) -> Generator[T, None, None]:
    """Merge the streams by time (`key`).

    All of them are closed (their files too) when this one is, or one breaks.
    """
    try:
        yield from heapq.merge(*streams, key=key)
    finally:
        for stream in streams:
            stream.close()


def event_time(event: ObjectEvent) -> float:
    """When the event happened (see `ObjectEvent.time`), 0 when it cannot be told."""
    time = event.time
    return time if time is not None else 0.0


def _incomplete(error: type[CaptureError]) -> NoReturn:
    raise ValueError(f"the {error.noun} ends inside this event (truncated file?)")


class _BrokenFileError(Exception):
    """A file that could not be read to its end (the message says why and how far it got)."""


def broken_reason(exc: BaseException) -> str:
    """Why a file could not be read to its end: a truncated or corrupt gzip stream, or a read error."""
    if isinstance(exc, EOFError):
        return "the compressed stream ends early (truncated file?)"
    if isinstance(exc, zlib.error | gzip.BadGzipFile):
        return f"the compressed stream is corrupt ({exc})"
    return f"read error ({getattr(exc, 'strerror', None) or exc})"


def _broken(exc: BaseException, lines: int) -> _BrokenFileError:
    return _BrokenFileError(f"{broken_reason(exc)}; read up to line {lines:,}")


def _chunks(stream: IO[bytes], stats: ReadStats) -> Iterator[tuple[int, bytes, bool]]:
    """Split a stream into JSON texts: one per line, or pretty-printed ones ending with `}` at column 0.

    Yields (line where the text starts, text, whether it is complete); the text is decoded by the caller. Counts
    the lines read in `stats.lines`; a stream that breaks off is a `_BrokenFileError`. (One generator, not one
    delegating to another: each event passes through it.)
    """
    pending: list[bytes] = []
    start = 0
    stats.file_lines = 0
    try:
        for number, line in enumerate(stream, 1):
            stats.file_lines = number
            stats.lines += 1
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
    except (OSError, EOFError, zlib.error) as exc:  # (gzip.BadGzipFile is an OSError)
        raise _broken(exc, stats.file_lines) from None
    if pending:
        yield start, b"".join(pending), False


class _Peekable(Protocol):
    def peek(self, n: int, /) -> bytes: ...
    def read(self, size: int, /) -> bytes: ...


def skip_bom(stream: _Peekable) -> None:
    """Read past a UTF-8 byte-order mark at the stream's start (a broken stream: its reader reports it)."""
    try:
        if stream.peek(3)[:3] == BOM:
            stream.read(3)
    except (OSError, EOFError, zlib.error):  # reading reports it, with how far it got
        return


@contextmanager
def open_source(source: str, error: type[CaptureError] = CaptureError) -> Iterator[BinaryIO]:
    """Open the file's bytes: stdin for `-`, gunzipped when the content starts with the gzip magic.

    Without a UTF-8 byte-order mark at the start (Azure's exports carry one). A file that cannot be opened is an
    `error`.
    """
    if source == "-":
        raw = io.BufferedReader(io.FileIO(sys.stdin.fileno(), "rb", closefd=False), READ_BUFFER)
    else:
        try:
            raw = io.BufferedReader(io.FileIO(source, "rb"), READ_BUFFER)
        except OSError as exc:
            raise error(source, None, f"cannot open: {exc.strerror or exc}") from None
    try:
        if raw.peek(2)[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=raw) as unpacked:
                # (buffered again, a full buffer at a time: a gzip stream of many small members, as Firehose writes,
                # would show a reader peeking at its head only the first member)
                stream = io.BufferedReader(Filling(unpacked), READ_BUFFER)
                skip_bom(stream)
                yield cast(BinaryIO, stream)
        else:
            skip_bom(raw)
            yield raw
    finally:
        raw.close()
