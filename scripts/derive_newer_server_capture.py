"""Derive newer-server (>= 1.22) captures from real v1.20 captures of writes through a subresource.

1. `derived-newer-server-scale-subresource.jsonl` from the scale-subresource fight.

kube-apiserver v1.20 (the version the test suite builds) records no managedFields entry for writes through
the `scale` subresource and has no `subresource` field; servers from 1.22 on record such a write as an
Update entry with `subresource: scale` that takes ownership of `spec.replicas`. The engine handles both, and
this script makes the second case testable from real data: it takes `fight-scale-vs-apply.jsonl` and rewrites
only the managedFields of the Deployment, as a newer server would have written them:

- a write that changed `spec.replicas` and nothing else, with no entry explaining it (the scale PATCH),
  gets an entry {manager: kube-controller-manager, operation: Update, subresource: scale} owning
  `spec.replicas`, stamped with the event's second; `kubectl`'s entry loses `spec.replicas`;
- the next Apply by `kubectl` (force) takes it back: the scale entry is dropped, as the server drops empty
  entries;
- every other entry, event and value is left exactly as recorded.

2. `derived-newer-server-status-subresource.jsonl` from `hot-loop-status.jsonl`, a reconciler rewriting a
Widget's status through the `status` subresource. v1.20 records those writes as a plain Update entry of
`widget-status-reconciler` (no `subresource` field); servers from 1.22 on record the same entry with
`subresource: status` (placed between `operation` and `time`: the server writes a custom resource's keys in
sorted order, as recorded). Only that entry of the Widget's managedFields changes; every other entry, its own
`time` and every event and value are left exactly as recorded.

    .venv/bin/python scripts/derive_newer_server_capture.py    # writes both
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

CAPTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "captures"
SOURCE = CAPTURES / "fight-scale-vs-apply.jsonl"
TARGET = CAPTURES / "derived-newer-server-scale-subresource.jsonl"
STATUS_SOURCE = CAPTURES / "hot-loop-status.jsonl"
STATUS_TARGET = CAPTURES / "derived-newer-server-status-subresource.jsonl"
STATUS_WRITER = "widget-status-reconciler"
SCALER = {
    "manager": "kube-controller-manager",
    "operation": "Update",
    "apiVersion": "apps/v1",
    "subresource": "scale",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:spec": {"f:replicas": {}}},
}


def _without_replicas(entry: dict[str, Any]) -> dict[str, Any]:
    entry = copy.deepcopy(entry)
    entry["fieldsV1"].get("f:spec", {}).pop("f:replicas", None)
    return entry


def derive(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    replicas: dict[str, int] = {}
    scaled: dict[str, str] = {}  # uid -> time of the scale entry, while it owns spec.replicas
    for event in events:
        obj = event["object"]
        meta = obj["metadata"]
        if obj["kind"] != "Deployment":
            out.append(event)
            continue
        uid = meta["uid"]
        now = obj["spec"]["replicas"]
        entries = meta["managedFields"]
        kubectl = next(e for e in entries if e["manager"] == "kubectl")
        applied_now = kubectl["time"] == event["observedAt"][:19] + "Z"
        if uid in replicas and now != replicas[uid] and not applied_now:
            scaled[uid] = event["observedAt"][:19] + "Z"  # the scale PATCH
        elif applied_now and now != replicas.get(uid, now):
            scaled.pop(uid, None)  # kubectl (force) took spec.replicas back
        replicas[uid] = now
        if uid in scaled:
            entries = [_without_replicas(e) if e["manager"] == "kubectl" else e for e in entries]
            entries.append(SCALER | {"time": scaled[uid]})
        derived = copy.deepcopy(event)
        derived["object"]["metadata"]["managedFields"] = entries
        out.append(derived)
    return out


def derive_status(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The status writer's entries on the Widget get `subresource: status`; nothing else changes."""
    out = []
    for event in events:
        if event["object"]["kind"] != "Widget":
            out.append(event)
            continue
        derived = copy.deepcopy(event)
        meta = derived["object"]["metadata"]
        meta["managedFields"] = [
            dict(sorted((entry | {"subresource": "status"}).items())) if entry["manager"] == STATUS_WRITER else entry
            for entry in meta["managedFields"]
        ]
        out.append(derived)
    return out


def _rewrite(source: Path, target: Path, transform: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    events = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    target.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in transform(events)))
    print(f"wrote {target} ({len(events)} events)")


def main() -> None:
    _rewrite(SOURCE, TARGET, derive)
    _rewrite(STATUS_SOURCE, STATUS_TARGET, derive_status)


if __name__ == "__main__":
    main()
