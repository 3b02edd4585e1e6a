"""A real, throw-away Kubernetes control plane: etcd + kube-apiserver (+ kube-controller-manager on demand).

Synchronous on purpose: usable from a pytest session fixture and from plain scripts.

    cp = start_control_plane(tmp_dir)
    try:
        ...  # cp.url, cp.token, cp.ca_file, cp.kubeconfig
    finally:
        cp.stop()

Binaries come from ``scripts/control-plane.sh``: the pinned Kubernetes release named by ``$FIGHTWATCH_KUBERNETES``
(``current``, the default, or ``oldest``), built once from Go modules and cached, unless ``$KUBEBUILDER_ASSETS`` or
``$TEST_ASSET_*`` name others. Every
port is a free loopback port picked at start, so several control planes can run side by side. TLS
verification stays on everywhere: a throw-away CA signs the apiserver's and the controller manager's
serving certificates. Nothing stands in for readiness: each component's health endpoint is polled until
it answers, against a deadline, and a component that exits or never gets ready raises RuntimeError
carrying the tail of its log.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from . import REPO_ROOT
from .commands import output_of

CONTROL_PLANE_SCRIPT = REPO_ROOT / "scripts" / "control-plane.sh"

READY_DEADLINE = 60.0  # seconds for one component to become healthy
STOP_GRACE = 15.0  # seconds between SIGTERM and SIGKILL
LOG_TAIL_LINES = 40
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
ADMIN_USER = "fightwatch-admin"

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = fightwatch-test

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost{extra_names}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


RELEASES = ("current", "oldest")  # the pinned releases (scripts/kubernetes/*/go.mod)


def default_release() -> str:
    """The release everything runs on: `$FIGHTWATCH_KUBERNETES`, else `current`."""
    release = os.environ.get("FIGHTWATCH_KUBERNETES") or "current"
    if release not in RELEASES:
        raise RuntimeError(f"FIGHTWATCH_KUBERNETES={release!r}: use one of {', '.join(RELEASES)}")
    return release


@functools.cache
def control_plane_bin_dir(release: str | None = None) -> Path:
    """Directory with etcd, kube-apiserver, kube-controller-manager and kubectl of a pinned release (`current` or
    `oldest`; default: `default_release()`), built on first use."""
    proc = subprocess.run(
        ["bash", str(CONTROL_PLANE_SCRIPT), release or default_release()],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-LOG_TAIL_LINES:])
        raise RuntimeError(f"{CONTROL_PLANE_SCRIPT} failed (exit {proc.returncode}):\n{tail}")
    bin_dir = Path(lines[-1])
    for name in ("etcd", "kube-apiserver"):
        if not os.access(bin_dir / name, os.X_OK):
            raise RuntimeError(f"{CONTROL_PLANE_SCRIPT} printed {bin_dir}, which has no executable {name}")
    return bin_dir


@functools.cache
def binary_version(binary: Path) -> str:
    """The gitVersion a Kubernetes binary was built with (`--version`: `Kubernetes v1.37.2`)."""
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) < 2 or not words[-1].startswith("v1."):
        raise RuntimeError(f"{binary} --version printed {proc.stdout.strip()!r} (exit {proc.returncode})")
    return words[-1]


def free_port() -> int:
    """A loopback TCP port that is free right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """preexec_fn: have the kernel SIGTERM the child if the process that started it dies (Linux only)."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _openssl(*args: str | Path, cwd: Path) -> None:
    output_of(["openssl", *args], what=f"openssl {args[0]}", cwd=cwd)


@dataclass
class _Pki:
    ca_cert: Path
    apiserver_cert: Path
    apiserver_key: Path
    controller_manager_cert: Path
    controller_manager_key: Path
    service_account_key: Path
    service_account_pub: Path


def _make_pki(pki: Path, extra_ips: Sequence[str] = ()) -> _Pki:
    """A throw-away CA, serving certificates for 127.0.0.1/localhost (and `extra_ips`) signed by it, a client
    certificate (`audit-client.crt`: the API server's, to authenticate to an audit webhook), a service-account key."""
    pki.mkdir(parents=True, exist_ok=True)
    cnf = pki / "openssl.cnf"
    cnf.write_text(_OPENSSL_CONFIG.format(extra_names="".join(f", IP:{ip}" for ip in extra_ips)))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
             "-config", cnf, "-extensions", "ca_ext", "-subj", "/CN=fightwatch-test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=pki)  # fmt: skip
    for name in ("apiserver", "controller-manager", "watcher"):
        _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", cnf,
                 "-subj", f"/CN=fightwatch-test-{name}", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 cwd=pki)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-set_serial", str(secrets.randbits(63)), "-days", "3650", "-sha256",
                 "-extfile", cnf, "-extensions", "server_ext", "-out", f"{name}.crt", cwd=pki)  # fmt: skip
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", cnf, "-subj", "/CN=kube-apiserver-audit",
             "-keyout", "audit-client.key", "-out", "audit-client.csr", cwd=pki)  # fmt: skip
    _openssl("x509", "-req", "-in", "audit-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-set_serial", str(secrets.randbits(63)), "-days", "3650", "-sha256",
             "-extfile", cnf, "-extensions", "client_ext", "-out", "audit-client.crt", cwd=pki)  # fmt: skip
    # The API server's client certificate for kubelets (logs, exec), in system:masters as kubeadm's is.
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", cnf,
             "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client",
             "-keyout", "kubelet-client.key", "-out", "kubelet-client.csr", cwd=pki)  # fmt: skip
    _openssl("x509", "-req", "-in", "kubelet-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-set_serial", str(secrets.randbits(63)), "-days", "3650", "-sha256",
             "-extfile", cnf, "-extensions", "client_ext", "-out", "kubelet-client.crt", cwd=pki)  # fmt: skip
    _openssl("genrsa", "-out", "service-account.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "service-account.key", "-pubout", "-out", "service-account.pub", cwd=pki)
    return _Pki(
        ca_cert=pki / "ca.crt",
        apiserver_cert=pki / "apiserver.crt",
        apiserver_key=pki / "apiserver.key",
        controller_manager_cert=pki / "controller-manager.crt",
        controller_manager_key=pki / "controller-manager.key",
        service_account_key=pki / "service-account.key",
        service_account_pub=pki / "service-account.pub",
    )


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        self.log_file.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"<cannot read {self.log_path}: {exc}>"
        return "\n".join(text.splitlines()[-lines:])

    def failure(self, what: str) -> RuntimeError:
        return RuntimeError(f"{self.name} {what}; last lines of {self.log_path}:\n{self.log_tail()}")

    def check_running(self) -> None:
        rc = self.popen.poll()
        if rc is not None:
            raise self.failure(f"exited with status {rc}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log_file.close()


def _spawn(name: str, argv: list[str], workdir: Path, env: Mapping[str, str] | None = None) -> _Process:
    log_path = workdir / f"{name}.log"
    log_file = log_path.open("ab")
    log_file.write(f"# {' '.join(argv)}\n".encode())
    log_file.flush()
    # PR_SET_PDEATHSIG fires when the *thread* that forked exits: only safe from the main thread.
    on_main_thread = threading.current_thread() is threading.main_thread()
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        cwd=workdir,
        env=None if env is None else {**os.environ, **env},
        start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop the children in order
        preexec_fn=_die_with_parent if on_main_thread else None,  # noqa: PLW1509
    )
    return _Process(name=name, popen=popen, log_path=log_path, log_file=log_file)


def _wait_healthy(
    proc: _Process,
    *,
    port: int,
    path: str,
    tls: ssl.SSLContext | None,
    token: str | None = None,
    expect_body: bytes | None = None,
    deadline: float = READY_DEADLINE,
) -> None:
    """Poll GET path on 127.0.0.1:port until it answers 200 (and contains expect_body)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    give_up = time.monotonic() + deadline
    last = "no answer yet"
    while True:
        proc.check_running()
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=tls)
            if tls is not None
            else http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        )
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status == 200 and (expect_body is None or expect_body in body):
                return
            last = f"HTTP {resp.status}: {body[:500].decode(errors='replace')}"
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        if time.monotonic() > give_up:
            raise proc.failure(f"not healthy at {path} after {deadline:.0f}s (last: {last})")
        time.sleep(0.1)  # poll interval, not a readiness guess


@dataclass
class ControlPlane:
    """A running control plane. Stop it with stop() (or use it as a context manager)."""

    url: str  # https://127.0.0.1:<port>
    token: str  # static admin token; the user is in group system:masters
    ca_file: Path  # CA that verifies the apiserver's (and the controller manager's) serving certificate
    kubeconfig: Path  # server + token + CA, for kubectl and kubernetes-asyncio
    workdir: Path
    bin_dir: Path
    version: str  # the kube-apiserver's gitVersion (its /version): v1.37.2
    etcd_url: str  # etcd client URL, http://127.0.0.1:<port>
    _pki: _Pki = field(repr=False)
    _processes: list[_Process] = field(default_factory=list, repr=False)
    controller_manager_url: str | None = None  # https://127.0.0.1:<port> once started
    audit_log: Path | None = None  # the log backend's file, when started with an audit policy
    user_tokens: dict[str, str] = field(default_factory=dict, repr=False)  # user name -> static bearer token
    _apiserver_argv: list[str] = field(default_factory=list, repr=False)

    @property
    def kubectl(self) -> Path:
        """kubectl of the same release (scripts/control-plane.sh builds it; envtest assets have one too)."""
        binary = self.bin_dir / "kubectl"
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no kubectl in {self.bin_dir} (KUBEBUILDER_ASSETS without one: set TEST_ASSET_KUBECTL)")
        return binary

    @property
    def minor(self) -> int:
        """The release's minor version: 37 for v1.37.2."""
        return int(self.version.split(".")[1])

    @property
    def etcdctl(self) -> Path:
        """etcdctl binary: bin_dir/etcdctl (scripts/control-plane.sh builds it), else the one on PATH."""
        bundled = self.bin_dir / "etcdctl"
        if os.access(bundled, os.X_OK):
            return bundled
        found = shutil.which("etcdctl")
        if found is None:
            raise RuntimeError(f"no etcdctl in {self.bin_dir} nor on PATH")
        return Path(found)

    def etcd_revision(self) -> int:
        """Return etcd's current revision (what `etcdctl compact` takes to drop every older one)."""
        (status,) = json.loads(self.run_etcdctl("endpoint", "status", "--write-out=json"))
        return int(status["Status"]["header"]["revision"])

    def run_etcdctl(self, *args: str) -> str:
        """Run `etcdctl --endpoints=<this etcd> ARGS` (API v3) and return its stdout; raise on failure."""
        argv: list[str | Path] = [self.etcdctl, f"--endpoints={self.etcd_url}", *args]
        return output_of(argv, what=f"etcdctl {' '.join(args)}", env={"ETCDCTL_API": "3"})

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    @property
    def watcher_serving_pair(self) -> tuple[Path, Path]:
        """A serving certificate and key for 127.0.0.1/localhost signed by the CA (`ca_file`), for a watcher."""
        pki = self._pki.ca_cert.parent
        return pki / "watcher.crt", pki / "watcher.key"

    def client_certificate(self, user: str, groups: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """A client certificate (and key) the CA signs for `user` in `groups` (CN and O, as the API server reads
        them)."""
        pki = self._pki.ca_cert.parent
        name = "client-" + user.replace(":", "_")
        subject = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", "openssl.cnf", "-subj", subject,
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=pki)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-set_serial", str(secrets.randbits(63)), "-days", "3650", "-sha256",
                 "-extfile", "openssl.cnf", "-extensions", "client_ext", "-out", f"{name}.crt", cwd=pki)  # fmt: skip
        return pki / f"{name}.crt", pki / f"{name}.key"

    def serving_certificate(self, name: str, *, ips: Sequence[str] = (), dns: Sequence[str] = ()) -> tuple[Path, Path]:
        """A serving certificate (and key) the CA signs for these addresses and DNS names."""
        pki = self._pki.ca_cert.parent
        names = ", ".join([*(f"IP:{ip}" for ip in ips), *(f"DNS:{d}" for d in dns)])
        (pki / f"{name}.ext").write_text(
            "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\n"
            f"extendedKeyUsage = serverAuth\nsubjectAltName = {names}\n"
        )
        _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", "openssl.cnf", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=pki)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-set_serial", str(secrets.randbits(63)), "-days", "3650", "-sha256",
                 "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=pki)  # fmt: skip
        return pki / f"{name}.crt", pki / f"{name}.key"

    def log_path(self, component: str) -> Path:
        """Log file of a component: etcd, kube-apiserver or kube-controller-manager."""
        return self.workdir / f"{component}.log"

    def start_controller_manager(self, *, leader_elect: bool = False) -> None:
        """Start kube-controller-manager (all controllers but serviceaccount-token) and wait until healthy.

        As in real clusters, each controller writes with its own service account's credentials
        (`--use-service-account-credentials`: `system:serviceaccount:kube-system:horizontal-pod-autoscaler`, ...),
        bound tokens it requests for itself; all of them under the one field manager `kube-controller-manager`.
        `leader_elect`: it takes and renews its Lease in kube-system first, as a cluster's does."""
        if self.controller_manager_url is not None:
            return
        binary = self.bin_dir / "kube-controller-manager"
        if not os.access(binary, os.X_OK):
            raise RuntimeError(
                f"no kube-controller-manager in {self.bin_dir} (envtest assets ship none: unset KUBEBUILDER_ASSETS "
                "to use the build of scripts/control-plane.sh)"
            )
        port = free_port()
        kubeconfig = str(self.kubeconfig)
        proc = _spawn(
            "kube-controller-manager",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup",  # this apiserver has no front-proxy (requestheader) CA
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={self._pki.controller_manager_cert}",
                f"--tls-private-key-file={self._pki.controller_manager_key}",
                f"--root-ca-file={self.ca_file}",
                "--controllers=*,-serviceaccount-token",
                "--use-service-account-credentials",
                f"--leader-elect={'true' if leader_elect else 'false'}",
                "--profiling=false",
            ],
            self.workdir,
        )
        self._processes.append(proc)
        _wait_healthy(proc, port=port, path="/healthz", tls=self.tls_context(), expect_body=b"ok")
        self.controller_manager_url = f"https://127.0.0.1:{port}"

    def kubeconfig_for(self, user: str) -> Path:
        """A kubeconfig that authenticates as `user` (one of `users` at start) with its own static token."""
        return self.kubeconfig_with_token(user, self.user_tokens[user])

    def kubeconfig_with_token(self, user: str, token: str) -> Path:
        """A kubeconfig (mode 0600, in the workdir) that authenticates with a bearer token, e.g. a service account's
        from a TokenRequest; `user` names it."""
        # (no ":" in the file name, as a service account's user name has: kubeconfig paths are ":"-separated lists)
        path = self.workdir / f"kubeconfig-{user.replace(':', '_')}"
        write_kubeconfig(path, server=self.url, ca_file=self.ca_file, user=user, credentials={"token": token})
        return path

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, wait); etcd and its data stay."""
        proc = self._process("kube-apiserver")
        proc.stop()
        self._processes.remove(proc)

    def start_apiserver(self, *, deadline: float = READY_DEADLINE) -> None:
        """Start kube-apiserver again on the same port, with the same flags, and wait until /readyz answers (for
        `deadline` seconds: longer over many objects, which it reads into its watch cache as it starts)."""
        if any(p.name == "kube-apiserver" for p in self._processes):
            raise RuntimeError("kube-apiserver is already running")
        proc = _spawn("kube-apiserver", self._apiserver_argv, self.workdir)
        self._processes.insert(1, proc)  # after etcd, before the controller manager: stop() goes newest first
        port = int(self.url.rsplit(":", 1)[1])
        _wait_healthy(proc, port=port, path="/readyz", tls=self.tls_context(), token=self.token, deadline=deadline)

    def start_program(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        """Run another program beside the control plane (a controller with a kubeconfig), logging to `name`.log.

        It is stopped with the control plane (newest first), or by `stop_program`; `check_program` raises with its log's
        tail if it exited."""
        if any(p.name == name for p in self._processes):
            raise RuntimeError(f"{name} is already running")
        self._processes.append(_spawn(name, list(argv), self.workdir, env))

    def check_program(self, name: str) -> None:
        """Raise RuntimeError, with the tail of its log, if the program `name` has exited."""
        self._process(name).check_running()

    def stop_program(self, name: str) -> None:
        """Stop a program started by `start_program` (SIGTERM, then SIGKILL after the grace period)."""
        proc = self._process(name)
        proc.stop()
        self._processes.remove(proc)

    def kill(self) -> None:
        """Kill every component and program (SIGKILL, newest first) and wait for each: for a cluster thrown away with
        its state, where a graceful stop would wait (an API server flushing its audit webhook to pods already gone)."""
        while self._processes:
            proc = self._processes.pop()
            proc.popen.kill()
            proc.stop()

    def pid(self, name: str) -> int:
        """Return the process id of a running component (`etcd`, `kube-apiserver`, `kube-controller-manager`)."""
        return self._process(name).popen.pid

    def _process(self, name: str) -> _Process:
        for proc in self._processes:
            if proc.name == name:
                return proc
        raise RuntimeError(f"{name} is not running")

    def stop(self) -> None:
        """Stop every component (newest first) and wait for each to exit."""
        errors: list[BaseException] = []
        while self._processes:
            proc = self._processes.pop()
            try:
                proc.stop()
            except Exception as exc:  # keep stopping the others, report at the end
                errors.append(exc)
        if errors:
            raise RuntimeError(f"stopping the control plane: {errors}")

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def write_kubeconfig(path: Path, *, server: str, ca_file: Path, user: str, credentials: Mapping[str, str]) -> Path:
    """Write a kubeconfig (mode 0600) of one server, verified with `ca_file`, and one user with these credentials: a
    `token`, or a `client-certificate` and its `client-key` (file names)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fightwatch-test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": dict(credentials)}],
        "contexts": [{"name": "fightwatch-test", "context": {"cluster": "fightwatch-test", "user": user}}],
        "current-context": "fightwatch-test",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def audit_webhook_kubeconfig(workdir: Path, server: str) -> Path:
    """The kubeconfig of the API server's audit webhook backend (start_control_plane's `audit_webhook`): `server`,
    verified with the control plane's CA, the API server authenticated by its client certificate (`audit-client.crt`,
    which that CA signs). It names files of `workdir/pki`, which start_control_plane makes before the API server
    starts."""
    pki = Path(workdir).resolve() / "pki"
    credentials = {"client-certificate": str(pki / "audit-client.crt"), "client-key": str(pki / "audit-client.key")}
    return write_kubeconfig(
        workdir / "audit-webhook.kubeconfig",
        server=server,
        ca_file=pki / "ca.crt",
        user="kube-apiserver",
        credentials=credentials,
    )


