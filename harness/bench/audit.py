"""Measure the audit analysis (`fightwatch audit`) on a generated log: its speed, memory and findings.

On one core, best of `runs`: the whole analysis (reading the log, decoding each event into a Request, the request
engine) and JSON decoding alone (the floor); the request engine's memory per tracked object (one client each) and
per additional client of an object; what it found against what was injected; and the same log in the envelopes
managed clusters export it in (`harness/envelopes.py`: EKS, GKE, AKS), each timed and checked to give what the raw
log gives (GKE's forms: what the raw log gives with GKE's losses, `gke_degraded`).
"""

from __future__ import annotations

import functools
import gc
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from harness.bench.audit_log import generate, write_updates
from harness.bench.machine import machine
from harness.envelopes import WRITERS, gke_degraded, raw_lines
from watcher.config import Config
from watcher.detection.request_engine import RequestEngine
from watcher.sources.audit import AuditStats, read_audit_log


def benchmark(*, objects: int, clients: int, seed: int, runs: int, with_envelopes: bool) -> tuple[dict[str, Any], bool]:
    """Generate the log and take every measurement; return the results, and whether the findings were all right.

    All right: every injected finding found, nothing else, and the same findings from every envelope.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.log"
        injected = generate(path, objects=objects, clients=clients, seed=seed)
        size = path.stat().st_size
        full = best(runs, functools.partial(timed_analysis, path))
        floor = best(runs, lambda: decode_only(path))
        _, events, engine = analyse(path)
        found: dict[str, set[tuple[str, str]]] = {k: set() for k in injected}
        for f in engine.active() + engine.resolved():
            found[f.type.value].add((f.object.namespace or "", f.object.name))
        per_object = memory(Path(tmp) / "m1.log", objects=20_000, clients_per_object=1)
        per_four = memory(Path(tmp) / "m4.log", objects=20_000, clients_per_object=4)
        in_envelopes = envelopes(path, Path(tmp), runs) if with_envelopes else {}
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "events": events,
        "bytes": size,
        "objects": objects,
        "clients": clients,
        "seconds": round(full[0], 3),
        "events_per_second": round(events / full[0]),
        "decode_floor_events_per_second": round(floor[1] / floor[0]),
        "share_of_floor": round((events / full[0]) / (floor[1] / floor[0]), 3),
        "bytes_per_object": round(per_object),
        "bytes_per_extra_client": round((per_four - per_object) / 3),
        "recall": {k: f"{len(found[k] & v)}/{len(v)}" for k, v in injected.items()},
        "false_positives": sum(len(found[k] - v) for k, v in injected.items()),
        "envelopes": in_envelopes,
    }
    same = all(e["same_findings"] for e in in_envelopes.values())
    ok = result["false_positives"] == 0 and all(len(found[k] & v) == len(v) for k, v in injected.items())
    return result, ok and same


# The envelopes timed: each form a file comes in (the webhook's Firehose and Pub/Sub bodies are forms of the same).
ENVELOPE_FORMS = (
    "eks-filter-log-events",
    "eks-tail",
    "eks-firehose-s3",
    "eks-insights-json",
    "eks-insights-csv",
    "eks-parsed-message",
    "gke-gcloud-read",
    "gke-gcloud-yaml",
    "gke-sink",
    "aks-event-hubs",
    "aks-storage",
    "aks-log-analytics",
)


def findings_of(engine: RequestEngine) -> set[tuple[str, str, str]]:
    return {(f.type.value, f.object.namespace or "", f.object.name) for f in engine.active() + engine.resolved()}


def envelopes(path: Path, folder: Path, runs: int) -> dict[str, dict[str, Any]]:
    """Time the analysis of the log in each envelope (`ENVELOPE_FORMS`); check it gives the raw log's findings."""
    events = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    degraded = folder / "gke-degraded.log"
    degraded.write_bytes(raw_lines(e for e in map(gke_degraded, events) if e is not None))
    expected = {False: findings_of(analyse(path)[2]), True: findings_of(analyse(degraded)[2])}
    degraded.unlink()
    out: dict[str, dict[str, Any]] = {}
    for form in ENVELOPE_FORMS:
        envelope, write = WRITERS[form]
        target = folder / form
        target.write_bytes(write(events))
        seconds, count = best(runs, functools.partial(timed_analysis, target))
        out[form] = {
            "bytes": target.stat().st_size,
            "events_per_second": round(count / seconds),
            "same_findings": findings_of(analyse(target)[2]) == expected[envelope == "gke"],
        }
        target.unlink()
    return out


def analyse(path: Path) -> tuple[float, int, RequestEngine]:
    engine = RequestEngine(Config().detection)
    stats = AuditStats()
    started = time.perf_counter()
    for request in read_audit_log(str(path), stats=stats):
        engine.process(request)
    return time.perf_counter() - started, stats.events, engine


def timed_analysis(path: Path) -> tuple[float, int]:
    """Analyse the log at `path`: the seconds it took and the events read."""
    seconds, events, _ = analyse(path)
    return seconds, events


def decode_only(path: Path) -> tuple[float, int]:
    started = time.perf_counter()
    count = 0
    with path.open("rb") as f:
        for line in f:
            orjson.loads(line)
            count += 1
    return time.perf_counter() - started, count


def best(runs: int, fn: Callable[[], tuple[float, int]]) -> tuple[float, int]:
    results = []
    for _ in range(runs):
        gc.collect()
        results.append(fn())
    return min(results)


def memory(path: Path, *, objects: int, clients_per_object: int) -> float:
    """Measure the bytes the request engine holds per object with `clients_per_object` clients.

    From a log of successful updates that each change the object, measured with tracemalloc after the log's events
    are read.
    """
    write_updates(path, objects=objects, clients_per_object=clients_per_object)
    requests = list(read_audit_log(str(path), stats=AuditStats()))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    engine = RequestEngine(Config().detection)
    for request in requests:
        engine.process(request)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert engine.tracked_objects == objects
    return held / objects
