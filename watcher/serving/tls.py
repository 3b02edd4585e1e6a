"""Serving certificates: read from files and re-read when they change on disk, or self-signed at start.

The server listens with one `ssl.SSLContext` whose `sni_callback` moves every new handshake to the newest
certificate loaded, so a certificate rotated on disk (cert-manager renewing it, the kubelet updating a mounted
Secret) is served from the next connection on, with no restart and no connection dropped. `refresh()` checks the
files (inode, size, modification time; a Secret volume swaps a symlink) and loads the new pair into a new context
only when it is complete and consistent: a key that does not match its certificate yet (files written one after
the other) keeps the old certificate until the next check.

Without files, an ECDSA P-256 certificate for this host's names is generated at start (valid a year, renewed 30
days before it expires); its SHA-256 fingerprint is what a client can pin.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ClientAuth = Literal["none", "optional", "required"]
SELF_SIGNED_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)  # (well before FightwatchCertificateExpiring: 7 days)
_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


class CertificateError(Exception):
    """A certificate, key or CA that cannot be used; the message names the file."""


@dataclass(frozen=True, slots=True)
class Certificate:
    """What is known of the certificate being served."""

    subject: str
    not_after: datetime.datetime
    fingerprint: str  # SHA-256 of the DER certificate, hex with colons (as openssl x509 -fingerprint prints it)
    self_signed: bool
    source: str  # the certificate file, or "self-signed"
    pem: bytes  # the certificate chain (public; what a client pins a self-signed certificate with)


Stamp = tuple[tuple[int, int, int] | None, ...]


class ServingTls:
    """The server side of TLS: its certificate (files or self-signed), and client certificates of a CA."""

    def __init__(
        self,
        *,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        client_ca_file: Path | None = None,
        client_auth: ClientAuth = "optional",
        min_version: Literal["1.2", "1.3"] = "1.2",
        hosts: tuple[str, ...] = (),
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        """Load the server's certificate (the files, else a self-signed one) and the client CA.

        `client_auth` applies with a `client_ca_file`: `required` refuses a handshake without a certificate of that
        CA, `optional` lets the request authenticate otherwise. `hosts`: extra names and addresses a self-signed
        certificate is for. Raises CertificateError when the files cannot be used.
        """
        if (cert_file is None) != (key_file is None):
            raise ValueError("give both cert_file and key_file, or neither")
        self._cert_file, self._key_file, self._ca_file = cert_file, key_file, client_ca_file
        self._client_auth = client_auth if client_ca_file is not None else "none"
        self._min_version = _VERSIONS[min_version]
        self._hosts = hosts
        self._clock = clock
        self._stamp: Stamp = self._files_stamp()
        self.reloads = 0  # certificates loaded after the first
        self.reload_errors = 0
        self.last_error = ""
        self._current, self.certificate = self._load()
        # The listener's context: the first certificate, and a callback (OpenSSL calls it on every ClientHello,
        # with or without a server name) that moves each handshake to the newest one.
        self.context = self._current
        self.context.sni_callback = self._select

    @property
    def verifies_clients(self) -> bool:
        return self._client_auth != "none"

    def refresh(self) -> bool:
        """Load the certificate again if its files changed (or a self-signed one expires within 30 days).

        True when a new one is served from now on. A pair that cannot be loaded keeps the old one
        (`last_error` says why).
        """
        if self._cert_file is None:
            if self.certificate.not_after - self._clock() > RENEW_BEFORE:
                return False
        else:
            stamp = self._files_stamp()
            if stamp == self._stamp:
                return False
            self._stamp = stamp  # (a pair that fails is tried again when the files change again)
        try:
            self._current, self.certificate = self._load()
        except CertificateError as exc:
            self.reload_errors += 1
            self.last_error = str(exc)
            return False
        self.reloads += 1
        self.last_error = ""
        return True

    def _select(self, connection: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None, _: ssl.SSLContext) -> None:
        connection.context = self._current

    def _files_stamp(self) -> Stamp:
        def stamp(path: Path | None) -> tuple[int, int, int] | None:
            if path is None:
                return None
            try:
                st = path.stat()
            except OSError:
                return None
            return (st.st_ino, st.st_size, st.st_mtime_ns)

        return (stamp(self._cert_file), stamp(self._key_file), stamp(self._ca_file))

    def _new_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = self._min_version
        context.verify_mode = {
            "none": ssl.CERT_NONE,
            "optional": ssl.CERT_OPTIONAL,
            "required": ssl.CERT_REQUIRED,
        }[self._client_auth]
        return context

    def _load(self) -> tuple[ssl.SSLContext, Certificate]:
        if self._cert_file is None or self._key_file is None:
            cert_pem, key_pem = self_signed(self._hosts, now=self._clock())
            source = "self-signed"
        else:
            cert_pem, key_pem = _read(self._cert_file), _read(self._key_file)
            source = str(self._cert_file)
        context = self._new_context()
        try:
            with _in_memory(cert_pem) as cert_path, _in_memory(key_pem) as key_path:
                context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            problem = f"the certificate and key {self._key_file} cannot be used: {exc}"
            raise CertificateError(f"{source}: {problem}") from None
        if self._ca_file is not None:
            ca_pem = _read(self._ca_file)
            try:
                context.load_verify_locations(cadata=ca_pem.decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as exc:
                raise CertificateError(f"{self._ca_file}: not a PEM CA bundle: {exc}") from None
        return context, describe(cert_pem, source=source)


def describe(cert_pem: bytes, *, source: str) -> Certificate:
    """Describe the first certificate of a PEM chain, as `Certificate`."""
    from cryptography import x509  # noqa: PLC0415 - 14 MiB, only where certificates are served
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise CertificateError(f"{source}: not a PEM certificate: {exc}") from None
    der = cert.public_bytes(serialization.Encoding.DER)
    return Certificate(
        subject=cert.subject.rfc4514_string(),
        not_after=cert.not_valid_after_utc,
        fingerprint=fingerprint(der),
        self_signed=source == "self-signed",
        source=source,
        pem=cert_pem,
    )


def fingerprint(der: bytes) -> str:
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def self_signed(hosts: tuple[str, ...] = (), *, now: datetime.datetime) -> tuple[bytes, bytes]:
    """Generate a key and a certificate signed by it, as PEM bytes.

    The certificate is for localhost, this host's name, $POD_IP and `hosts`.
    """
    from cryptography import x509  # noqa: PLC0415 - 14 MiB, only where certificates are served
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in ("localhost", socket.gethostname(), "127.0.0.1", "::1", os.environ.get("POD_IP", ""), *hosts):
        if not host:
            continue
        try:
            name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            name = x509.DNSName(host)
        if name not in names:
            names.append(name)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fightwatch (self-signed)")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CertificateError(f"{path}: cannot read: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _in_memory(data: bytes) -> Iterator[str]:
    """Yield a path the ssl module can load `data` from, never on a disk (a read-only root filesystem has no room).

    A memfd on Linux, a private temporary file elsewhere.
    """
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("fightwatch-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as folder:  # (0700)
        path = Path(folder) / "pem"
        path.write_bytes(data)
        yield str(path)


__all__ = ["Certificate", "CertificateError", "ServingTls", "describe", "fingerprint", "self_signed"]
