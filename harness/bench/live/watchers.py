"""Start the live benchmark's watchers and sample what each has used (`cluster_load` tells them ready and stops them).

The watchers, by default: `fightwatch run` as shipped (metadata-only lists and watches) and with full objects, both
with --record on (for the lag); kubernetes-asyncio's standard `Watch().stream()` (scripts/bench_baseline_watch.py);
a client-go metadata-only informer (scripts/informer); and the floor of fightwatch's chosen stack, the same watch
with its transport only and with all its required libraries (scripts/bench_floor_watch.py).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harness import REPO_ROOT
from harness.bench import cluster_load
from harness.bench.endpoints import metrics_of, total
from harness.bench.process import cpu_seconds, memory_kib
from harness.control_plane import ControlPlane

MARKER = "bench-marker-"  # the name prefix of the objects the baseline watchers say they have seen
PHASES = ("ready", "idle", "load")  # when each watcher is sampled: every one ready, after the idle time, drained
IDLE_SECONDS = 10.0  # from the sample "ready" to the sample "idle"
INFORMER = "informer"  # the client-go watcher, which each fightwatch watcher is compared with
BASELINE = "baseline"  # the kubernetes-asyncio watcher
FLOOR = "floor"  # the watch with fightwatch's transport only: kubernetes-asyncio's ApiClient, raw JSON, uvloop
FLOOR_LIBRARIES = "floor-libraries"  # the same, with the rest of fightwatch's required libraries imported
BASELINES = (BASELINE, INFORMER, FLOOR, FLOOR_LIBRARIES)  # the names no fightwatch watcher may take


@dataclass(frozen=True)
class Variant:
    """One `fightwatch run` of the benchmark: which installation (its interpreter), engine and objects."""

    name: str
    python: str
    engine: str
    full: bool


DEFAULT_VARIANTS = (
    Variant("fightwatch-metadata", sys.executable, "auto", False),
    Variant("fightwatch-full", sys.executable, "auto", True),
)


@dataclass
class Watcher(cluster_load.Watcher):
    """A watcher process, and its samples by phase (`PHASES`).

    A baseline's --out: {"events": n, "times": [[resourceVersion, seconds], ...]}.
    """

    # by phase (PHASES): CPU seconds so far, fightwatch's events and bytes received so far, VmRSS in KiB
    cpu: dict[str, float] = field(default_factory=dict)
    events: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)
    rss_kib: dict[str, int] = field(default_factory=dict)
    peak_kib: int = 0  # VmHWM at the last sample


def start_fightwatch(variant: Variant, cp: ControlPlane, workdir: Path) -> Watcher:
    """Start `fightwatch run` of one variant, from the workdir.

    The workdir, so that its interpreter imports its own installation, never this checkout's `watcher/`.
    """
    config: dict[str, Any] = {"watch": {"resources": ["configmaps", "deployments.apps"]}}
    if variant.full:
        config["watch"]["per_resource"] = {"*": {"full_objects": True}}
    return cluster_load.start_fightwatch(
        Watcher,
        variant.name,
        cp,
        workdir,
        python=variant.python,
        config=config,
        args=("--engine", variant.engine),
        cwd=workdir,
    )


def start_watchers(
    variants: Sequence[Variant], cp: ControlPlane, workdir: Path, *, informer: Path, floor: bool, run: int
) -> list[Watcher]:
    """Start every watcher: fightwatch's, the kubernetes-asyncio baseline, the client-go informer, the floors.

    In that order, and the other way round on every other run; the list is in the order started. The baseline runs
    on this interpreter; the floors (unless `floor` is false) on the first fightwatch variant's, so that they import
    exactly the libraries that fightwatch runs on (the runtime venv's, when the variant names one).
    """
    scripts = REPO_ROOT / "scripts"
    baseline = [sys.executable, str(scripts / "bench_baseline_watch.py")]
    lean = [variants[0].python, str(scripts / "bench_floor_watch.py")]
    other = functools.partial(cluster_load.start_other, Watcher, cp=cp, workdir=workdir, marker=MARKER)
    starts: list[Callable[[], Watcher]] = [
        *(functools.partial(start_fightwatch, variant, cp, workdir) for variant in variants),
        functools.partial(other, BASELINE, baseline),
        functools.partial(other, INFORMER, [str(informer)]),
    ]
    if floor:
        starts += [
            functools.partial(other, FLOOR, lean),
            functools.partial(other, FLOOR_LIBRARIES, [*lean, "--with-libraries"]),
        ]
    return [start() for start in (starts[::-1] if run % 2 else starts)]


async def sample(session: aiohttp.ClientSession, watcher: Watcher, phase: str) -> None:
    """Sample a watcher at the end of `phase`: its CPU and memory, and a fightwatch's events and bytes received."""
    watcher.cpu[phase] = cpu_seconds(watcher.proc.pid)
    memory = memory_kib(watcher.proc.pid)
    watcher.rss_kib[phase], watcher.peak_kib = memory["VmRSS"], memory["VmHWM"]
    if watcher.recording is not None:
        m = await metrics_of(session, watcher.url)
        watcher.events[phase] = total(m, "fightwatch_events_total")
        watcher.bytes[phase] = total(m, "fightwatch_watch_received_bytes_total")
