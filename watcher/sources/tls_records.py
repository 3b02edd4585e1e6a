"""TLS read a record at a time, so that reading a watch does not fragment the heap.

asyncio's and uvloop's TLS transports take the plaintext out of what a socket received with
`ssl.SSLObject.read(256 KiB)`, once per TLS record, and each call allocates a 256 KiB bytes object that it then
shrinks to the record's plaintext. The API server sends each watch event as a record of its own (1 to 3 KB), so the
watcher allocated and shrank 256 KiB per event. Once glibc's malloc has raised its mmap threshold (it does when a
large block such as a list response is freed), these blocks come from the heap, and the small blocks allocated
between them keep the space they leave from holding the next 256 KiB: the heap grew by about 7 MiB a minute at 300
events/s, all of it free space, while what the process held stayed flat (`docs/benchmarks.md`, against a client-go
informer). A record holds at most 16 KiB of plaintext, so asking for at most that much returns the same bytes,
record by record, and allocates 16 KiB at a time: a size the heap's free space serves.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

MAX_RECORD: Final = 2**14  # bytes of plaintext in a TLS record (RFC 8446, 5.1; RFC 5246, 6.2.1)


class RecordReads(ssl.SSLObject):
    """An `SSLObject` whose `read` asks for at most one record's plaintext.

    Callers read until nothing is left, as the event loops do: a read may return less than asked.
    """

    def read(self, len: int = 1024, buffer: WriteableBuffer | None = None) -> bytes:
        return super().read(min(len, MAX_RECORD), buffer)


def read_by_record() -> None:
    """Have every TLS connection of this process's event loop read one record at a time.

    That is the API server's watches, the served endpoints, the sinks' requests: `ssl.SSLContext.sslobject_class`, which
    `wrap_bio` makes the event loops' TLS objects of, for every context, also those libraries make
    (kubernetes-asyncio's).
    """
    ssl.SSLContext.sslobject_class = RecordReads
