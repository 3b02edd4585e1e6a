"""Shapes of data the replay and the audit analysis are measured on, each seeded and reproducible.

A shape is a stream generator and its default size (about 1-3 s of analysis on one core); `obtain` writes a
shape's stream into a cache directory, or reuses the one there. The generators: `harness.synthetic` and
`harness.bench.audit_log` (the synthetic ones), `harness.bench.shapes.watch` and `harness.bench.shapes.audit` (the
rest); the measurement in turns is `harness.bench.shapes.turns`, its report `harness.bench.shapes.report`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.bench import audit_log
from harness.bench.shapes import audit, watch
from harness.synthetic import stream

REPLAY = "replay"
AUDIT = "audit"
PAIRED = "scenarios"  # the replay shape the audit shapes' speed is set beside: the same scenarios, watched


@dataclass(frozen=True)
class Shape:
    """A shape of data: its name, what analyses it (replay or audit), its default events, its generator."""

    name: str
    kind: str
    events: int
    write: Callable[[Path, int], dict[str, Any]]  # (path, events) -> its make-up
    about: str


def _synthetic(metadata_only: bool) -> Callable[[Path, int], dict[str, Any]]:
    def write(path: Path, events: int) -> dict[str, Any]:
        objects = max(100, events // 10)
        truth = stream.generate(path, stream.Shape(events, objects, 20210304, metadata_only=metadata_only))
        return {"objects": truth.objects, "by_type": truth.by_type}

    return write


def _synthetic_audit(path: Path, events: int) -> dict[str, Any]:
    objects = max(100, round(events / 11.5))  # (the generator writes about 11.5 events an object)
    injected = audit_log.generate(path, objects=objects, clients=200, seed=1)
    return {"objects": objects, "injected": {k: len(v) for k, v in injected.items()}}


SHAPES = (
    Shape("synthetic", REPLAY, 200_000, _synthetic(False), "the seeded synthetic cluster, full objects"),
    Shape("synthetic-metadata", REPLAY, 200_000, _synthetic(True), "the same, metadata-only"),
    Shape(
        "scenarios",
        REPLAY,
        200_000,
        lambda path, events: watch.write_scenarios(path, events=events),
        "the real recordings, metadata-only, replicated",
    ),
    Shape(
        "large-objects",
        REPLAY,
        15_000,
        lambda path, events: watch.write_large_objects(path, events=events),
        "full objects of tens of KB: data, last-applied, managedFields",
    ),
    Shape("synthetic", AUDIT, 230_000, _synthetic_audit, "the generated Metadata-level log"),
    Shape(
        "conflicts",
        AUDIT,
        200_000,
        lambda path, events: audit.write_conflicts(path, events=events),
        "the recorded conflicts and the writes around them",
    ),
    Shape(
        "reads",
        AUDIT,
        200_000,
        lambda path, events: audit.write_reads(path, events=events),
        "the recorded logs, reads repeated to 87%",
    ),
    Shape(
        "request-response",
        AUDIT,
        150_000,
        lambda path, events: audit.write_request_response(path, events=events),
        "the RequestResponse-level recordings: bodies",
    ),
)


def shapes_of(kind: str) -> list[Shape]:
    return [s for s in SHAPES if s.kind == kind]


def shape(kind: str, name: str) -> Shape:
    for candidate in shapes_of(kind):
        if candidate.name == name:
            return candidate
    names = ", ".join(s.name for s in shapes_of(kind))
    raise ValueError(f"no {kind} shape {name!r} (the {kind} shapes: {names}, or all)")


def chosen(kind: str, text: str) -> list[Shape]:
    """The shapes a `--shapes` value names: a comma-separated list, or `all`."""
    if text == "all":
        return shapes_of(kind)
    return [shape(kind, name.strip()) for name in text.split(",") if name.strip()]


def obtain(chosen_shape: Shape, directory: Path, scale: float) -> tuple[Path, dict[str, Any]]:
    """The shape's stream in `directory` (`scale` times its default events): reused if there, else written.

    Return its path and its make-up (kept beside it, `.json`).
    """
    events = max(1, round(chosen_shape.events * scale))
    path = directory / f"{chosen_shape.kind}-{chosen_shape.name}-{events}.jsonl"
    sidecar = path.with_suffix(".json")
    if path.exists() and sidecar.exists():
        return path, orjson.loads(sidecar.read_bytes())
    directory.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".partial-{os.getpid()}")
    make_up = chosen_shape.write(partial, events)
    partial.rename(path)
    sidecar.write_bytes(orjson.dumps(make_up, option=orjson.OPT_INDENT_2))
    return path, make_up
