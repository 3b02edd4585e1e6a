#!/usr/bin/env python3
"""What a finding's timeline costs: the memory of its write record (detection.timeline) when full, the time to
record a write, and the time and size of drawing it (the page, `--html`).

    .venv/bin/python scripts/bench_timeline.py [--writes 5000] [--json OUT.json]

A record is filled with `--writes` writes of a hot loop (one write every 0.12 s, one writer) and of a fight (two
writers taking turns, every tenth write a handover, a 409 between), at the default `detection.timeline` (512
marks, 32 folds), and what the record holds is counted. Recording is timed over the same writes (best of 5), and
the report of one such finding is rendered (best of 5); so is the report of the bundled demo capture (12
findings). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson

from watcher.config import Config
from watcher.detection.timeline import Record
from watcher.model import CONFLICT, HANDOVER, WRITE, Finding, FindingState, FindingType, ObjectRef, Writer, WriterCount

START = 1_795_000_000.0
WRITERS = (Writer("hpa-controller", "Update", "scale"), Writer("argocd-application-controller", "Apply"))


def fill(record: Record, writes: int, *, fight: bool) -> None:
    lanes = [record.lane(w) for w in (WRITERS if fight else WRITERS[:1])]
    for n in range(writes):
        at = START + n * 0.12
        lane = lanes[n % len(lanes)]
        record.add(at, lane, HANDOVER if fight and n % 10 == 0 else WRITE)
        if fight and n % 10 == 5:
            record.add(at + 0.01, lanes[(n + 1) % len(lanes)], CONFLICT)


def record_bytes(writes: int, *, fight: bool) -> int:
    """Bytes a full record holds: the record, its two arrays and its list of lanes (`sys.getsizeof`, exact for
    arrays, over-allocation included; the writers themselves are the engine's, shared). Not tracemalloc: it counts
    the tuples a fold made and freed, which stay in the interpreter's free lists, as held."""
    settings = Config().detection
    record = Record(settings.timeline, settings.resolve)
    fill(record, writes, fight=fight)
    return sum(sys.getsizeof(part) for part in (record, record.words, record.folds, record.lanes))


def seconds_per_write(writes: int, *, fight: bool) -> float:
    settings = Config().detection
    best = float("inf")
    for _ in range(5):
        record = Record(settings.timeline, settings.resolve)
        started = time.perf_counter()
        fill(record, writes, fight=fight)
        best = min(best, time.perf_counter() - started)
    return best / writes


def finding(writes: int, *, fight: bool) -> Finding:
    settings = Config().detection
    record = Record(settings.timeline, settings.resolve)
    fill(record, writes, fight=fight)
    writers = tuple(WriterCount(w, writes // 2) for w in (WRITERS if fight else WRITERS[:1]))
    ref = ObjectRef("apps/v1", "Deployment", "shop", "checkout", "uid-1", resource="deployments")
    end = START + writes * 0.12
    return Finding(
        id="0123456789abcdef",
        type=FindingType.FIGHT if fight else FindingType.HOT_LOOP,
        state=FindingState.ACTIVE,
        object=ref,
        writers=writers,
        fields=("spec.replicas",),
        handovers=writes // 10 if fight else 0,
        writes=writes,
        writes_per_minute=500.0,
        first_seen=START,
        detected_at=START + 10,
        last_seen=end,
        resolved_at=None,
        flip_period=1.2 if fight else None,
        summary="benchmark",
        hint="benchmark",
        timeline=record.timeline(),
    )


def render(writes: int, *, fight: bool) -> tuple[float, int]:
    from watcher.rendering.page import Summary, report  # noqa: PLC0415 - after the memory was measured

    found = finding(writes, fight=fight)
    summary = Summary(
        sources=("bench",),
        events=writes,
        objects=1,
        first=START,
        last=found.last_seen,
        writes_by_manager=(("hpa-controller", writes),),
    )
    best, size = float("inf"), 0
    for _ in range(5):
        started = time.perf_counter()
        html = report([replace(found)], summary=summary, now=found.last_seen)
        best = min(best, time.perf_counter() - started)
        size = len(html.encode())
    return best, size


def demo_report() -> dict[str, object]:
    """The report of the bundled demo capture (12 findings): render time (best of 5) and size."""
    from importlib import resources  # noqa: PLC0415

    from watcher.detection.engine import Engine  # noqa: PLC0415
    from watcher.rendering.page import Summary, report  # noqa: PLC0415
    from watcher.sources.capture import ReadStats, read_captures  # noqa: PLC0415

    engine = Engine(Config().detection)
    with resources.as_file(resources.files("watcher") / "data" / "demo-capture.jsonl.gz") as capture:
        for event in read_captures([str(capture)], engine.decode, stats=ReadStats()):
            engine.process(event)
    found = engine.active() + engine.resolved()
    summary = Summary(sources=("demo",), events=0, objects=0, first=None, last=engine.now, writes_by_manager=())
    best, size = float("inf"), 0
    for _ in range(5):
        started = time.perf_counter()
        html = report(found, summary=summary, now=engine.now)
        best = min(best, time.perf_counter() - started)
        size = len(html.encode())
    return {"findings": len(found), "render_ms": round(best * 1000, 2), "html_bytes": size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=5000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict[str, object] = {"writes": args.writes, "timeline": Config().detection.timeline.model_dump()}
    for name, fight in (("hot_loop", False), ("fight", True)):
        seconds, size = render(args.writes, fight=fight)
        result[name] = {
            "record_bytes": record_bytes(args.writes, fight=fight),
            "snapshot_words_bytes": len(finding(args.writes, fight=fight).timeline.words),  # type: ignore[union-attr]
            "record_ns_per_write": round(seconds_per_write(args.writes, fight=fight) * 1e9, 1),
            "render_ms": round(seconds * 1000, 2),
            "html_bytes": size,
        }
    result["demo_report"] = demo_report()
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
