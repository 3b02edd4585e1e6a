"""TLS read a record at a time (`sources.tls_records`): the same plaintext, in reads of at most one record, between
two TLS objects on memory BIOs as the event loops use them, and through a real event loop's TLS connection."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
import uvloop

from watcher.serving.tls import self_signed
from watcher.sources.tls_records import MAX_RECORD, RecordReads, read_by_record

HOST = "fightwatch.test"


def contexts(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert, key = self_signed((HOST,), now=datetime.datetime.now(datetime.UTC))  # (verified: valid now)
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    client = ssl.create_default_context(cafile=str(folder / "tls.crt"))
    return server, client


def pump(source: ssl.MemoryBIO, target: ssl.MemoryBIO) -> None:
    if data := source.read():
        target.write(data)


def connected(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> tuple[ssl.SSLObject, ssl.SSLObject, Callable[[], None]]:
    """A server and a client TLS object, handshaken over memory BIOs (`wrap_bio`, as the event loops make them), and
    what hands the client the records the server wrote since."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(c_in, c_out, server_hostname=HOST)
    server = server_context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):  # (until the other side answered)
                side.do_handshake()
        pump(c_out, s_in)
        pump(s_out, c_in)
    return server, client, lambda: pump(s_out, c_in)


def test_each_read_asks_for_one_record_and_all_plaintext_arrives(tmp_path: Path) -> None:
    server_context, client_context = contexts(tmp_path)
    client_context.sslobject_class = RecordReads
    server, client, to_client = connected(server_context, client_context)
    assert isinstance(client, RecordReads)
    sent = [bytes([n]) * size for n, size in enumerate((1_500, 2_300, 40_000, 16_384, 7))]
    for message in sent:  # (one write of 40,000 bytes is three records)
        server.write(message)
    to_client()
    reads = []
    while True:
        try:
            reads.append(client.read(256 * 1024))  # what asyncio and uvloop ask for
        except ssl.SSLWantReadError:
            break
    assert b"".join(reads) == b"".join(sent)
    assert max(map(len, reads)) <= MAX_RECORD
    buffer = bytearray(256 * 1024)
    server.write(b"x" * 20_000)
    to_client()
    # (into a buffer: a count, where typeshed has every `read` return bytes)
    assert cast(int, client.read(len(buffer), buffer)) == MAX_RECORD
    assert cast(int, client.read(len(buffer), buffer)) == 20_000 - MAX_RECORD


@pytest.mark.parametrize("reads", [ssl.SSLObject, RecordReads])
def test_reading_a_small_record_allocates_a_record_not_what_was_asked(
    tmp_path: Path, reads: type[ssl.SSLObject]
) -> None:
    server_context, client_context = contexts(tmp_path)
    client_context.sslobject_class = reads
    server, client, to_client = connected(server_context, client_context)
    server.write(b"e" * 1_500)  # a watch event
    to_client()
    tracemalloc.start()
    try:
        assert len(client.read(256 * 1024)) == 1_500
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (peak > 256 * 1024) is (reads is ssl.SSLObject)


@pytest.fixture
def by_record() -> Iterator[None]:
    """`read_by_record` for one test: it sets what every context makes, so the default comes back after."""
    default = ssl.SSLContext.sslobject_class
    read_by_record()
    yield
    ssl.SSLContext.sslobject_class = default


@pytest.mark.usefixtures("by_record")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_an_event_loop_connection_reads_by_record(tmp_path: Path, loop: str) -> None:
    factory = uvloop.new_event_loop if loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(exchange(tmp_path))


async def exchange(tmp_path: Path) -> None:
    server_context, client_context = contexts(tmp_path)
    lines = [b"%d" % n * 700 + b"\n" for n in range(50)]  # (each line written alone: a record each)

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for line in lines:
            writer.write(line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context, server_hostname=HOST)
        assert isinstance(writer.get_extra_info("ssl_object"), RecordReads)
        assert await reader.read() == b"".join(lines)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
