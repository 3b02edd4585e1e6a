"""What the live benchmarks (`bench_live.py`, `load_test.py`) share: reading a process's CPU and memory from /proc,
waiting for a condition, reading a fightwatch process's address, readiness and metrics, and the event lag
figures from its recording.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from watcher.model import parse_time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def memory_kib(pid: int) -> dict[str, int]:
    """Resident memory of a process, now (VmRSS) and at its peak (VmHWM), in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


async def poll(check: Callable[[], Awaitable[Any]], what: str, deadline: float) -> Any:
    """Await `check` every 0.25 s until it returns something true; TimeoutError after `deadline` seconds."""
    give_up = time.monotonic() + deadline
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > give_up:
            raise TimeoutError(f"waited {deadline:.0f} s for {what}")
        await asyncio.sleep(0.25)


def log_lines(log: Path, event: str | None = None) -> list[dict[str, Any]]:
    """The JSON lines of a fightwatch log (`log.format: json`), or those of one event."""
    lines = []
    for line in log.read_bytes().splitlines():
        if line.startswith(b"{"):
            entry = orjson.loads(line)
            if event is None or entry.get("event") == event:
                lines.append(entry)
    return lines


def listening(log: Path) -> str:
    """The base URL a fightwatch process serves on (from its `started` log line), or "" before it started."""
    started = log_lines(log, "started")
    return str(started[0]["listening"]) if started else ""


async def is_ready(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url + "/readyz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def metrics_of(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """fightwatch's own samples on /metrics, by series."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    samples = {}
    for line in text.splitlines():
        if line.startswith("fightwatch_"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def total(metrics: dict[str, float], family: str) -> float:
    """The sum of a family's series (e.g. `fightwatch_events_total` over its labels)."""
    return sum(v for k, v in metrics.items() if k.startswith(family))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def recorded_writes(recording: Path) -> Iterator[tuple[str, float]]:
    """(resourceVersion, receive time) of each MODIFIED event a fightwatch `--record` file holds."""
    for line in recording.read_bytes().splitlines():
        event = orjson.loads(line)
        if event["type"] == "MODIFIED":
            yield event["object"]["metadata"]["resourceVersion"], parse_time(event["observedAt"])


def lags(accepted: dict[str, float], received: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Event lag: the writer reading the API server's answer (`accepted`, by resourceVersion) -> the watcher
    receiving the event (`received`: resourceVersion, time); an event may arrive before the writer reads its
    answer, so a lag can be below zero. Events of writes not in `accepted` are not counted."""
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


def aligned(rows: list[tuple[str, ...]]) -> str:
    """Rows of cells as a plain-text table: each column padded to its widest cell."""
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)).rstrip() for row in rows
    )
