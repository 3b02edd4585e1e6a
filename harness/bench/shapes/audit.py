"""Generate the audit logs the audit analysis is measured on besides the synthetic one.

Each replicates recorded logs of a real kube-apiserver (tests/fixtures/audit/*.metadata.jsonl and *.request-
response.jsonl, tests/fixtures/real/*.audit.jsonl) in time and over lanes of names (`harness.bench.shapes.
replicate`), each event with an auditID of its own, in the order the log backend writes them (stageTimestamp):

- `conflicts`: the conflicts (409) of the recordings, each with the successful writes to its object around it
  (the one that made the client's copy stale, and the retry or the winner's next), no reads: the log of
  controllers fighting through optimistic concurrency;
- `reads`: every event of the recordings, each read (get, list, watch) repeated until reads are `READ_SHARE` of
  the log, as in a real cluster's log;
- `request-response`: the `RequestResponse`-level recordings as they are: events with requestObject and
  responseObject bodies.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from harness.bench.shapes.replicate import Shift, lane_name, merged, span_seconds
from watcher.model import parse_time

FIXTURES = REPO_ROOT / "tests" / "fixtures"
READS = frozenset(("get", "list", "watch"))
WRITES = frozenset(("create", "update", "patch", "delete"))
READ_SHARE = 0.87
PAUSE = 3660  # seconds between copies of a recording: more than the findings' windows
_ID = b"00000000-0000-0000-0000-00000000cafe"  # where a copy's auditID goes
Event = dict[str, Any]


def metadata_recordings() -> list[Path]:
    return [*sorted((FIXTURES / "audit").glob("*.metadata.jsonl")), *sorted((FIXTURES / "real").glob("*.audit.jsonl"))]


def request_response_recordings() -> list[Path]:
    return sorted((FIXTURES / "audit").glob("*.request-response.jsonl"))


def read_events(path: Path) -> list[Event]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _target(event: Event) -> tuple[str, str, str] | None:
    ref = event.get("objectRef")
    if not ref or not ref.get("name"):
        return None
    return ref.get("resource", ""), ref.get("namespace") or "", ref["name"]


def conflict_events(events: list[Event]) -> list[Event]:
    """The conflicts (409) of a recording, each with the successful writes to its object around it.

    The write before it (which made the client's copy stale: a conflict after the client's own write is a lagging
    cache, not contention) and the write after it (the retry, or the winner's next).
    """
    kept: dict[int, Event] = {}
    last: dict[tuple[str, str, str], int] = {}  # each object's latest successful write
    waiting: set[tuple[str, str, str]] = set()  # objects with a conflict not yet followed by a write
    for number, event in enumerate(events):
        target, code = _target(event), event.get("responseStatus", {}).get("code")
        if target is None or event["verb"] not in WRITES or code is None:
            continue
        if code == 409:
            kept[number] = event
            if target in last:
                kept[last[target]] = events[last[target]]
            waiting.add(target)
        elif code < 300:
            last[target] = number
            if target in waiting:
                kept[number] = event
                waiting.discard(target)
    return [kept[n] for n in sorted(kept)]


def _rename(body: Any, lane: int) -> Any:
    if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict) or not body["metadata"].get("name"):
        return body
    meta = body["metadata"]
    namespace, name = lane_name(meta.get("namespace"), meta["name"], lane)
    return {**body, "metadata": {**meta, "name": name} | ({"namespace": namespace} if namespace else {})}


def in_lane(event: Event, lane: int) -> bytes:
    """The event in `lane` (its object renamed, `lane_name`), its auditID the placeholder `_ID`."""
    out = {**event, "auditID": _ID.decode()}
    ref = event.get("objectRef")
    if ref and (ref.get("namespace") or ref.get("name")):
        namespace, name = lane_name(ref.get("namespace"), ref.get("name") or "", lane)
        uri = event["requestURI"]
        if ref.get("namespace"):
            uri = uri.replace(f"/namespaces/{ref['namespace']}/", f"/namespaces/{namespace}/", 1)
            uri = uri.replace(f"/namespaces/{ref['namespace']}?", f"/namespaces/{namespace}?", 1)
        elif ref.get("name"):
            uri = uri.replace(f"/{ref['resource']}/{ref['name']}", f"/{ref['resource']}/{name}", 1)
        renamed = {**ref, "name": name} if ref.get("name") else dict(ref)
        if namespace:
            renamed["namespace"] = namespace
        out |= {"objectRef": renamed, "requestURI": uri}
    for key in ("requestObject", "responseObject"):
        if key in event:
            out[key] = _rename(event[key], lane)
    return orjson.dumps(out)


Counted = list[tuple[Event, int]]  # a recording's events, each with the times it is written


def write_replicas(path: Path, recordings: list[Counted], *, events: int, lanes: int) -> dict[str, Any]:
    """Write at least `events` events: copies of `recordings` (each event with its repeats) in `lanes` lanes.

    A repeat of an event follows it by a millisecond. Return the log's make-up.
    """
    per_copy = sum(repeats for evs in recordings for _, repeats in evs) * lanes
    copies = max(1, math.ceil(events / per_copy))
    lines: list[tuple[float, int, bytes]] = []
    serial = 0
    for index, evs in enumerate(recordings):
        if not evs:
            continue
        span = span_seconds(e["stageTimestamp"] for e, _ in evs) + PAUSE
        times = [parse_time(e["stageTimestamp"]) for e, _ in evs]
        for j in range(lanes):
            lane = index * lanes + j
            texts = [in_lane(e, lane) for e, _ in evs]
            for copy in range(copies):
                shift = Shift(copy * span, copy)
                for (_, repeats), at, text in zip(evs, times, texts, strict=True):
                    moved = shift(text)
                    for repeat in range(repeats):
                        serial += 1
                        audit_id = f"{serial:032x}"
                        uuid = f"{audit_id[:8]}-{audit_id[8:12]}-{audit_id[12:16]}-{audit_id[16:20]}-{audit_id[20:]}"
                        lines.append((at + copy * span + repeat * 0.001, len(lines), moved.replace(_ID, uuid.encode())))
    path.write_bytes(merged(lines))
    conflicts = sum(r for evs in recordings for e, r in evs if e.get("responseStatus", {}).get("code") == 409)
    reads = sum(r for evs in recordings for e, r in evs if e["verb"] in READS)
    bodies = sum(r for evs in recordings for e, r in evs if "requestObject" in e or "responseObject" in e)
    shares = {"conflicts": conflicts, "reads": reads, "with_bodies": bodies}
    return {"recordings": len(recordings), "lanes": lanes, "copies": copies} | {
        f"share_{k}": round(v * lanes * copies / max(1, len(lines)), 3) for k, v in shares.items()
    }


def _once(events: list[Event]) -> Counted:
    return [(e, 1) for e in events]


def write_conflicts(path: Path, *, events: int, lanes: int = 4) -> dict[str, Any]:
    recordings = [_once(conflict_events(read_events(p))) for p in metadata_recordings()]
    return write_replicas(path, [r for r in recordings if r], events=events, lanes=lanes)


def write_reads(path: Path, *, events: int, lanes: int = 2) -> dict[str, Any]:
    recordings = [read_events(p) for p in metadata_recordings()]
    reads = sum(1 for evs in recordings for e in evs if e["verb"] in READS)
    others = sum(len(evs) for evs in recordings) - reads
    repeats = max(1, round(READ_SHARE / (1 - READ_SHARE) * others / reads))
    counted = [[(e, repeats if e["verb"] in READS else 1) for e in evs] for evs in recordings]
    return write_replicas(path, counted, events=events, lanes=lanes)


def write_request_response(path: Path, *, events: int, lanes: int = 4) -> dict[str, Any]:
    recordings = [_once(read_events(p)) for p in request_response_recordings()]
    return write_replicas(path, recordings, events=events, lanes=lanes)
