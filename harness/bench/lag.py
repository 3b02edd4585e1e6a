"""Measure event lag: a write accepted by the API server -> its watch event received by a watcher."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from watcher.model import parse_time


def percentile(values: list[float], q: float) -> float:
    """Return the `q` quantile of `values` (the nearest rank below)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def recorded_writes(recording: Path) -> Iterator[tuple[str, float]]:
    """Yield (resourceVersion, receive time) of each MODIFIED event a fightwatch `--record` file holds."""
    for line in recording.read_bytes().splitlines():
        event = orjson.loads(line)
        if event["type"] == "MODIFIED":
            yield event["object"]["metadata"]["resourceVersion"], parse_time(event["observedAt"])


def lags(accepted: dict[str, float], received: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Summarise the event lag of the writes in `accepted` (by resourceVersion) as `received` (resourceVersion, time).

    The lag runs from the writer reading the API server's answer to the watcher receiving the event; an event may
    arrive before the writer reads its answer, so a lag can be below zero. Events of writes not in `accepted` are
    not counted.
    """
    measured = [at - accepted[rv] for rv, at in received if rv in accepted]
    if not measured:
        return {"matched": 0}
    return {
        "matched": len(measured),
        "p50_ms": round(percentile(measured, 0.50) * 1000, 1),
        "p99_ms": round(percentile(measured, 0.99) * 1000, 1),
        "max_ms": round(max(measured) * 1000, 1),
        "mean_ms": round(statistics.fmean(measured) * 1000, 1),
    }
