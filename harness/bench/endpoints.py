"""Read a fightwatch process as the live benchmarks run it: its JSON log, its address, readiness and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson


def log_lines(log: Path, event: str | None = None) -> list[dict[str, Any]]:
    """Return the JSON lines of a fightwatch log (`log.format: json`), or those of one event."""
    lines = []
    for line in log.read_bytes().splitlines():
        if line.startswith(b"{"):
            entry = orjson.loads(line)
            if event is None or entry.get("event") == event:
                lines.append(entry)
    return lines


def listening(log: Path) -> str:
    """Return the base URL a fightwatch process serves on (from its `started` log line), or "" before it started."""
    started = log_lines(log, "started")
    return str(started[0]["listening"]) if started else ""


async def is_ready(session: aiohttp.ClientSession, url: str) -> bool:
    """Ask a fightwatch process's /readyz; False while it does not answer."""
    try:
        async with session.get(url + "/readyz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def metrics_of(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Scrape fightwatch's own samples from its /metrics, by series."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    samples = {}
    for line in text.splitlines():
        if line.startswith("fightwatch_"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def total(metrics: dict[str, float], family: str) -> float:
    """Sum a family's series (e.g. `fightwatch_events_total` over its labels)."""
    return sum(v for k, v in metrics.items() if k.startswith(family))
