"""Real Prometheus and Alertmanager processes for the end-to-end tests (Debian's binaries, scripts/monitoring.sh).

Like control_plane.py: free loopback ports, each component polled at its readiness endpoint against a deadline,
and a component that exits or never gets ready raises RuntimeError with the tail of its log.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import REPO_ROOT
from .control_plane import LOG_TAIL_LINES, _Process, _spawn, _wait_healthy, free_port

MONITORING_SCRIPT = REPO_ROOT / "scripts" / "monitoring.sh"
RULES_FILE = REPO_ROOT / "deploy" / "prometheus" / "fightwatch-rules.yaml"
RULES_TEST_FILE = REPO_ROOT / "deploy" / "prometheus" / "fightwatch-rules.test.yaml"


@functools.cache
def monitoring_bin_dir() -> Path:
    """Directory with prometheus, promtool and alertmanager (unpacks Debian's on first use)."""
    proc = subprocess.run(["bash", str(MONITORING_SCRIPT)], capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-LOG_TAIL_LINES:])
        raise RuntimeError(f"{MONITORING_SCRIPT} failed (exit {proc.returncode}):\n{tail}")
    return Path(lines[-1])


def promtool(
    *args: str | Path, stdin: bytes | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(monitoring_bin_dir() / "promtool"), *map(str, args)],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )


@dataclass
class Monitor:
    """A running Prometheus or Alertmanager."""

    name: str
    url: str
    workdir: Path
    process: _Process = field(repr=False)

    def stop(self) -> None:
        self.process.stop()

    def check_running(self) -> None:
        self.process.check_running()

    def log_tail(self) -> str:
        return self.process.log_tail()


def start_alertmanager(workdir: Path, *, name: str, webhook_url: str) -> Monitor:
    """An Alertmanager (no clustering) that notifies `webhook_url`, resolved alerts included, within a second."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "route": {
            "receiver": "hook",
            "group_by": ["alertname", "namespace", "name"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "hook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    args = [
        f"--config.file={workdir / 'alertmanager.yml'}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # no gossip port: instances would find each other otherwise
    ]
    return _start(name, monitoring_bin_dir() / "alertmanager", args, workdir, port)


def start_prometheus(
    workdir: Path,
    *,
    target: str,
    rule_files: list[Path],
    interval: str = "1s",
    ca_file: Path | None = None,
    bearer_token_file: Path | None = None,
) -> Monitor:
    """A Prometheus scraping `target` (a base URL: http://host:port, or https:// verified with `ca_file`, with the
    token in `bearer_token_file`, as a ServiceMonitor with bearerTokenFile does) as job="fightwatch" and
    evaluating `rule_files`."""
    workdir.mkdir(parents=True, exist_ok=True)
    scheme, _, address = target.partition("://")
    job: dict[str, Any] = {"job_name": "fightwatch", "scheme": scheme, "static_configs": [{"targets": [address]}]}
    if ca_file is not None:
        job["tls_config"] = {"ca_file": str(ca_file)}
    if bearer_token_file is not None:
        job["authorization"] = {"type": "Bearer", "credentials_file": str(bearer_token_file)}
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [job],
    }
    return run_prometheus(workdir, config)


def run_prometheus(workdir: Path, config: Mapping[str, Any], *, binary: Path | None = None) -> Monitor:
    """A Prometheus with this configuration (prometheus.yml's content), its data in `workdir`: Debian's 2.42, or
    `binary`, a Prometheus 3 (Debian's build leaves Kubernetes service discovery out: harness/programs.py builds
    one from Go modules that has it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(dict(config)))
    port = free_port()
    args = [
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    if binary is None:  # (Prometheus 3 has no consoles)
        args += ["--web.console.templates=/dev/null", "--web.console.libraries=/dev/null"]
    return _start("prometheus", binary or monitoring_bin_dir() / "prometheus", args, workdir, port)


def _start(name: str, binary: Path, args: list[str], workdir: Path, port: int) -> Monitor:
    """Spawn a binary and wait until it answers /-/ready; stop it if it never does."""
    proc = _spawn(name, [str(binary), *args], workdir)
    try:
        _wait_healthy(proc, port=port, path="/-/ready", tls=None)
    except BaseException:
        proc.stop()
        raise
    return Monitor(name, f"http://127.0.0.1:{port}", workdir, proc)
