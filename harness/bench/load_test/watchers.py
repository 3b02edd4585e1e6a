"""Start the load test's fightwatch processes (and a client-go informer), and sample them.

Every process is sampled every 5 s (CPU, resident memory, and fightwatch's events and tracked objects).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from harness import REPO_ROOT
from harness.bench import cluster_load
from harness.bench.endpoints import metrics_of, total
from harness.bench.load_test.workload import KINDS
from harness.bench.process import cpu_seconds, memory_kib
from harness.control_plane import ControlPlane
from harness.go_build import informer_binary

SAMPLE_EVERY = 5.0  # seconds between resource samples of each watcher
MARKER = "load-marker-"  # the name prefix of the objects that tell a watcher has received every write before them
INFORMER = "informer"  # the client-go informer's watcher name
SAMPLE_KEYS = ("t", "cpu_s", "rss_mib", "events", "tracked_objects")  # of a sample, as --samples writes it


@dataclass(frozen=True)
class Setup:
    """How the watchers run: replicas of the `ha` run, their window, an informer beside them, their interpreter."""

    replicas: int  # watchers in the ha run (1: no leader to kill)
    window: float | None  # seconds: their detection.fight.window and detection.idle_after (None: theirs)
    informer: bool  # a client-go metadata-only informer of the same kinds beside them
    fightwatch_python: str  # the interpreter of the fightwatch to run
    samples: Path | None  # each resource sample appended here as a JSON line
    kill_at: float | None  # seconds into the load the leader is killed (None: half of the load)


@dataclass
class Watcher(cluster_load.Watcher):
    """A watcher process and its samples; the client-go informer has no recording and no endpoints."""

    # (t, cpu s, rss MiB, events, tracked objects)
    samples: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    killed_at: float | None = None


def start_watcher(
    name: str, cp: ControlPlane, workdir: Path, config: dict[str, Any], args: Sequence[str], *, python: str
) -> Watcher:
    """Start `fightwatch run` with `config` and `args`, from this checkout, as the pod `name`."""
    env = {**os.environ, "POD_NAME": name}
    return cluster_load.start_fightwatch(
        Watcher, name, cp, workdir, python=python, config=config, args=args, cwd=REPO_ROOT, env=env
    )


def start_informer(cp: ControlPlane, workdir: Path) -> Watcher:
    """Start the client-go informer of every kind the load writes, counting events (no per-event record)."""
    resources = ",".join(f"{k.resource.api_version}/{k.resource.plural}" for k in KINDS)  # v1/configmaps, ...
    argv = [str(informer_binary()), "--resources", resources, "--count-only"]
    return cluster_load.start_other(Watcher, INFORMER, argv, cp, workdir, marker=MARKER)


def start_watchers(name: str, cp: ControlPlane, workdir: Path, setup: Setup) -> list[Watcher]:
    """Start the watchers of a run: `ha`, `setup.replicas` replicas of one shard; `shards`, shards 0 and 1.

    Leader election is on in both (one Lease per shard).
    """
    base: dict[str, Any] = {
        "watch": {"resources": [k.name for k in KINDS]},
        "leader_election": {"enabled": True, "lease_namespace": "default"},
    }
    if setup.window is not None:
        base["detection"] = {"fight": {"window": setup.window}, "idle_after": setup.window}
    python = setup.fightwatch_python
    if name == "ha":
        watchers = [start_watcher(f"fw-{i}", cp, workdir, base, (), python=python) for i in range(setup.replicas)]
    else:
        watchers = [
            start_watcher(f"fw-shard-{i}", cp, workdir, base, ("--shard", str(i), "--total-shards", "2"), python=python)
            for i in range(2)
        ]
    if setup.informer:
        watchers.append(start_informer(cp, workdir))
    return watchers


async def sample_forever(session: aiohttp.ClientSession, watchers: list[Watcher], out: Path | None) -> None:
    """Sample every live watcher every `SAMPLE_EVERY` seconds, until cancelled; append each sample to `out`."""
    while True:
        for watcher in watchers:
            if watcher.alive():
                try:
                    metrics = await metrics_of(session, watcher.url) if watcher.recording is not None else {}
                    sample = (
                        time.time(),
                        cpu_seconds(watcher.proc.pid),
                        memory_kib(watcher.proc.pid)["VmRSS"] / 1024,
                        total(metrics, "fightwatch_events_total") if metrics else 0.0,
                        metrics.get("fightwatch_tracked_objects", 0.0),
                    )
                except (aiohttp.ClientError, OSError):
                    continue  # a watcher killed meanwhile
                watcher.samples.append(sample)
                if out is not None:
                    with out.open("ab") as lines:
                        lines.write(
                            orjson.dumps({"watcher": watcher.name, **dict(zip(SAMPLE_KEYS, sample, strict=True))})
                        )
                        lines.write(b"\n")
        await asyncio.sleep(SAMPLE_EVERY)
