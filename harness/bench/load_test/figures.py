"""Make the load test's figures of each watcher's samples, and check what the watchers found against the load."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any

from harness.bench.cluster_load import Load
from harness.bench.lag import lags, recorded_writes
from harness.bench.load_test.watchers import INFORMER, SAMPLE_EVERY, Watcher
from harness.bench.load_test.workload import Cluster, expected_findings


def figures(watcher: Watcher, load: Load) -> dict[str, Any]:
    """Make a watcher's figures: CPU per event and memory over the load phase (until it was killed, if it was)."""
    end = load.started + load.seconds
    during = [s for s in watcher.samples if load.started - SAMPLE_EVERY <= s[0] <= end + SAMPLE_EVERY]
    first, last = during[0], during[-1]
    events = last[3] - first[3] if watcher.recording is not None else load.writes  # (each write is one event)
    cpu = last[1] - first[1]
    rss = [s[2] for s in during]
    minutes = [(s[0] - first[0]) / 60 for s in during]

    def slope(last_minutes: float = math.inf) -> float | None:
        since = minutes[-1] - last_minutes
        points = [(m, r) for m, r in zip(minutes, rss, strict=True) if m >= since]
        if len(points) <= 2 or (math.isfinite(last_minutes) and minutes[-1] < last_minutes):
            return None
        x, y = zip(*points, strict=True)
        return round(statistics.linear_regression(x, y).slope, 3)

    return {
        "seconds": round(last[0] - first[0], 1),
        "events": int(events),
        "events_per_second": round(events / max(1e-9, last[0] - first[0]), 1),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_1000_events": round(1000 * cpu / events, 3) if events else None,
        "lag": lags(load.accepted, recorded_writes(watcher.recording)) if watcher.recording is not None else {},
        "rss_mib": {
            "start": round(rss[0], 1),
            "end": round(rss[-1], 1),
            "max": round(max(rss), 1),
            "slope_mib_per_minute": slope() or 0.0,  # (over the whole load)
            "slope_last_5_min": slope(5),
            "slope_last_10_min": slope(10),
            "every_5s": [round(r, 1) for r in rss],
            "minutes": [round(m, 2) for m in minutes],  # each sample's time since the first
        },
        "tracked_objects": {"end": int(last[4]), "every_5s": [int(s[4]) for s in during]},
    }


def vs_informer(figures_by_watcher: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Compare each fightwatch process with the informer.

    Its resident memory over the informer's at the end of the load, at its largest, and averaged over the last 10
    minutes (when the load lasted that long); and its CPU per event over the informer's.
    """
    informer = figures_by_watcher[INFORMER]

    def last_10_min(rss: dict[str, Any]) -> float | None:
        kept = [r for r, m in zip(rss["every_5s"], rss["minutes"], strict=True) if m >= rss["minutes"][-1] - 10]
        return statistics.fmean(kept) if rss["minutes"][-1] >= 10 else None

    ratios = {}
    for name, figures_of in figures_by_watcher.items():
        if name == INFORMER:
            continue
        mine, theirs = figures_of["rss_mib"], informer["rss_mib"]
        mean, their_mean = last_10_min(mine), last_10_min(theirs)
        cpu, their_cpu = figures_of["cpu_seconds_per_1000_events"], informer["cpu_seconds_per_1000_events"]
        ratios[name] = {
            "rss_end": round(mine["end"] / theirs["end"], 2),
            "rss_max": round(mine["max"] / theirs["max"], 2),
            "rss_last_10_min": round(mean / their_mean, 2) if mean and their_mean else None,
            "cpu_per_event": round(cpu / their_cpu, 2) if cpu and their_cpu else None,
        }
    return ratios


def compare(found: list[dict[str, Any]], cluster: Cluster) -> dict[str, Any]:
    """Check the findings against what was injected: found, missed, others, and any reported twice."""
    got = Counter((f["type"], f["object"]["kind"], f["object"]["namespace"], f["object"]["name"]) for f in found)
    expected = expected_findings(cluster)
    return {
        "injected": {"fights": len(cluster.fights), "hot_loops": len(cluster.hot)},
        "found_of_injected": f"{len(expected & set(got))}/{len(expected)}",
        "missed": sorted("/".join(m) for m in expected - set(got)),
        "other_findings": sorted("/".join(o) for o in set(got) - expected),
        "reported_twice": sorted("/".join(k) for k, n in got.items() if n > 1),
    }