def _start_once(
    workdir: Path, bin_dir: Path, pki: _Pki, token_file: Path, token: str, *, flags: list[str], node_address: str | None
) -> ControlPlane:
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    data_dir = workdir / "etcd-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    url = f"https://127.0.0.1:{api_port}"
    kubeconfig = workdir / "kubeconfig"
    write_kubeconfig(kubeconfig, server=url, ca_file=pki.ca_cert, user=ADMIN_USER, credentials={"token": token})
    cp = ControlPlane(
        url=url,
        token=token,
        ca_file=pki.ca_cert,
        kubeconfig=kubeconfig,
        workdir=workdir,
        bin_dir=bin_dir,
        version=binary_version(bin_dir / "kube-apiserver"),
        etcd_url=etcd_url,
        _pki=pki,
    )
    try:
        etcd = _spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--initial-cluster-state=new",
            ],
            workdir,
        )
        cp._processes.append(etcd)
        _wait_healthy(etcd, port=etcd_port, path="/health", tls=None, expect_body=b'"health":"true"')

        cp._apiserver_argv = [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--secure-port={api_port}",
            *_serving_flags(node_address, pki),
            f"--cert-dir={workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.apiserver_cert}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--token-auth-file={token_file}",
            f"--service-account-issuer={url}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            "--profiling=false",
            *flags,
        ]
        apiserver = _spawn("kube-apiserver", cp._apiserver_argv, workdir)
        cp._processes.append(apiserver)
        _wait_healthy(apiserver, port=api_port, path="/readyz", tls=cp.tls_context(), token=token)
    except BaseException:
        cp.stop()
        raise
    return cp


