"""Measure builds side by side on shapes of data, in turns, each turn a child process pinned to one core.

A build is a checkout with its own venv (`NAME=CHECKOUT`: CHECKOUT/.venv/bin/python). Each turn runs
scripts/bench_shape_turn.py of this checkout with a build's interpreter, which imports that build's code: it times
the decode floor and the analysis of one shape back to back. For each shape the builds take turns (A, B, A, B, ...
`runs` turns each), so that a shared machine's slow spells slow them alike; a ratio of the same turn (analysis
over floor) is steadier than either rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from harness.bench import shapes
from harness.bench.machine import machine
from harness.bench.shapes.report import markdown

TURN = REPO_ROOT / "scripts" / "bench_shape_turn.py"


@dataclass(frozen=True)
class Build:
    """A checkout measured: its name in the report, and the interpreter of its venv."""

    name: str
    checkout: Path

    @property
    def python(self) -> Path:
        return self.checkout / ".venv" / "bin" / "python"

    @classmethod
    def parse(cls, text: str) -> Build:
        """`NAME=CHECKOUT`, or a CHECKOUT alone (named after its folder)."""
        name, _, checkout = text.rpartition("=")
        path = Path(checkout).resolve()
        return cls(name or path.name, path)


def add_arguments(parser: argparse.ArgumentParser, kind: str) -> None:
    """Add the options of a run on shapes (`--shapes` starts one) to a benchmark script's."""
    names = ", ".join(s.name for s in shapes.shapes_of(kind))
    parser.add_argument("--shapes", help=f"measure these shapes side by side, comma-separated, or all ({names})")
    parser.add_argument(
        "--streams",
        type=Path,
        default=REPO_ROOT / "build" / "shapes",
        help="the shapes' streams: reused from here when present, else generated here (default build/shapes)",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="the shapes' sizes, times their defaults")
    parser.add_argument(
        "--build",
        action="append",
        type=Build.parse,
        help="NAME=CHECKOUT: a build to measure, with CHECKOUT/.venv/bin/python (repeat for several, measured in "
        "turns; default: this checkout)",
    )
    parser.add_argument("--cpu", type=int, default=0, help="the core each turn is pinned to")
    parser.add_argument(
        "--profile-shape",
        metavar="SHAPE",
        help="print a cProfile of the analysis of this shape (top 20, the first build's); for instruction counts "
        "see scripts/replay_loop.py (callgrind)",
    )


def run(args: argparse.Namespace, kind: str) -> int:
    """Measure the shapes `args` ask for; print the Markdown table, write the JSON (`args.json`)."""
    builds: list[Build] = args.build or [Build("this", REPO_ROOT)]
    engine = getattr(args, "engine", "native")
    if args.profile_shape:
        path, _ = shapes.obtain(shapes.shape(kind, args.profile_shape), args.streams, args.scale)
        command = [str(builds[0].python), str(TURN), kind, str(path), "--engine", engine, "--profile"]
        return subprocess.run([*command, "--cpu", str(args.cpu)], check=False).returncode
    chosen = shapes.chosen(kind, args.shapes)
    if kind == shapes.AUDIT:  # (the audit's speed beside the replay's of the same scenarios)
        chosen.append(shapes.shape(shapes.REPLAY, shapes.PAIRED))
    results = []
    for one in chosen:
        started = time.perf_counter()
        path, make_up = shapes.obtain(one, args.streams, args.scale)
        print(f"{one.kind} {one.name}: {path} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
        results.append(measure(one, path, make_up, builds, runs=args.runs, engine=engine, cpu=args.cpu))
    report = {"kind": kind, "machine": machine(), "cpu": args.cpu, "runs": args.runs, "engine": engine}
    report["shapes"] = results
    report["builds"] = {b.name: str(b.checkout) for b in builds}
    print(markdown(report))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"\nresults written to {args.json}", file=sys.stderr)
    bad = [r["shape"] for r in results for b in r["builds"].values() if b["skipped"]]
    if bad:
        print(f"events skipped as invalid in: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


def turn(build: Build, kind: str, path: Path, *, engine: str, cpu: int) -> dict[str, Any]:
    """Run one turn of `build` on the stream at `path`: its floor and analysis seconds, events and findings."""
    command = [str(build.python), str(TURN), kind, str(path), "--engine", engine, "--cpu", str(cpu)]
    done = subprocess.run(command, capture_output=True, check=False, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{build.name}: {' '.join(command)} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measure(
    one: shapes.Shape, path: Path, make_up: dict[str, Any], builds: list[Build], *, runs: int, engine: str, cpu: int
) -> dict[str, Any]:
    """Measure each build on one shape, `runs` turns each, in turns; return the shape's figures and the builds'."""
    turns: dict[str, list[dict[str, Any]]] = {b.name: [] for b in builds}
    for _ in range(runs):
        for build in builds:
            turns[build.name].append(turn(build, one.kind, path, engine=engine, cpu=cpu))
    size = path.stat().st_size
    events = turns[builds[0].name][0]["lines"]
    figures = {name: summary(taken) for name, taken in turns.items()}
    for name, f in figures.items():
        print(
            f"  {name}: {f['analysis_events_per_s']:,.0f} ev/s, floor {f['floor_events_per_s']:,.0f} ev/s, "
            f"ratio {f['ratio_of_bests']:.3f} (median {f['ratio_median']:.3f})",
            file=sys.stderr,
        )
    return {
        "shape": one.name,
        "kind": one.kind,
        "about": one.about,
        "path": str(path),
        "events": events,
        "bytes": size,
        "bytes_per_event": size / max(1, events),
        "make_up": make_up,
        "builds": figures,
    }


def summary(taken: list[dict[str, Any]]) -> dict[str, Any]:
    """A build's figures on a shape from its turns: the best rates, their ratio, the median of the turns' ratios."""
    lines, events = taken[0]["lines"], taken[0]["events"]
    analysis = min(t["analysis_s"] for t in taken)
    floor = min(t["floor_s"] for t in taken)
    return {
        "analysis_events_per_s": lines / analysis,
        "floor_events_per_s": lines / floor,
        "ratio_of_bests": floor / analysis,
        "ratio_median": statistics.median(t["floor_s"] / t["analysis_s"] for t in taken),
        "findings": taken[0]["findings"],
        "skipped": lines - events,
        "turns": [{"floor_s": t["floor_s"], "analysis_s": t["analysis_s"]} for t in taken],
    }
