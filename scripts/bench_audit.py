#!/usr/bin/env python3
"""Benchmark the audit analysis (`fightwatch audit`) on a large, seeded audit log shaped like the recorded one.

One run
1. generates a `Metadata`-level audit log (JSON Lines, as the log backend writes it) of >= 200,000 events over
   `--objects` ConfigMaps and `--clients` service accounts, from the events recorded from a real kube-apiserver
   (tests/fixtures/audit/*.metadata.jsonl: v1.37.2) as templates, each client a service account in a pod of its
   own: reads and successful updates by one or two clients per
   object over two hours, an occasional conflict retried once, plus injected conflict storms, stuck appliers and
   no-op loops;
2. measures, pinned to one core, best of `--runs`: the whole analysis (reading the log, decoding each event into a
   Request, the request engine) and JSON decoding alone (the floor);
3. measures the request engine's memory with tracemalloc: per tracked object (one client each), and per
   additional client of an object;
4. checks that the injected findings are found and nothing else;
5. writes the same log into the envelopes managed clusters export it in (`harness/envelopes.py`: EKS, GKE, AKS),
   and times the analysis of each, best of `--runs`, checking it finds what the raw log gives (GKE's forms: what
   the raw log gives with GKE's losses, `gke_degraded`);
and writes the results to `--json` (default bench-results/audit.json) and prints them.

  .venv/bin/python scripts/bench_audit.py
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from harness.bench.machine import machine
from harness.envelopes import WRITERS, gke_degraded, raw_lines
from watcher.config import Config
from watcher.detection.request_engine import RequestEngine
from watcher.model import format_observed
from watcher.offline import tune_gc
from watcher.sources.audit import AuditStats, read_audit_log

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "audit"
POD_NAME = "authentication.kubernetes.io/pod-name"
START = 1_795_000_000.0
Event = dict[str, Any]


def templates() -> dict[str, Event]:
    """Recorded events: a get, a successful update, an update rejected with 409, an apply rejected with 409."""
    found: dict[str, Event] = {}
    for name in ("rmw-fight", "apply-stuck"):
        for line in (FIXTURES / f"{name}.metadata.jsonl").read_bytes().splitlines():
            event = orjson.loads(line)
            code = event["responseStatus"]["code"]
            kind = {("get", 200): "get", ("update", 200): "update", ("update", 409): "conflict"}.get(
                (event["verb"], code)
            )
            if event["verb"] == "patch" and code == 409:
                kind = "apply"
            if kind is not None:
                found.setdefault(kind, event)
    return found


class Log:
    def __init__(self, seed: int) -> None:
        self.templates = templates()
        self.random = random.Random(seed)  # noqa: S311 - seeded test data, not secrets
        self.events: list[tuple[float, bytes]] = []
        self.serial = 0

    def add(self, kind: str, at: float, ns: str, name: str, user: str, *, rv: int, query: str = "") -> None:
        self.serial += 1
        event = self.templates[kind]
        agent = user.rsplit(":", 1)[-1]
        # (each service account in a pod of its own, its token bound to it, as the recorded clients' are)
        extra = {**event["user"].get("extra", {}), POD_NAME: [f"{agent}-5f8b6c9d7-m4tzr"]}
        copy = {
            **event,
            "auditID": f"{self.serial:032x}",
            "requestURI": f"/api/v1/namespaces/{ns}/configmaps/{name}{query}",
            "user": {**event["user"], "username": user, "extra": extra},
            "userAgent": f"{agent}/1.0",
            "objectRef": {**event["objectRef"], "namespace": ns, "name": name, "resourceVersion": str(rv)},
            "requestReceivedTimestamp": format_observed(at),
            "stageTimestamp": format_observed(at + 0.002),
        }
        self.events.append((at, orjson.dumps(copy)))


def generate(path: Path, *, objects: int, clients: int, seed: int) -> dict[str, set[tuple[str, str]]]:
    """Write the log; return the injected findings by type: {(namespace, name)}."""
    log = Log(seed)
    rng = log.random
    users = [f"system:serviceaccount:team-{i % 40}:controller-{i}" for i in range(clients)]
    injected: dict[str, set[tuple[str, str]]] = {"conflict_storm": set(), "apply_conflict": set(), "noop_writes": set()}
    span = 7200.0
    for index in range(objects):
        ns, name = f"ns-{index % 500}", f"cm-{index}"
        writers = rng.sample(users, 2 if index % 3 == 0 else 1)
        rv = 1000 + index * 1000
        at = START + rng.uniform(0, 600)
        role = index % 400
        for _ in range(rng.randint(3, 8)):  # benign: a read and an update every ten minutes or so
            who = rng.choice(writers)
            log.add("get", at, ns, name, who, rv=rv)
            if len(writers) == 2 and rng.random() < 0.1:  # now and then the other wrote first: one conflict
                log.add("conflict", at + 0.01, ns, name, who, rv=rv)
                rv += 1
            log.add("update", at + 0.02, ns, name, who, rv=rv)
            rv += 1
            at += rng.uniform(300, span / 8)
        if role == 1:  # a storm: two controllers over one object, one losing every round for a few minutes
            injected["conflict_storm"].add((ns, name))
            loser, winner = users[index % clients], users[(index + 1) % clients]
            for step in range(40):
                t = at + step * 3.0
                log.add("update", t, ns, name, winner, rv=rv)
                log.add("conflict", t + 0.5, ns, name, loser, rv=rv)
                rv += 1
        elif role == 2:  # a no-op loop: the same version rewritten every 5 seconds
            injected["noop_writes"].add((ns, name))
            for step in range(30):
                log.add("update", at + step * 5.0, ns, name, users[index % clients], rv=rv)
        elif role == 3:  # a stuck applier
            injected["apply_conflict"].add((ns, name))
            for step in range(5):
                log.add(
                    "apply", at + step * 60.0, ns, name, users[index % clients], rv=rv, query="?fieldManager=deployer"
                )
    log.events.sort(key=lambda e: e[0])
    path.write_bytes(b"".join(line + b"\n" for _, line in log.events))
    return injected


# The envelopes timed: each form a file comes in (the webhook's Firehose and Pub/Sub bodies are forms of the same).
ENVELOPE_FORMS = (
    "eks-filter-log-events",
    "eks-tail",
    "eks-firehose-s3",
    "gke-gcloud-read",
    "gke-sink",
    "aks-event-hubs",
    "aks-storage",
    "aks-log-analytics",
)


def findings_of(engine: RequestEngine) -> set[tuple[str, str, str]]:
    return {(f.type.value, f.object.namespace or "", f.object.name) for f in engine.active() + engine.resolved()}


def envelopes(path: Path, folder: Path, runs: int) -> dict[str, dict[str, Any]]:
    """events/s of the log in each envelope (`ENVELOPE_FORMS`), and whether it gives the raw log's findings."""
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
        seconds, count = best(runs, lambda target=target: analyse(target)[:2])
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
    """Bytes the request engine holds per object with `clients_per_object` clients, from a log of successful
    updates that each change the object (a new resourceVersion each: no no-op writes, whose rates would be counted
    too), measured with tracemalloc after the log's events are read."""
    log = Log(7)
    for index in range(objects):
        for c in range(clients_per_object):
            log.add(
                "update",
                START + index * 0.001 + c * 0.0001,
                "ns",
                f"cm-{index}",
                f"system:serviceaccount:a:c{c}",
                rv=c + 1,
            )
    path.write_bytes(b"".join(line + b"\n" for _, line in log.events))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=REPO / "bench-results" / "audit.json")
    parser.add_argument(
        "--no-envelopes", dest="envelopes", action="store_false", help="skip timing the clouds' envelopes"
    )
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    tune_gc()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.log"
        injected = generate(path, objects=args.objects, clients=args.clients, seed=args.seed)
        size = path.stat().st_size
        full = best(args.runs, lambda: analyse(path)[:2])
        floor = best(args.runs, lambda: decode_only(path))
        _, events, engine = analyse(path)
        found: dict[str, set[tuple[str, str]]] = {k: set() for k in injected}
        for f in engine.active() + engine.resolved():
            found[f.type.value].add((f.object.namespace or "", f.object.name))
        per_object = memory(Path(tmp) / "m1.log", objects=20_000, clients_per_object=1)
        per_four = memory(Path(tmp) / "m4.log", objects=20_000, clients_per_object=4)
        in_envelopes = envelopes(path, Path(tmp), args.runs) if args.envelopes else {}
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "events": events,
        "bytes": size,
        "objects": args.objects,
        "clients": args.clients,
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
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    for key, value in result.items():
        print(f"{key:32} {value}")
    same = all(e["same_findings"] for e in in_envelopes.values())
    ok = result["false_positives"] == 0 and all(len(found[k] & v) == len(v) for k, v in injected.items())
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
