"""Byte streams the readers need that `io` does not have.

Kept out of the compiled modules: they subclass `io`'s classes, which mypyc's native classes cannot.
"""

from __future__ import annotations

import io
import zlib
from typing import Final

READ_SOME: Final = 1 << 20  # what `ReadSome.read()` returns at most, asked for everything


class Filling(io.RawIOBase):
    """A stream read until each buffer is full (or the stream ends).

    Buffered over it, `peek` shows a full buffer, where a gzip stream of many small members (as Firehose writes them)
    would show only its first member.
    """

    def __init__(self, stream: io.BufferedIOBase) -> None:
        super().__init__()
        self._stream = stream
        self._broken: Exception | None = None  # where the stream broke off, after bytes still to be handed on

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self._broken is not None:
            raise self._broken
        view = memoryview(buffer)
        filled = 0
        while filled < len(view):
            try:  # (read1: one read of what is there, so that what came before a break is kept)
                data = self._stream.read1(len(view) - filled)
            except (OSError, EOFError, zlib.error) as exc:  # (a truncated or corrupt gzip stream)
                self._broken = exc  # raised again at every read: the stream stays broken
                if not filled:
                    raise
                break  # the bytes before the break first: what they hold is read before the error
            if not data:
                break
            view[filled : filled + len(data)] = data
            filled += len(data)
        return filled


class ReadSome(io.BufferedReader):
    """A buffered reader whose `read(n)` returns what is there instead of waiting for n bytes.

    It returns at least a byte. The streaming JSON parser asks for 64 KiB at a time, which a followed log may take
    minutes to write.
    """

    def read(self, size: int | None = -1, /) -> bytes:
        return self.read1(size if size is not None and size >= 0 else READ_SOME)


__all__ = ["Filling", "ReadSome"]