def _serving_flags(node_address: str | None, pki: _Pki) -> list[str]:
    """Where kube-apiserver listens and whom it serves: loopback and clients alone, or with `node_address` pods too."""
    if node_address is None:
        return [
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--authorization-mode=RBAC",
            # no kubelet runs pods: that plugin would reject every Pod of the tests for lack of a service account token
            "--disable-admission-plugins=ServiceAccount",
            # the `kubernetes` Service's endpoint cannot be the loopback --advertise-address: skip it
            "--endpoint-reconciler-type=none",
        ]
    return [
        "--bind-address=0.0.0.0",
        f"--advertise-address={node_address}",  # the `kubernetes` Service's endpoint, which pods reach
        "--authorization-mode=Node,RBAC",  # kubelets read what their pods need as nodes
        "--enable-admission-plugins=NodeRestriction",
        "--endpoint-reconciler-type=lease",
        f"--kubelet-client-certificate={pki.ca_cert.parent / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki.ca_cert.parent / 'kubelet-client.key'}",
    ]


def start_control_plane(
    workdir: Path,
    *,
    audit_policy: Mapping[str, Any] | None = None,
    users: Sequence[str] = (),
    audit_webhook: Path | None = None,
    release: str | None = None,
    apiserver_flags: Sequence[str] = (),
    node_address: str | None = None,
) -> ControlPlane:
    """Start etcd + kube-apiserver in workdir and wait until /readyz answers 200 for the admin token.

    `audit_policy` (an audit.k8s.io/v1 Policy) turns on the log backend, JSON Lines in `audit_log`; `users` get
    static tokens of their own (`user_tokens`), no groups and no permissions until bound. `audit_webhook` (a
    kubeconfig naming the receiver; with `audit_policy`) adds the webhook backend in batch mode, batches sent at
    least every second. `apiserver_flags` go to kube-apiserver after the others (`--feature-gates=...`). The PKI
    is made in `workdir/pki` first (`ca.crt`, and `apiserver.crt`/`.key` serving 127.0.0.1), so such a kubeconfig
    may name its files before they exist.

    `node_address` (the machine's address, for a node of harness/node.py): the API server serves pods too. It listens
    on every address and advertises this one as the `kubernetes` Service's endpoint, its certificate names it and the
    Service's cluster IP, pods get their service account's token (the ServiceAccount admission plugin), and kubelets
    are authorized as nodes (the Node authorizer, NodeRestriction)."""
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    bin_dir = control_plane_bin_dir(release)
    extra_ips = []
    if node_address is not None:
        extra_ips = [node_address, str(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)[1])]
    pki = _make_pki(workdir / "pki", extra_ips)
    token = secrets.token_urlsafe(32)
    user_tokens = {user: secrets.token_urlsafe(32) for user in users}
    token_file = workdir / "tokens.csv"
    lines = [f'{token},{ADMIN_USER},{ADMIN_USER}-uid,"system:masters"']
    lines += [f"{secret},{user},{user}-uid" for user, secret in user_tokens.items()]
    token_file.write_text("\n".join(lines) + "\n")
    token_file.chmod(0o600)
    audit_flags: list[str] = []
    audit_log = None
    if audit_policy is not None:
        policy_file, audit_log = workdir / "audit-policy.yaml", workdir / "audit.log"
        policy_file.write_text(yaml.safe_dump(dict(audit_policy), sort_keys=False))
        audit_flags = [
            f"--audit-policy-file={policy_file}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # written as requests complete, not batched
        ]
        if audit_webhook is not None:
            audit_flags += [
                f"--audit-webhook-config-file={audit_webhook}",
                "--audit-webhook-mode=batch",
                "--audit-webhook-batch-max-wait=1s",
                "--audit-webhook-initial-backoff=1s",
            ]
    attempts = 3  # a port picked free can be taken by someone else before the component binds it
    for attempt in range(1, attempts + 1):
        try:
            flags = [*audit_flags, *apiserver_flags]
            cp = _start_once(workdir, bin_dir, pki, token_file, token, flags=flags, node_address=node_address)
        except RuntimeError as exc:
            if attempt == attempts or "address already in use" not in str(exc):
                raise
        else:
            cp.audit_log, cp.user_tokens = audit_log, user_tokens
            return cp
    raise AssertionError("unreachable")
