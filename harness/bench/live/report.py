"""Report the live benchmark: its results as written to JSON, and as tables per run, over the informer and of memory."""

from __future__ import annotations

import os
import statistics
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from harness.bench.live.watchers import INFORMER, PHASES
from harness.bench.live.workload import Workload
from harness.bench.table import Column, aligned, figures_table


def report(workload: Workload, runs: list[dict[str, Any]], *, server_version: str) -> dict[str, Any]:
    """Assemble the results: what was measured on, every run's figures, and their medians.

    The medians: of the ratios over the informer, and of every watcher's resident memory by phase. `load`, `watchers`
    and `findings` are the first run's, where they were before there were runs.
    """
    first = runs[0]
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "kubernetes": server_version,
        "objects": {
            "configmaps": workload.configmaps,
            "deployments": workload.deployments,
            "namespaces": workload.namespaces,
            "fought": workload.fights,
        },
        "load": first["load"],
        "watchers": first["watchers"],
        "findings": first["findings"],
        "runs": runs,
        "vs_informer_median": {
            name: {key: round(statistics.median(run["vs_informer"][name][key] for run in runs), 2) for key in ratios}
            for name, ratios in first["vs_informer"].items()
        },
        "rss_mib_by_phase_median": {
            name: {
                phase: round(statistics.median(run["watchers"][name]["rss_mib_by_phase"][phase] for run in runs), 1)
                for phase in PHASES
            }
            for name in first["watchers"]
        },
    }


def print_summary(result: dict[str, Any]) -> None:
    """Print the results: each run's watchers, load and findings, fightwatch's figures over the informer's, memory."""
    print(orjson.dumps({key: result[key] for key in ("date", "machine", "kubernetes", "objects")}).decode())
    for number, run in enumerate(result["runs"], 1):
        print(f"\nrun {number}, started in turn: {', '.join(run['start_order'])}")
        print_watchers(run["watchers"])
        print(orjson.dumps({"load": run["load"], "findings": run["findings"]}).decode())
    print("\nfightwatch next to the client-go informer (fightwatch / informer)")
    print_comparison(result)
    print(f"\nresident memory by phase, MiB, the median of {len(result['runs'])} runs")
    print_memory(result["rss_mib_by_phase_median"])


WATCHER_COLUMNS: tuple[Column, ...] = (
    ("events/s", lambda r: f"{r['events_per_second']:.0f}"),
    ("CPU s/1k ev", lambda r: f"{r['cpu_seconds_per_1000_events']:.3f}"),
    ("lag p50 ms", lambda r: f"{r['lag']['p50_ms']:.1f}"),
    ("lag p99 ms", lambda r: f"{r['lag']['p99_ms']:.1f}"),
    (
        "RSS MiB ready/idle/load/peak",
        lambda r: "/".join([f"{r['rss_mib_by_phase'][phase]:.0f}" for phase in PHASES] + [f"{r['peak_rss_mib']:.0f}"]),
    ),
    ("bytes/event", lambda r: "-" if r["bytes_per_event"] is None else str(r["bytes_per_event"])),
)


def print_watchers(watchers: dict[str, Any]) -> None:
    """Print one run's figures of each watcher."""
    print(figures_table(("watcher",), WATCHER_COLUMNS, (((name,), r) for name, r in watchers.items())))


def print_comparison(result: dict[str, Any]) -> None:
    """Print each run's fightwatch figures beside the informer's, and the ratios; then the ratios' medians."""
    rows = [
        ("run", "fightwatch", "CPU s/1k ev", "RSS MiB idle", "RSS MiB load", "x CPU/event", "x RSS load", "x RSS idle")
    ]
    for number, run in enumerate(result["runs"], 1):
        informer = run["watchers"][INFORMER]
        for name, ratios in run["vs_informer"].items():
            r = run["watchers"][name]
            rows.append(
                (
                    str(number),
                    name,
                    f"{r['cpu_seconds_per_1000_events']:.3f} / {informer['cpu_seconds_per_1000_events']:.3f}",
                    f"{r['rss_mib_by_phase']['idle']:.0f} / {informer['rss_mib_by_phase']['idle']:.0f}",
                    f"{r['rss_mib_by_phase']['load']:.0f} / {informer['rss_mib_by_phase']['load']:.0f}",
                    *ratio_cells(ratios),
                )
            )
    for name, ratios in result["vs_informer_median"].items():
        rows.append(("median", name, "", "", "", *ratio_cells(ratios)))
    print(aligned(rows))


def ratio_cells(ratios: dict[str, float]) -> tuple[str, str, str]:
    """Render the ratios over the informer: CPU per event, RSS at the end of the load, RSS idle."""
    return f"{ratios['cpu_per_event']:.2f}", f"{ratios['rss_end_of_load']:.2f}", f"{ratios['rss_idle']:.2f}"


def print_memory(medians: dict[str, dict[str, float]]) -> None:
    """Print each watcher's resident memory by phase."""
    rows: list[tuple[str, ...]] = [("watcher", *PHASES)]
    rows += [(name, *(f"{rss[phase]:.1f}" for phase in PHASES)) for name, rss in medians.items()]
    print(aligned(rows))
