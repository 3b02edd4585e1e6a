"""Generate a seeded synthetic cluster's watch stream, or take the one asked for, and describe it for results.

The stream is a JSON Lines capture (`{"type", "object", "observedAt"}` per line, in observedAt order) of watch
events over objects shaped like a current Kubernetes cluster's (ConfigMaps, Deployments with a pod template,
ReplicaSets, realistic managedFields; the shapes from the real captures where they hold one), two hours of it. The
same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from harness.synthetic.mutations import MUTATIONS
from harness.synthetic.schedule import plan
from harness.synthetic.templates import Templates
from harness.synthetic.times import observed_time
from harness.synthetic.truth import Truth, load_truth, write_truth

REAL_CAPTURES = REPO_ROOT / "tests" / "fixtures" / "captures"  # (read as data: the object shapes)
RV0 = 48_000_000  # resourceVersion of the first write in the stream
LATENCY = 0.005  # seconds between a write and its watch event


@dataclass(frozen=True)
class Shape:
    """The stream asked for: its events and objects, its seed, the captures its objects take their shapes from, and
    whether they are reduced to what a metadata-only watch sends."""

    events: int
    objects: int
    seed: int
    templates: Path = REAL_CAPTURES
    metadata_only: bool = False

    @classmethod
    def of_args(cls, args: argparse.Namespace) -> Shape:
        """Take the shape from the options of `add_arguments`."""
        return cls(args.events, args.objects, args.seed, args.templates, args.metadata_only)


def generate(path: Path, shape: Shape) -> Truth:
    """Write the stream (JSON Lines, ordered by observedAt); return what was injected and its sizes.

    With `metadata_only`, each object as a metadata-only watch sends it (PartialObjectMetadata: kind, apiVersion
    and metadata) and a recording writes it (with the kind and apiVersion of the resource watched).
    """
    rng = random.Random(shape.seed)  # noqa: S311 - deterministic test data, not security
    pop = plan(rng, shape.events, shape.objects)
    templates = Templates(shape.templates)
    schedule = [(obj.listed, obj.idx, -1) for obj in pop.objects]
    schedule += [(t, obj.idx, k) for obj in pop.objects for k, (t, _, _) in enumerate(obj.actions)]
    schedule.sort()
    truth = Truth(objects=len(pop.objects), templates=dict(templates.sources), seed=shape.seed)
    for obj in pop.objects:
        truth.roles.setdefault(obj.role, []).append(obj.uid)
        if obj.flavor:
            truth.flavors[obj.uid] = obj.flavor
    state: list[bytes | None] = [None] * len(pop.objects)
    rv = RV0
    with path.open("wb") as out:
        for t, idx, k in schedule:
            obj = pop.objects[idx]
            if k < 0:
                doc = templates.build(obj, None if obj.owner is None else pop.objects[obj.owner], rng)
                kind = "ADDED"
                rv += 0 if obj.created < 0 else rng.randint(1, 4)
                version = rng.randrange(1_000_000, RV0) if obj.created < 0 else rv
            else:
                doc = orjson.loads(state[idx])  # type: ignore[arg-type]
                _, op, args = obj.actions[k]
                MUTATIONS[op](doc, args, t - LATENCY, obj, rng)
                kind = "DELETED" if op == "delete" else "MODIFIED"
                rv += rng.randint(1, 4)
                version = rv
            doc["metadata"]["resourceVersion"] = str(version)
            body = orjson.dumps(doc)
            state[idx] = None if kind == "DELETED" else body
            if shape.metadata_only:
                body = orjson.dumps({"kind": doc["kind"], "apiVersion": doc["apiVersion"], "metadata": doc["metadata"]})
            line = b'{"type":"%s","object":%s,"observedAt":"%s"}\n' % (
                kind.encode(),
                body,
                observed_time(t).encode(),
            )
            out.write(line)
            truth.events += 1
            truth.bytes += len(line)
            sizes = truth.by_kind.setdefault(obj.kind, [0, 0])
            sizes[0] += 1
            sizes[1] += len(line)
            truth.by_type[kind] = truth.by_type.get(kind, 0) + 1
    return truth


def obtain_as_asked(args: argparse.Namespace, workdir: Path) -> tuple[Path, Truth | None, float | None]:
    """Obtain the stream to measure, with the options of `add_arguments` and the caller's `--stream`.

    Return its path, its truth and the seconds generating it took (None: given). `--stream` with its truth if it
    exists; else one generated there (and kept, with its sidecar) or, without `--stream`, in `workdir`.
    """
    stream: Path | None = args.stream
    if stream is not None and stream.exists():
        return stream, load_truth(stream), None
    path = stream or workdir / "stream.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    truth = generate(path, Shape.of_args(args))
    seconds = time.perf_counter() - start
    if stream is not None:
        write_truth(path, truth)
    return path, truth, seconds


def stream_summary(path: Path, truth: Truth | None, events: int) -> dict[str, Any]:
    """Describe the stream as results do: its size and, from its truth, its make-up."""
    size = path.stat().st_size
    summary: dict[str, Any] = {"path": str(path), "events": events, "bytes": size, "mean_bytes": size / max(1, events)}
    if truth is not None:
        summary |= {
            "objects": truth.objects,
            "by_type": truth.by_type,
            "by_kind": {k: {"events": n, "mean_bytes": b / max(1, n)} for k, (n, b) in sorted(truth.by_kind.items())},
            "roles": {role: len(uids) for role, uids in sorted(truth.roles.items())},
            "templates": truth.templates,
            "seed": truth.seed,
        }
    else:
        summary["objects"] = 0
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the generator's options to a script's (those that generate the stream they measure)."""
    parser.add_argument("--events", type=int, default=200_000, help="events to generate (default 200,000)")
    parser.add_argument("--objects", type=int, default=20_000, help="objects to generate (default 20,000)")
    parser.add_argument("--seed", type=int, default=20210304, help="random seed of the generated stream")
    parser.add_argument(
        "--templates", type=Path, default=REAL_CAPTURES, help="real captures (*.jsonl) to take object shapes from"
    )
    parser.add_argument(
        "--metadata-only",
        action="store_true",
        help="objects as a metadata-only watch sends them (kind, apiVersion, metadata), as `--record` writes them",
    )
