"""Report the load test: what it ran on and with, as its results record it, and a table of every process's figures."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.bench.load_test.watchers import Setup
from harness.bench.load_test.workload import KINDS, Workload
from harness.bench.table import Column, figures_table
from harness.control_plane import binary_version, control_plane_bin_dir
from harness.kube import Resource
from watcher.config import ShardingSettings
from watcher.sources.discovery import ApiResource, shard_of


def header(workload: Workload, setup: Setup) -> dict[str, Any]:
    """Describe the load test before its runs: date, machine, objects, injections, partition and settings.

    The results are this, with each run's figures under "runs".
    """
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "objects": {k.name: round(workload.objects * k.share) for k in KINDS},
        "injected": {"fights": workload.fights, "hot_loops": workload.hot_loops},
        "partition": {
            k.name: shard_of(
                ApiResource(*_group_version(k.resource), k.resource.plural, k.resource.kind, True),
                ShardingSettings(total_shards=2),
            )
            for k in KINDS
        },
        "settings": {
            "duration_s": workload.duration,
            "rate": workload.rate,
            "replicas": setup.replicas,
            "fight_window_and_idle_after_s": setup.window if setup.window is not None else "default (1 h)",
        },
        "runs": {},
    }


def machine() -> dict[str, Any]:
    """Describe the machine the load test ran on, the API server on it included."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "pinned_to_cpus": sorted(os.sched_getaffinity(0)),  # (inherited by the control plane and the watchers)
        "memory": memory.split(":", 1)[1].strip(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "kube_apiserver": f"{binary_version(control_plane_bin_dir() / 'kube-apiserver')}, loopback, on the same cores",
    }


def _group_version(resource: Resource) -> tuple[str, str]:
    group, _, version = resource.api_version.rpartition("/")
    return group, version


PROCESS_COLUMNS: tuple[Column, ...] = (
    ("events/s", lambda w: f"{w['events_per_second']:.0f}"),
    ("CPU s / 1k ev", lambda w: f"{w['cpu_seconds_per_1000_events']}"),
    ("lag p50 ms", lambda w: f"{w['lag'].get('p50_ms')}"),
    ("lag p99 ms", lambda w: f"{w['lag'].get('p99_ms')}"),
    ("RSS start/end/max MiB", lambda w: "/".join(f"{w['rss_mib'][k]:.0f}" for k in ("start", "end", "max"))),
    ("RSS slope MiB/min", lambda w: f"{w['rss_mib']['slope_mib_per_minute']:+.2f}"),
)


def table(results: dict[str, Any]) -> str:
    """Render every run's processes: events, CPU per event, lag, and resident memory."""
    rows = (
        ((run_name, name), w) for run_name, result in results["runs"].items() for name, w in result["watchers"].items()
    )
    return figures_table(("run", "process"), PROCESS_COLUMNS, rows)
