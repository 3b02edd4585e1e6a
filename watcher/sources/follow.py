"""Read a log as it is written: a file as it grows (as `tail -F` does), or a pipe as its writer writes.

`fightwatch audit --follow` reads what a managed cluster's CLI prints as its audit events arrive (`aws logs tail
--follow` into a pipe or a file, a loop of `gcloud logging read` or `az monitor log-analytics query`). At the end
of a file it waits for more, and starts over from the beginning when the file is truncated or replaced (rotated);
a pipe ends when its writer closes it. While it waits, `idle` is called every `poll` seconds, so the analysis can
move its clock on (findings resolve when their object goes quiet, even when nothing more arrives). Ctrl-C
(KeyboardInterrupt) ends the wait.
"""

from __future__ import annotations

import io
import os
import select
import stat
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from watcher.sources.capture import READ_BUFFER, CaptureError, skip_bom
from watcher.sources.streams import ReadSome

POLL: Final = 1.0  # seconds between looks at a file's end (and calls of `idle`)


class Following(io.RawIOBase):
    """The bytes of a file or pipe as they are written; reads block (calling `idle`) until there are some."""

    def __init__(self, source: str, *, idle: Callable[[], None], poll: float = POLL) -> None:
        super().__init__()
        self.source = source
        self._idle = idle
        self._poll = poll
        self._fd = sys.stdin.fileno() if source == "-" else os.open(source, os.O_RDONLY)
        self._own = source != "-"
        self._file = stat.S_ISREG(os.fstat(self._fd).st_mode)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        while True:
            if not self._file:
                ready, _, _ = select.select([self._fd], [], [], self._poll)
                if not ready:
                    self._idle()
                    continue
            data = os.read(self._fd, len(buffer))
            if data or not self._file:
                buffer[: len(data)] = data
                return len(data)  # (0: the pipe's writer closed it)
            self._idle()
            time.sleep(self._poll)
            self._start_over_if_replaced()

    def _start_over_if_replaced(self) -> None:
        """Reopen the file when its name points to another one now (rotated); rewind when it was truncated."""
        try:
            named = os.stat(self.source)
        except FileNotFoundError:  # (between a rotation's rename and the new file)
            return
        current = os.fstat(self._fd)
        if (named.st_dev, named.st_ino) != (current.st_dev, current.st_ino):
            os.close(self._fd)
            self._fd = os.open(self.source, os.O_RDONLY)
        elif current.st_size < os.lseek(self._fd, 0, os.SEEK_CUR):
            os.lseek(self._fd, 0, os.SEEK_SET)

    def close(self) -> None:
        if not self.closed and self._own:
            os.close(self._fd)
        super().close()


@contextmanager
def open_following(
    source: str, *, idle: Callable[[], None], error: type[CaptureError], poll: float = POLL
) -> Iterator[io.BufferedReader]:
    """Open the log to follow, buffered.

    Plain text only: a gzipped file cannot be followed.
    """
    try:
        raw = Following(source, idle=idle, poll=poll)
    except OSError as exc:
        raise error(source, None, f"cannot open: {exc.strerror or exc}") from None
    stream = ReadSome(raw, READ_BUFFER)
    try:
        if stream.peek(2)[:2] == b"\x1f\x8b":
            raise error(source, None, "a gzipped log cannot be followed: --follow reads plain text as it is written")
        skip_bom(stream)
        yield stream
    finally:
        stream.close()


__all__ = ["POLL", "Following", "open_following"]
