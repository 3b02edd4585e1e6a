"""Measure the replay pipeline on a stream: its speed beside the decode floor and kubernetes-asyncio's models.

On one core, best of `runs`: the full replay pipeline (reading the capture and the engine processing each event,
`harness.bench.engine`), JSON decoding alone (the floor) and kubernetes-asyncio model deserialization (what a naive
watcher pays); the engine's memory per tracked object (`harness.bench.memory`); and what the engine found against
what was injected (`harness.bench.recall`).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from harness.bench.engine import READ_BUFFER, Engine, findings, make_engine, replay_events, tracked_objects
from harness.bench.machine import machine
from harness.bench.memory import memory_per_object
from harness.bench.recall import NOT_CHECKED, check
from harness.synthetic.stream import stream_summary
from harness.synthetic.truth import Truth
from watcher.config import Config, DetectionSettings
from watcher.offline import tune_gc

MODELS = {"ConfigMap": "V1ConfigMap", "Deployment": "V1Deployment", "ReplicaSet": "V1ReplicaSet"}


@dataclass(slots=True)
class Timing:
    best: float
    runs: list[float]
    events: int

    @property
    def rate(self) -> float:
        return self.events / self.best


def replay(path: Path, settings: DetectionSettings, engine_name: str) -> tuple[float, Engine, int]:
    """Time one full replay (the engine made before the clock starts): return seconds, the engine, events read."""
    engine = make_engine(settings, engine_name)
    start = time.perf_counter()
    events = replay_events(path, engine)
    return time.perf_counter() - start, engine, events


def decode_only(path: Path) -> tuple[float, int]:
    loads = orjson.loads
    count = 0
    start = time.perf_counter()
    with path.open("rb", buffering=READ_BUFFER) as stream:  # (read as the replay reads it)
        for line in stream:
            loads(line)
            count += 1
    return time.perf_counter() - start, count


def k8s_models(path: Path, total: int, sample: int) -> tuple[float, int, int]:
    """Time decoding and deserializing each sampled event's object into kubernetes-asyncio models (V1Deployment)."""
    stride = max(1, total // sample)
    lines = []
    with path.open("rb") as stream:
        for number, line in enumerate(stream):
            if number % stride == 0:
                lines.append(line)

    async def run() -> float:
        from kubernetes_asyncio.client import ApiClient  # noqa: PLC0415 - optional, slow to import

        async with ApiClient() as client:
            deserialize = client._ApiClient__deserialize  # the body of ApiClient.deserialize, minus json.loads
            start = time.perf_counter()
            for line in lines:
                event = orjson.loads(line)
                obj = event["object"]
                deserialize(obj, MODELS.get(obj["kind"], "object"))
            return time.perf_counter() - start

    return asyncio.run(run()), len(lines), stride


def best_of(runs: int, fn: Callable[[], tuple[float, int]]) -> Timing:
    times, count = [], 0
    for _ in range(runs):
        gc.collect()
        seconds, count = fn()
        times.append(seconds)
    return Timing(min(times), times, count)


def in_turns(
    runs: int, first: Callable[[], tuple[float, int]], second: Callable[[], tuple[float, int]]
) -> tuple[Timing, Timing]:
    """`best_of` both, their runs taken in turns: a shared machine's slow spells then slow both alike."""
    timings = [best_of(1, fn) for _ in range(runs) for fn in (first, second)]
    firsts, seconds = timings[0::2], timings[1::2]
    return (
        Timing(min(t.best for t in firsts), [t.best for t in firsts], firsts[0].events),
        Timing(min(t.best for t in seconds), [t.best for t in seconds], seconds[0].events),
    )


def profile(path: Path, settings: DetectionSettings, engine_name: str, top: int = 15) -> list[dict[str, Any]]:
    profiler = cProfile.Profile()
    profiler.enable()
    replay(path, settings, engine_name)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = filename.replace(str(REPO_ROOT) + "/", "").replace(sys.prefix, "<venv>")
        rows.append({"function": f"{short}:{line}({func})", "calls": calls, "tottime": tottime, "cumtime": cumtime})
    rows.sort(key=lambda r: -r["tottime"])
    return rows[:top]


def measure(
    path: Path,
    truth: Truth | None,
    *,
    generation_seconds: float | None,
    engine_name: str,
    runs: int,
    k8s_sample: int,
    with_profile: bool,
) -> dict[str, Any]:
    """Take every measurement of the replay benchmark on the stream at `path`, and check it against its truth.

    Returns the results; `generation_seconds` is how long generating the stream took (None: it was given).
    """
    settings = Config().detection
    tune_gc()  # what `fightwatch replay` does; it applies to every measurement below alike
    # Memory first, as in a fresh process: the engine's shared caches (paths, tries, shapes) count too.
    memory = memory_per_object(path, settings, engine_name)
    engines: list[Engine] = []

    def full() -> tuple[float, int]:
        engines.clear()  # the previous engine must not be alive (and traversed by the GC) during a run
        gc.collect()
        seconds, engine, events = replay(path, settings, engine_name)
        engines[:] = [engine]
        return seconds, events

    # (the floor and the replay in turns, so that both bests, and each turn's ratio, come from the same spells)
    floor, replayed = in_turns(runs, lambda: decode_only(path), full)
    print(f"decode floor: {floor.rate:,.0f} ev/s", file=sys.stderr)
    print(f"full replay: {replayed.rate:,.0f} ev/s", file=sys.stderr)
    by_turn = [f / r for f, r in zip(floor.runs, replayed.runs, strict=True)]
    engine = engines.pop()
    detection = check(*findings(engine), truth) if truth is not None else {}
    tracked = tracked_objects(engine)
    del engine
    k8s_seconds, k8s_events, stride = k8s_models(path, floor.events, k8s_sample)
    print(f"k8s models: {k8s_events / k8s_seconds:,.0f} ev/s", file=sys.stderr)
    return {
        "machine": machine(),
        "runs": runs,
        "stream": stream_summary(path, truth, floor.events),
        "generation_s": generation_seconds,
        "replay": {
            "engine": engine_name,
            "events_per_s": replayed.rate,
            "best_s": replayed.best,
            "runs_s": replayed.runs,
            "tracked_objects": tracked,
        },
        "decode": {"events_per_s": floor.rate, "best_s": floor.best, "runs_s": floor.runs},
        "k8s_models": {
            "events_per_s": k8s_events / k8s_seconds,
            "sampled_events": k8s_events,
            "stride": stride,
            "seconds": k8s_seconds,
            "scaled_full_stream_s": k8s_seconds * floor.events / k8s_events,
        },
        "ratio_replay_to_decode": replayed.rate / floor.rate,  # (of the bests)
        "ratio_by_turn": by_turn,  # each turn's floor seconds over its replay seconds
        "ratio_median": statistics.median(by_turn),
        "memory": memory,
        "detection": detection or dict.fromkeys(("fight", "hot_loop"), NOT_CHECKED),
        "profile": profile(path, settings, engine_name) if with_profile else None,
    }
