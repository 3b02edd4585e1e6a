"""Serving certificates: self-signed at start, read from files, and rotated on disk without a restart, checked with
real TLS handshakes on the loopback."""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509

from watcher.serving.tls import CertificateError, ServingTls, fingerprint, self_signed

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)


def write_pair(folder: Path, name: str = "tls") -> tuple[Path, Path]:
    cert, key = self_signed(("fightwatch.test",), now=NOW)
    (folder / f"{name}.crt").write_bytes(cert)
    (folder / f"{name}.key").write_bytes(key)
    return folder / f"{name}.crt", folder / f"{name}.key"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ServingTls, int, Path]]:
    cert, key = write_pair(tmp_path)
    tls = ServingTls(cert_file=cert, key_file=key)

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls.context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield tls, port, tmp_path
    finally:
        server.close()
        await server.wait_closed()


async def presented(port: int) -> str:
    """The SHA-256 fingerprint of the certificate the server presents to a new connection."""
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE  # (the test reads the certificate, whichever it is)
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
    ssl_object = writer.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True)
    writer.close()
    return fingerprint(der)


async def test_the_certificate_of_the_files_is_served(served: tuple[ServingTls, int, Path]) -> None:
    tls, port, _ = served
    assert not tls.certificate.self_signed
    assert await presented(port) == tls.certificate.fingerprint
    assert tls.certificate.not_after == NOW + datetime.timedelta(days=365)


async def test_a_certificate_rotated_on_disk_is_served_from_the_next_connection(
    served: tuple[ServingTls, int, Path],
) -> None:
    tls, port, folder = served
    before = tls.certificate.fingerprint
    assert not tls.refresh()  # nothing changed
    new_cert, new_key = write_pair(folder, "next")
    os.replace(new_key, folder / "tls.key")
    os.replace(new_cert, folder / "tls.crt")
    assert tls.refresh()
    assert tls.certificate.fingerprint != before
    assert await presented(port) == tls.certificate.fingerprint
    assert tls.reloads == 1


async def test_a_half_rotated_pair_keeps_the_old_certificate_until_the_pair_matches(
    served: tuple[ServingTls, int, Path],
) -> None:
    tls, port, folder = served
    before = tls.certificate.fingerprint
    new_cert, new_key = write_pair(folder, "next")
    os.replace(new_cert, folder / "tls.crt")  # the certificate first: it does not match the old key
    assert not tls.refresh()
    assert "cannot be used" in tls.last_error
    assert str(folder / "tls.crt") in tls.last_error
    assert await presented(port) == before
    assert not tls.refresh()  # (not tried again until the files change again)
    assert tls.reload_errors == 1
    os.replace(new_key, folder / "tls.key")
    assert tls.refresh()
    assert tls.last_error == ""
    assert await presented(port) == tls.certificate.fingerprint != before


async def test_without_files_a_self_signed_certificate_is_served_and_renewed_before_it_expires() -> None:
    now = [NOW]
    tls = ServingTls(hosts=("fightwatch.example",), clock=lambda: now[0])
    assert tls.certificate.self_signed
    assert tls.certificate.source == "self-signed"

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls.context)
    port = server.sockets[0].getsockname()[1]
    try:
        first = await presented(port)
        assert first == tls.certificate.fingerprint
        assert not tls.refresh()
        now[0] = tls.certificate.not_after - datetime.timedelta(hours=1)
        assert tls.refresh()
        assert tls.certificate.not_after > now[0] + datetime.timedelta(days=300)
        assert await presented(port) != first
    finally:
        server.close()
        await server.wait_closed()


async def test_a_self_signed_certificate_verifies_for_the_names_it_is_for(tmp_path: Path) -> None:
    tls = ServingTls(hosts=("fightwatch.example", "10.1.2.3"))
    cert = x509.load_pem_x509_certificate(tls.certificate.pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "fightwatch.example"} <= set(names.get_values_for_type(x509.DNSName))
    assert {"127.0.0.1", "10.1.2.3"} <= {str(a) for a in names.get_values_for_type(x509.IPAddress)}
    (tmp_path / "pinned.crt").write_bytes(tls.certificate.pem)

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls.context)
    port = server.sockets[0].getsockname()[1]
    try:  # a client that trusts exactly this certificate verifies it, host name included
        client = ssl.create_default_context(cafile=str(tmp_path / "pinned.crt"))
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        writer.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="elsewhere.example")
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        ("missing.crt", "tls.key", "missing.crt: cannot read"),
        ("garbage.crt", "tls.key", "garbage.crt: the certificate and key"),
        ("tls.crt", "other.key", "tls.crt: the certificate and key"),
    ],
)
def test_unusable_files_are_errors_that_name_them(tmp_path: Path, cert: str, key: str, message: str) -> None:
    write_pair(tmp_path)
    write_pair(tmp_path, "other")
    (tmp_path / "garbage.crt").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(CertificateError, match=message):
        ServingTls(cert_file=tmp_path / cert, key_file=tmp_path / key)
