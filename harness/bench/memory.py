"""Measure the detection engine's memory on a stream (the replay benchmark's synthetic cluster, or a recording).

The bytes the engine holds per tracked object after a replay, as shipped and with every object kept, and what the
live watcher's watch index holds per object besides (`memory_only`); or the engine's memory over the stream's
simulated time (`memory_timeline`). scripts/bench_memory.py runs them, and scripts/bench_replay.py's
`--memory-only` and `--memory-timeline N`.
"""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from harness.bench.engine import (
    clock,
    findings,
    make_engine,
    native_bytes,
    replay_events,
    state_sizes,
    tracked_objects,
)
from harness.bench.machine import machine
from harness.synthetic.population import SPAN
from harness.synthetic.stream import obtain_as_asked, stream_summary
from harness.synthetic.truth import Truth
from watcher.config import Config, DetectionSettings
from watcher.offline import tune_gc

# ------------------------------------------------------------------------------------ memory per object


def memory_per_object(path: Path, settings: DetectionSettings, engine_name: str) -> dict[str, float]:
    """Measure the bytes the engine holds after the replay (tracemalloc), per tracked object; events streamed."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    native_before = native_bytes(engine_name)
    engine = make_engine(settings, engine_name)
    replay_events(path, engine)
    gc.collect()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    native = native_bytes(engine_name) - native_before
    after += native
    tracked = tracked_objects(engine)
    active, resolved = findings(engine)
    return {
        "retained_bytes": after - before,
        "native_bytes": native,
        "peak_bytes": peak - before,
        "tracked_objects": tracked,
        "bytes_per_object": (after - before) / max(1, tracked),
        "active_findings": len(active),
        "resolved_findings": len(resolved),
    }


def watch_index_per_object(path: Path) -> dict[str, float]:
    """Measure the bytes per object of what the live watcher keeps besides the engine.

    That is each watch's uid -> (namespace, name) index of the objects it knows (to tell which vanished across a
    relist), built here from the stream's ADDED events as the watch builds it from its lists.
    """
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index: dict[str, tuple[str | None, str]] = {}
    with path.open("rb") as stream:
        for line in stream:
            if not line.startswith(b'{"type":"ADDED"'):
                continue
            meta = orjson.loads(line)["object"]["metadata"]
            namespace = meta.get("namespace")
            index[meta["uid"]] = (sys.intern(namespace) if namespace else None, meta.get("name") or "")
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"bytes": after - before, "objects": len(index), "bytes_per_object": (after - before) / max(1, len(index))}


def rss_per_object(path: Path, settings: DetectionSettings, engine_name: str) -> dict[str, float]:
    """Measure the resident memory the replay adds (VmRSS, no tracemalloc), per tracked object.

    What the allocator really takes, fragmentation included, rather than what Python objects hold.
    """
    tune_gc()  # as fightwatch does (this may run in a fresh interpreter)
    gc.collect()
    before = vm_rss()
    engine = make_engine(settings, engine_name)
    replay_events(path, engine)
    gc.collect()
    grown = vm_rss() - before
    tracked = tracked_objects(engine)
    return {"rss_growth_bytes": grown, "tracked_objects": tracked, "bytes_per_object": grown / max(1, tracked)}


def memory_only(path: Path, truth: Truth | None, engine_name: str) -> dict[str, Any]:
    """Measure the engine's memory per tracked object as shipped, and with every object kept.

    As shipped: objects idle for the fight window let go, the default cap. Every object kept (no idle eviction, no
    cap): the worst case, every object of the stream tracked.
    """
    shipped = Config().detection
    everything = shipped.model_copy(update={"idle_after": 10 * SPAN, "max_objects": None})
    results: dict[str, Any] = {
        "machine": machine(),
        "stream": stream_summary(path, truth, truth.events if truth else 0),
    }
    for name, settings in (("every_object_kept", everything), ("defaults", shipped)):
        results[name] = memory_per_object(path, settings, engine_name)
        print(f"{name}: {results[name]}", file=sys.stderr)
    results["watch_index"] = watch_index_per_object(path)
    # In a fresh interpreter: this one's heap already holds what the replays above left, which the next replay
    # would reuse rather than grow.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        results["every_object_kept_rss"] = pool.apply(rss_per_object, (path, everything, engine_name))
    print(f"every_object_kept_rss: {results['every_object_kept_rss']}", file=sys.stderr)
    return results


def vm_rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024


# --------------------------------------------------------------------------------------- memory timeline


def timeline(path: Path, settings: DetectionSettings, every: int, *, traced: bool) -> list[dict[str, float]]:
    """Replay the stream through the Python engine (whose state is looked into), sampling every `every` events.

    Each sample: the simulated time, the tracked objects, the handovers logged (and objects with a log), and the
    engine's memory: tracemalloc's count of what Python holds (`traced`) or the resident memory the replay added
    (VmRSS; tracemalloc off, its own tables would count).
    """
    gc.collect()
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if traced else vm_rss()
    engine = make_engine(settings, "python")
    series: list[dict[str, float]] = []
    first: float | None = None

    def sample(events: int) -> None:
        point: dict[str, float] = {
            "events": events,
            "sim_minutes": round((clock(engine) - first) / 60, 2) if first is not None else 0.0,
            **state_sizes(engine),
        }
        if traced:
            point["traced_bytes"] = tracemalloc.get_traced_memory()[0] - base
        else:
            rss = vm_rss()
            point["rss_bytes"] = rss - base
            point["process_rss_bytes"] = rss
        series.append(point)

    def after_each(count: int) -> None:
        nonlocal first
        if first is None and clock(engine) > -math.inf:
            first = clock(engine)
        if count % every == 0:
            sample(count)

    count = replay_events(path, engine, after_each)
    if count % every:
        sample(count)
    if traced:
        tracemalloc.stop()
    print(f"timeline ({'tracemalloc' if traced else 'VmRSS'}): {series[-1]}", file=sys.stderr)
    return series


def memory_timeline(path: Path, truth: Truth | None, every: int, window: float | None) -> dict[str, Any]:
    """Measure the engine's memory over the stream's simulated time: does it level off once the window turns over?

    At the defaults (fight window and idle time 1 h, or `window`); one replay counted by VmRSS, one by tracemalloc.
    """
    settings = Config().detection
    if window is not None:
        fight = settings.fight.model_copy(update={"window": window})
        settings = settings.model_copy(update={"idle_after": window, "fight": fight})
    results: dict[str, Any] = {
        "machine": machine(),
        "stream": stream_summary(path, truth, truth.events if truth else 0),
        "settings": {
            "fight_window_s": settings.fight.window,
            "idle_after_s": settings.idle_seconds,
            "history": settings.history,
            "max_objects": settings.max_objects,
        },
        "sample_every_events": every,
        # VmRSS first, on this process's fresh heap (as a live process's); then tracemalloc's count.
        "rss": timeline(path, settings, every, traced=False),
        "tracemalloc": timeline(path, settings, every, traced=True),
    }
    if truth is None:  # (a recording: no sidecar to count from)
        results["stream"]["events"] = results["rss"][-1]["events"]
    return results


# ------------------------------------------------------------------------------------------------ running


def run(args: argparse.Namespace) -> int:
    """Measure as `args` say and write the results to `args.json`; pinning the process is the caller's.

    `args`: `memory_timeline` (N or None), `window`, `engine`, `json`, `stream` and the generator's options
    (`harness.synthetic.stream.add_arguments`).
    """
    with tempfile.TemporaryDirectory(prefix="fightwatch-bench-") as tmp:
        path, truth, gen_seconds = obtain_as_asked(args, Path(tmp))
        if gen_seconds is not None:
            print(f"generated {path} in {gen_seconds:.1f} s", file=sys.stderr)
            if args.memory_timeline and args.stream is not None:
                # Generating leaves this heap hundreds of MB large and mostly free: a replay would reuse it and
                # VmRSS would not show its growth. Start afresh on the stream now kept.
                print("restarting on the kept stream, for a fresh heap", file=sys.stderr)
                os.execv(sys.executable, [sys.executable, *sys.argv])  # noqa: S606 - this very script again
        if args.memory_timeline:
            results = memory_timeline(path, truth, args.memory_timeline, args.window)
        else:
            results = memory_only(path, truth, args.engine)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"results written to {args.json}", file=sys.stderr)
    return 0


def add_timeline_arguments(parser: argparse.ArgumentParser, option: str) -> None:
    """Add the timeline's options to a script's: `option` N (the timeline, sampled every N events) and --window."""
    parser.add_argument(
        option,
        dest="memory_timeline",
        type=int,
        metavar="N",
        help="replay at the defaults instead, sampling every N events the simulated time, tracked objects, "
        "handovers logged, tracemalloc's count and VmRSS (results to --json; with --stream, so that a generated "
        "stream is replayed by a fresh process)",
    )
    parser.add_argument(
        "--window", type=float, help=f"with {option}: the fight window and idle time, seconds (default 1 h)"
    )
