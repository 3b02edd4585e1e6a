"""Make one run's figures of the live benchmark's samples.

Each watcher's over the load, and each fightwatch watcher's over the client-go informer.
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.bench.cluster_load import Load, load_figures
from harness.bench.lag import lags, recorded_writes
from harness.bench.live.watchers import IDLE_SECONDS, INFORMER, PHASES, Watcher
from harness.bench.live.workload import Workload


def summarise(
    workload: Workload, load: Load, watchers: list[Watcher], findings: list[dict[str, Any]]
) -> dict[str, Any]:
    """Make one run's figures: each watcher's over the load phase, and each fightwatch watcher's over the informer."""
    results = {watcher.name: figures(watcher, load) for watcher in watchers}
    fought_names = {f"cm-{i}" for i in range(workload.fights)}
    found = {f["object"]["name"] for f in findings if f["type"] == "fight"}
    return {
        "start_order": [watcher.name for watcher in watchers],
        "load": load_figures(load, rate=workload.rate, injected_as="fight_writes", by_manager=True),
        "watchers": results,
        "findings": {
            "fights_found_of_injected": f"{len(found & fought_names)}/{len(fought_names)}",
            "other_findings": sorted(found - fought_names)
            + [f["object"]["name"] for f in findings if f["type"] != "fight"],
        },
        "vs_informer": vs_informer(watchers, results),
    }


def figures(watcher: Watcher, load: Load) -> dict[str, Any]:
    """Make a watcher's figures: events, CPU and lag over the load phase, and its resident memory."""
    cpu = watcher.cpu["load"] - watcher.cpu["idle"]
    per_event: float | None
    if watcher.recording is None:
        assert watcher.out is not None
        times = [(rv, t) for rv, t in orjson.loads(watcher.out.read_bytes())["times"]]
        events = float(sum(rv in load.accepted for rv, _ in times))
        per_event = None
    else:
        times = list(recorded_writes(watcher.recording))
        events = watcher.events["load"] - watcher.events["idle"]
        per_event = (watcher.bytes["load"] - watcher.bytes["idle"]) / events
    return {
        "events": int(events),
        "events_per_second": round(events / load.seconds, 1),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_1000_events": round(1000 * cpu / events, 3),
        "events_per_cpu_second": round(events / cpu) if cpu else None,
        "idle_cpu_seconds_per_second": round((watcher.cpu["idle"] - watcher.cpu["ready"]) / IDLE_SECONDS, 4),
        "lag": lags(load.accepted, times),
        "rss_mib": mib(watcher.rss_kib["load"]),
        "peak_rss_mib": mib(watcher.peak_kib),
        "rss_mib_by_phase": {phase: mib(watcher.rss_kib[phase]) for phase in PHASES},
        "bytes_per_event": None if per_event is None else round(per_event),
    }


def mib(kib: int) -> float:
    """Convert KiB to MiB, to a tenth."""
    return round(kib / 1024, 1)


def vs_informer(watchers: list[Watcher], results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Compare each fightwatch watcher with the client-go informer.

    CPU per event over the load, and resident memory at the end of the load and of the idle phase.
    """
    informer = next(watcher for watcher in watchers if watcher.name == INFORMER)

    def cpu_per_event(watcher: Watcher) -> float:
        return float((watcher.cpu["load"] - watcher.cpu["idle"]) / results[watcher.name]["events"])

    return {
        watcher.name: {
            "cpu_per_event": round(cpu_per_event(watcher) / cpu_per_event(informer), 2),
            "rss_end_of_load": round(watcher.rss_kib["load"] / informer.rss_kib["load"], 2),
            "rss_idle": round(watcher.rss_kib["idle"] / informer.rss_kib["idle"], 2),
        }
        for watcher in watchers
        if watcher.recording is not None
    }
