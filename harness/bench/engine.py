"""Drive the detection engine as the benchmarks do.

The one module of the benchmarks that uses the engine's and the capture reader's API (`watcher.detection.engine`,
`watcher.sources.capture`), so that a change to that API is followed here alone.

`engine_name` names the engine's attribution implementation: "native" (Rust: parses the events and keeps the
attribution state natively; the default where it is built) or "python" (the reference).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from watcher.config import DetectionSettings
from watcher.detection import events
from watcher.detection.engine import Engine
from watcher.detection.native import native_available
from watcher.model import Finding
from watcher.sources.capture import READ_BUFFER, ReadStats, read_capture

ENGINES = ("native", "python")

__all__ = [
    "ENGINES",
    "READ_BUFFER",
    "Engine",
    "add_engine_argument",
    "capture_objects",
    "clock",
    "default_engine",
    "findings",
    "make_engine",
    "native_bytes",
    "replay_events",
    "state_sizes",
    "tracked_objects",
]


def default_engine() -> str:
    return "native" if native_available() else "python"


def add_engine_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=default_engine(),
        help="native: the native engine (the default where built); python: the Python reference",
    )


def make_engine(settings: DetectionSettings, engine_name: str) -> Engine:
    return Engine(settings, attribution=engine_name)


def replay_events(path: Path, engine: Engine, after_each: Callable[[int], None] | None = None) -> int:
    """Feed the capture at `path` to `engine`, as `fightwatch replay` does; return the events read.

    `after_each(events so far)` is called after each event when given (the timed loop has none).
    """
    stats = ReadStats()
    if after_each is not None:
        for count, _ in enumerate(_each(path, engine, stats), 1):
            after_each(count)
    else:
        process = engine.process
        for event in read_capture(str(path), engine.decode, stats=stats):
            process(event)
    return stats.events


def _each(path: Path, engine: Engine, stats: ReadStats) -> Iterator[None]:
    for event in read_capture(str(path), engine.decode, stats=stats):
        engine.process(event)
        yield


def native_bytes(engine_name: str) -> int:
    """Count the bytes the native engine holds (its own allocator's count: tracemalloc sees only Python's).

    0 for the Python engine.
    """
    if engine_name != "native":
        return 0
    from watcher import _native  # noqa: PLC0415 - only where it is built

    return _native.allocated()


def tracked_objects(engine: Engine) -> int:
    return engine.tracked_objects


def findings(engine: Engine) -> tuple[list[Finding], list[Finding]]:
    """Return the engine's active findings and its resolved ones."""
    return engine.active(), engine.resolved()


def clock(engine: Engine) -> float:
    """Return the engine's time: that of the latest event with a time (-inf before the first)."""
    return engine.now


def state_sizes(engine: Engine) -> dict[str, int]:
    """Count what the engine's state holds: tracked objects, those with a handover log, the handovers logged.

    A look inside the Python engine (the native implementation keeps its attribution state out of sight); and the
    idle evictions.
    """
    states = engine._objects
    logs = [s.history.size() for s in states.values() if s.history is not None]  # (handovers, not words)
    return {
        "tracked_objects": len(states),
        "objects_with_handovers": len(logs),
        "handovers_logged": sum(logs),
        "evicted_idle": engine.stats.evicted_idle,
    }


def capture_objects(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the object of each event of a recorded capture, invalid lines skipped (ValueError: not a capture)."""
    for event in read_capture(str(path), events.decode, stats=ReadStats(), skip_invalid=True):
        yield events.event_object(event)
