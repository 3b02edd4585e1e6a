"""Report the scale benchmark (scripts/bench_scale.py): each watcher's median figures, the ratio, and the limits.

Pure: the turns' figures in, a Markdown table and the chart's limits verdict out. A turn's figures are flat
(`ready_s`, `apiserver_load_cpu_s`, ...), the keys of `ROWS`; a figure a turn has not got (the API server's alone,
with no watcher: no watcher's memory) is absent.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FIGHTWATCH, INFORMER, NO_WATCHER = "fightwatch", "informer", "none"
SERVER_PHASES = ("start", "idle", "load", "relist")  # the API server's figures, over each phase of a turn
LIMIT_MIB = 1024.0  # the chart's default resources.limits (helm/fightwatch/values.yaml): memory 1Gi, cpu 1
LIMIT_CORES = 1.0

WATCHER_ROWS = (
    ("ready_s", "time to ready, s"),
    ("start_cpu_s", "CPU to ready, s"),
    ("start_peak_mib", "peak memory to ready (VmHWM), MiB"),
    ("ready_rss_mib", "memory when ready, MiB"),
    ("idle_rss_mib", "memory after idling, MiB"),
    ("load_events", "events received in the load"),
    ("load_cpu_ms_per_event", "CPU per event under load, ms"),
    ("load_cores", "CPU cores used under load"),
    ("load_peak_mib", "peak memory in the load, MiB"),
    ("load_rss_mib", "memory after the load, MiB"),
    ("relist_s", "time to ready again after 410, s"),
    ("relist_cpu_s", "CPU to ready again, s"),
    ("relist_peak_mib", "peak memory in the relist, MiB"),
    ("relist_rss_mib", "memory after the relist, MiB"),
)
SERVER_ROWS = tuple(
    row
    for phase in SERVER_PHASES
    for row in (
        (f"apiserver_{phase}_cpu_s", f"API server CPU in {phase}, s"),
        (f"apiserver_{phase}_peak_mib", f"API server peak memory in {phase}, MiB"),
        (f"apiserver_{phase}_rss_mib", f"API server memory at the end of {phase}, MiB"),
    )
)
ROWS = WATCHER_ROWS + SERVER_ROWS


def medians(turns: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Return each watcher's median of each figure over its turns (by the turn's `watcher`)."""
    by_watcher: dict[str, list[Mapping[str, Any]]] = {}
    for turn in turns:
        by_watcher.setdefault(turn["watcher"], []).append(turn)
    return {
        watcher: {
            key: round(statistics.median(values), 3) for key, _ in ROWS if (values := [t[key] for t in its if key in t])
        }
        for watcher, its in by_watcher.items()
    }


def ratio(a: float | None, b: float | None) -> float | None:
    """Return a / b, or None where either is missing or b is 0."""
    return None if a is None or b is None or b == 0 else a / b


def limits(fightwatch: Mapping[str, float]) -> dict[str, Any]:
    """Tell whether one fightwatch process stays within the chart's default limits: its highest peak memory, and
    the cores it used under load and while reading its objects (to ready, and again after 410)."""
    peak = max(fightwatch.get(k, 0.0) for k in ("start_peak_mib", "load_peak_mib", "relist_peak_mib"))
    cores = {
        "load": fightwatch.get("load_cores", 0.0),
        "start": ratio(fightwatch.get("start_cpu_s"), fightwatch.get("ready_s")) or 0.0,
        "relist": ratio(fightwatch.get("relist_cpu_s"), fightwatch.get("relist_s")) or 0.0,
    }
    return {
        "limit_mib": LIMIT_MIB,
        "limit_cores": LIMIT_CORES,
        "peak_mib": peak,
        "cores": {k: round(v, 3) for k, v in cores.items()},
        "memory_within": peak < LIMIT_MIB,
        # reading the objects faster than one core can is throttled (slower to ready), not killed: only the load's
        # rate says whether one process keeps up
        "cpu_within": cores["load"] < LIMIT_CORES,
    }


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def markdown(median: Mapping[str, Mapping[str, float]], *, runs: int) -> str:
    """Render the medians as a Markdown table: a row of each figure; fightwatch, the informer, their ratio, and the
    API server with no watcher where it was measured."""
    fw, inf = median.get(FIGHTWATCH, {}), median.get(INFORMER, {})
    baseline = median.get(NO_WATCHER)
    head = [f"figure (median of {runs})", FIGHTWATCH, INFORMER, "ratio"]
    if baseline is not None:
        head.append("no watcher")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label in ROWS:
        if key not in fw and key not in inf:
            continue
        cells = [label, _cell(fw.get(key)), _cell(inf.get(key)), _cell(ratio(fw.get(key), inf.get(key)))]
        if baseline is not None:
            cells.append(_cell(baseline.get(key)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(limit: Mapping[str, Any]) -> str:
    """Say in a line whether one fightwatch process fits the chart's default limits."""
    memory = "within" if limit["memory_within"] else "over"
    cpu = "within" if limit["cpu_within"] else "over"
    return (
        f"chart limits (memory {limit['limit_mib']:.0f} MiB, cpu {limit['limit_cores']:g}): peak "
        f"{limit['peak_mib']:.0f} MiB ({memory}); {limit['cores']['load']:.2f} cores under load ({cpu}); "
        f"{limit['cores']['start']:.2f} cores to ready, {limit['cores']['relist']:.2f} to ready again"
    )


def turn_order(runs: int, *, first: Sequence[str] = (FIGHTWATCH, INFORMER)) -> list[tuple[int, str]]:
    """Return the turns (run, watcher): in `first`'s order, reversed every other run (A B, B A, A B ...)."""
    return [(run, watcher) for run in range(runs) for watcher in (first if run % 2 == 0 else first[::-1])]
