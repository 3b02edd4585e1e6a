"""`fightwatch run` as a user runs it: a subprocess with a config file, its JSON log, its HTTP endpoints.

    async with Watcher(tmp_path, kubeconfig=cp.kubeconfig, config={...}) as watcher:
        await watcher.wait_ready()
        finding = await watcher.wait_for_finding(lambda f: f["object"]["name"] == "web")
    watcher.returncode, watcher.log("finding opened"), watcher.recording

The watcher listens on a port the kernel picks (`serve.port: 0`) and logs its URL in its `started` line. It
serves HTTPS as it does by default: with its self-signed certificate, which the harness pins by the fingerprint
the `started` line logs (or, with `serve.tls` files, verifies with `ca_file`), and every request carries a bearer
token the API server knows: `token`, by default the one of `kubeconfig` (the admin's, for most tests). With
`serve.insecure_http` it is plain HTTP, as in development. Nothing sleeps in place of readiness: every wait polls
a condition against a deadline, generous because the suite runs on a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families

from .control_plane import _die_with_parent
from .lifecycle import Started

DEADLINE = 120.0  # seconds for any awaited condition
POLL = 0.2
STOP_DEADLINE = 30.0


class WatcherError(AssertionError):
    """The watcher did not do what a test waited for; the message carries the tail of its log."""


class Watcher(Started):
    def __init__(
        self,
        workdir: Path,
        *,
        kubeconfig: Path | None = None,
        config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        record: bool = True,
        name: str = "watcher",
        args: tuple[str, ...] = (),
        token: str | None = None,
        ca_file: Path | None = None,
    ) -> None:
        """`token`: what the harness authenticates with (default: the kubeconfig's); `ca_file`: the CA that signs a
        `serve.tls` certificate (default: pin the certificate the watcher logs)."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"{name}.yaml"
        self.log_path = workdir / f"{name}.log"
        self.recording = workdir / f"{name}.jsonl" if record else None
        settings: dict[str, Any] = {"serve": {"address": "127.0.0.1", "port": 0}, "log": {"format": "json"}}
        for key, value in (config or {}).items():
            settings[key] = {**settings.get(key, {}), **value}
        self.config_path.write_text(yaml.safe_dump(settings))
        self.argv = [sys.executable, "-m", "watcher", "run", "--config", str(self.config_path)]
        if kubeconfig is not None:
            self.argv += ["--kubeconfig", str(kubeconfig)]
        if self.recording is not None:
            self.argv += ["--record", str(self.recording)]
        self.argv += args
        self.env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        self.env.update(env or {})
        self.url = ""
        self.token = token if token is not None else (_kubeconfig_token(kubeconfig) if kubeconfig else "")
        self.ca_file = ca_file
        self.tls: ssl.SSLContext | aiohttp.Fingerprint | bool = True
        self.returncode: int | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                preexec_fn=_die_with_parent,  # a killed test run leaves no watcher behind
            )
        started = await self.wait_for_log(lambda e: e.get("event") == "started", what="its `started` line")
        self.url = started["listening"]
        if started.get("tls") is not None and self.ca_file is not None:
            self.tls = ssl.create_default_context(cafile=str(self.ca_file))
        elif started.get("tls") is not None:  # (its own self-signed certificate: pinned)
            self.tls = aiohttp.Fingerprint(bytes.fromhex(started["tls"]["fingerprint"].replace(":", "")))
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30), headers=headers)

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send `signum`, wait for the exit status (SIGKILL after STOP_DEADLINE)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        proc = self._proc
        if proc is None:
            return self.returncode if self.returncode is not None else -1
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)  # in case a test paused it
            proc.send_signal(signum)
            try:
                async with asyncio.timeout(STOP_DEADLINE):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise WatcherError(
                    f"the watcher did not stop within {STOP_DEADLINE}s of signal {signum}\n{self.tail()}"
                ) from None
        returncode = proc.returncode
        assert returncode is not None  # (waited for)
        self.returncode = returncode
        self._proc = None
        return returncode

    @property
    def pid(self) -> int:
        """The running watcher's process id."""
        assert self._proc is not None
        return self._proc.pid

    def pause(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def _check_running(self) -> None:
        if self._proc is not None and self._proc.returncode is not None:
            raise WatcherError(f"the watcher exited with status {self._proc.returncode}\n{self.tail()}")

    # -------------------------------------------------------------------------------------------------- log

    def log(self, event: str | None = None) -> list[dict[str, Any]]:
        """The watcher's JSON log lines (those with `event` == event)."""
        entries = []
        for line in self.log_path.read_bytes().splitlines():
            if line.startswith(b"{"):
                entry = orjson.loads(line)
                if event is None or entry.get("event") == event:
                    entries.append(entry)
        return entries

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"last lines of {self.log_path}:\n" + "\n".join(text.splitlines()[-lines:])

    async def wait_for_log(
        self, match: Callable[[dict[str, Any]], bool], *, what: str, deadline: float = DEADLINE
    ) -> dict[str, Any]:
        entry: dict[str, Any] = await self.poll(
            lambda: next((e for e in self.log() if match(e)), None), what=what, deadline=deadline
        )
        return entry

    # ------------------------------------------------------------------------------------------------- HTTP

    async def get(self, path: str, *, token: str | None = None, **query: str) -> tuple[int, Any]:
        """GET path (as `token`'s user if given, else the harness's): status and decoded body."""
        assert self._session is not None
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        async with self._session.get(self.url + path, params=query, headers=headers, ssl=self.tls) as response:
            body = await response.read()
            if response.content_type == "application/json":
                return response.status, orjson.loads(body)
            return response.status, body.decode()

    async def findings(self, *, token: str | None = None, **query: str) -> list[dict[str, Any]]:
        status, body = await self.get("/api/v1/findings", token=token, **query)
        if status != 200:
            raise WatcherError(f"/api/v1/findings answered {status}: {body}")
        findings: list[dict[str, Any]] = body["findings"]
        return findings

    async def readiness(self) -> tuple[int, dict[str, Any]]:
        return await self.get("/readyz")

    async def wait_ready(self, *, ready: bool = True, deadline: float = DEADLINE) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            try:
                status, body = await self.readiness()
            except aiohttp.ClientError:
                return None
            return body if (status == 200) is ready else None

        body: dict[str, Any] = await self.poll_async(
            check, what=f"/readyz {'200' if ready else '503'}", deadline=deadline
        )
        return body

    async def wait_for_finding(
        self, match: Callable[[dict[str, Any]], bool], *, what: str = "a finding", deadline: float = DEADLINE
    ) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            return next((f for f in await self.findings() if match(f)), None)

        finding: dict[str, Any] = await self.poll_async(check, what=what, deadline=deadline)
        return finding

    async def scrape(self) -> str:
        """The text of GET /metrics (Prometheus text format)."""
        status, text = await self.get("/metrics")
        if status != 200:
            raise WatcherError(f"/metrics answered {status}: {text}")
        return str(text)

    async def metric(self, name: str, **labels: str) -> float | None:
        """The sample `name` with exactly these labels from /metrics (None when absent)."""
        for family in text_string_to_metric_families(await self.scrape()):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    # ------------------------------------------------------------------------------------------------ waits

    async def poll(self, check: Callable[[], Any], *, what: str, deadline: float = DEADLINE) -> Any:
        async def wrapped() -> Any:
            return check()

        return await self.poll_async(wrapped, what=what, deadline=deadline)

    async def poll_async(self, check: Callable[[], Any], *, what: str, deadline: float = DEADLINE) -> Any:
        give_up = time.monotonic() + deadline
        while True:
            self._check_running()
            result = await check()
            if result is not None:
                return result
            if time.monotonic() > give_up:
                raise WatcherError(f"waited {deadline:.0f}s for {what}\n{self.tail()}")
            await asyncio.sleep(POLL)  # poll interval, not a readiness guess


def _kubeconfig_token(path: Path) -> str:
    """The bearer token of a kubeconfig's first user ("" when it has none)."""
    config = yaml.safe_load(path.read_text()) or {}
    users = config.get("users") or [{}]
    return str((users[0].get("user") or {}).get("token") or "")


def recorded(path: Path) -> list[dict[str, Any]]:
    """The events of a recording (each line must be a complete JSON object)."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]
