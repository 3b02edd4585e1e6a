"""Generate the watch streams the replay is measured on besides the synthetic cluster's.

- `scenarios`: the real recordings in the repository (tests/fixtures/captures/*.jsonl, tests/fixtures/real/
  *.watch.jsonl, tests/fixtures/audit/*.watch.jsonl: a real kube-apiserver's watch events), each object reduced to
  what a metadata-only watch sends (kind, apiVersion, metadata), replicated in time and over lanes of names
  (`harness.bench.shapes.replicate`): a few hundred objects with many writes each, controllers' status writes among
  them. An ADDED of an object a copy finds present (the previous copy left it) is a MODIFIED.
- `large-objects`: full objects large in what a watch carries: ConfigMaps with tens of KB of data and of
  `kubectl.kubernetes.io/last-applied-configuration`, Deployments with hundreds of environment variables (as many
  managedFields fields), their status written by the deployment controller; now and then a hand edit of a field
  the applier owns, which the applier takes back (a fight).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from harness.bench.shapes.replicate import Shift, lane_name, merged, span_seconds
from watcher.model import format_observed, parse_time

FIXTURES = REPO_ROOT / "tests" / "fixtures"
PAUSE = 3660  # seconds between copies of a recording: more than the default fight window (an hour)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
Event = dict[str, Any]


def scenario_recordings() -> list[Path]:
    """The real watch recordings of the repository, in a stable order."""
    return [
        *sorted((FIXTURES / "captures").glob("*.jsonl")),
        *sorted((FIXTURES / "real").glob("*.watch.jsonl")),
        *sorted((FIXTURES / "audit").glob("*.watch.jsonl")),
    ]


def metadata_events(path: Path) -> list[Event]:
    """Read a recording's events, each object as a metadata-only watch sends it."""
    out = []
    for line in path.read_bytes().splitlines():
        event = orjson.loads(line)
        obj = event.get("object")
        if event.get("type") not in ("ADDED", "MODIFIED", "DELETED") or not isinstance(obj, dict):
            continue
        reduced = {"kind": obj["kind"], "apiVersion": obj["apiVersion"], "metadata": obj["metadata"]}
        out.append({"type": event["type"], "object": reduced, "observedAt": event["observedAt"]})
    return out


def _identity(event: Event) -> tuple[str, str, str]:
    meta = event["object"]["metadata"]
    return event["object"]["kind"], meta.get("namespace") or "", meta["name"]


def _in_lane(events: list[Event], lane: int) -> list[bytes]:
    """Each event's object in `lane`: renamed (`lane_name`), its uids (and the references to them) its own."""
    uids = {e["object"]["metadata"]["uid"] for e in events if e["object"]["metadata"].get("uid")}
    out = []
    for event in events:
        obj = event["object"]
        meta = obj["metadata"]
        namespace, name = lane_name(meta.get("namespace"), meta["name"], lane)
        renamed = {**meta, "name": name} | ({"namespace": namespace} if namespace else {})
        text = orjson.dumps({**obj, "metadata": renamed})
        for uid in uids:
            text = text.replace(uid.encode(), f"{uid[:-8]}{lane:08x}".encode())
        out.append(text)
    return out


def write_scenarios(path: Path, *, events: int, lanes: int = 2, pause: int = PAUSE) -> dict[str, Any]:
    """Write the `scenarios` stream of at least `events` events; return its make-up.

    A copy of a recording starts `pause` seconds after the one before it in its lane ends: each copy an episode of
    its own, as the recording was (the fight window past, a copy's writes are no handovers with the previous
    copy's, its objects back where the recording left them).
    """
    recordings = [(p, metadata_events(p)) for p in scenario_recordings()]
    per_copy = sum(len(evs) for _, evs in recordings) * lanes
    copies = max(1, math.ceil(events / per_copy))
    lines: list[tuple[float, int, bytes]] = []
    objects: set[tuple[int, tuple[str, str, str]]] = set()
    for index, (_, evs) in enumerate(recordings):
        span = span_seconds(e["observedAt"] for e in evs) + pause
        times = [parse_time(e["observedAt"]) for e in evs]
        for j in range(lanes):
            lane = index * lanes + j
            texts = _in_lane(evs, lane)
            present: set[tuple[str, str, str]] = set()
            for copy in range(copies):
                shift = Shift(copy * span, copy)
                for event, at, text in zip(evs, times, texts, strict=True):
                    key = _identity(event)
                    kind = event["type"]
                    if kind == "ADDED" and key in present:
                        kind = "MODIFIED"
                    if kind == "DELETED":
                        present.discard(key)
                    else:
                        present.add(key)
                    objects.add((lane, key))
                    line = b'{"type":"%s","object":%s,"observedAt":"%s"}' % (
                        kind.encode(),
                        text,
                        event["observedAt"].encode(),
                    )
                    lines.append((at + copy * span, len(lines), shift(line)))
    path.write_bytes(merged(lines))
    make_up = {"recordings": len(recordings), "lanes": lanes, "copies": copies, "objects": len(objects)}
    return make_up | {"events_per_object": round(len(lines) / len(objects), 1)}


# --- large objects


def _text(rng: random.Random, size: int) -> str:
    words = ("replicas", "timeout", "endpoint", "enabled", "region", "retries", "cache", "level", "pool", "limit")
    out: list[str] = []
    while sum(map(len, out)) < size:
        out.append(f"{rng.choice(words)}.{rng.randrange(1000)} = {rng.randrange(10**6)}\n")
    return "".join(out)


def _fields(keys: list[str]) -> dict[str, Any]:
    return {".": {}, **{f"f:{k}": {} for k in keys}}


def _entry(manager: str, at: float, fields: dict[str, Any], api: str, subresource: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {"manager": manager, "operation": "Update", "apiVersion": api, "time": _server(at)}
    entry |= {"fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


def _server(at: float) -> str:
    return format_observed(math.floor(at))[:19] + "Z"


def _labels(rng: random.Random, index: int) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": f"app-{index}", "app.kubernetes.io/part-of": f"system-{index % 17}"}
    labels |= {f"example.com/label-{k}": f"value-{rng.randrange(10**6)}" for k in range(24)}
    return labels


def _applied(doc: dict[str, Any]) -> str:
    meta = doc["metadata"]
    shown = {"apiVersion": doc["apiVersion"], "kind": doc["kind"]}
    shown["metadata"] = {"labels": meta["labels"], "name": meta["name"], "namespace": meta["namespace"]}
    shown |= {k: v for k, v in doc.items() if k in ("data", "spec")}
    return orjson.dumps(shown, option=orjson.OPT_SORT_KEYS).decode() + "\n"


def _metadata_fields(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "f:metadata": {
            "f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}},
            "f:labels": _fields(sorted(doc["metadata"]["labels"])),
        }
    }


def _configmap(rng: random.Random, index: int, at: float) -> dict[str, Any]:
    keys = [f"section-{k:02d}.conf" for k in range(24)]
    doc: dict[str, Any] = {"kind": "ConfigMap", "apiVersion": "v1"}
    doc["metadata"] = {
        "name": f"settings-{index}",
        "namespace": f"team-{index % 40}",
        "uid": f"00000000-0000-4000-8000-{index:012x}",
        "creationTimestamp": _server(at),
        "labels": _labels(rng, index),
        "annotations": {},
    }
    doc["data"] = {k: _text(rng, 700) for k in keys}
    doc["metadata"]["annotations"][LAST_APPLIED] = _applied(doc)
    owned = _metadata_fields(doc) | {"f:data": _fields(keys)}
    doc["metadata"]["managedFields"] = [_entry("kubectl-client-side-apply", at, owned, "v1")]
    return doc


def _deployment(rng: random.Random, index: int, at: float) -> dict[str, Any]:
    names = [f"SETTING_{k:03d}" for k in range(160)]
    env = [{"name": n, "value": str(rng.randrange(10**9))} for n in names]
    container = {"name": "app", "image": "registry.example.com/app:1.0", "env": env}
    doc: dict[str, Any] = {"kind": "Deployment", "apiVersion": "apps/v1"}
    doc["metadata"] = {
        "name": f"service-{index}",
        "namespace": f"team-{index % 40}",
        "uid": f"00000000-0000-4000-9000-{index:012x}",
        "generation": 1,
        "creationTimestamp": _server(at),
        "labels": _labels(rng, index),
        "annotations": {},
    }
    selector = {"matchLabels": {"app.kubernetes.io/name": f"app-{index}"}}
    template = {"metadata": {"labels": selector["matchLabels"]}, "spec": {"containers": [container]}}
    doc["spec"] = {"replicas": 3, "selector": selector, "template": template}
    doc["metadata"]["annotations"][LAST_APPLIED] = _applied(doc)
    env_fields: dict[str, Any] = {f'k:{{"name":"{n}"}}': {".": {}, "f:name": {}, "f:value": {}} for n in names}
    app = {'k:{"name":"app"}': {".": {}, "f:env": {".": {}, **env_fields}, "f:image": {}, "f:name": {}}}
    spec = {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {"f:containers": app}}}
    doc["metadata"]["managedFields"] = [
        _entry("kubectl-client-side-apply", at, _metadata_fields(doc) | {"f:spec": spec}, "apps/v1")
    ]
    doc["status"] = {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "conditions": []}
    status: dict[str, Any] = {
        "f:status": {"f:observedGeneration": {}, "f:replicas": {}, "f:readyReplicas": {}, "f:conditions": {}}
    }
    doc["metadata"]["managedFields"].append(_entry("kube-controller-manager", at, status, "apps/v1", "status"))
    return doc


def _write(doc: dict[str, Any], rng: random.Random, at: float, *, hand_edit: bool) -> None:
    """Write the object: the controller its status, a hand edit the contested label, or the applier a value.

    The contested label (`example.com/label-0`) is the applier's until a hand edit takes it; the applier's next
    write takes it back.
    """
    entries = doc["metadata"]["managedFields"]
    labels = doc["metadata"]["labels"]
    edits = [e for e in entries if e["manager"] == "kubectl-edit"]
    if hand_edit:
        labels["example.com/label-0"] = f"edited-{rng.randrange(10**6)}"
        if not edits:
            entries[0]["fieldsV1"]["f:metadata"]["f:labels"].pop("f:example.com/label-0", None)
            taken: dict[str, Any] = {"f:metadata": {"f:labels": {"f:example.com/label-0": {}}}}
            entries.append(_entry("kubectl-edit", at, taken, doc["apiVersion"]))
        else:
            edits[0]["time"] = _server(at)
        return
    if doc["kind"] == "Deployment" and rng.random() < 0.5:
        doc["status"]["observedGeneration"] = doc["metadata"]["generation"]
        doc["status"]["conditions"] = [{"type": "Available", "status": "True", "lastUpdateTime": _server(at)}]
        entries[1]["time"] = _server(at)
        return
    if doc["kind"] == "Deployment":
        rng.choice(doc["spec"]["template"]["spec"]["containers"][0]["env"])["value"] = str(rng.randrange(10**9))
        doc["metadata"]["generation"] += 1
    else:
        doc["data"][rng.choice(sorted(doc["data"]))] = _text(rng, 700)
    if edits:
        entries.remove(edits[0])
        entries[0]["fieldsV1"]["f:metadata"]["f:labels"]["f:example.com/label-0"] = {}
        labels["example.com/label-0"] = f"value-{rng.randrange(10**6)}"
    doc["metadata"]["annotations"][LAST_APPLIED] = _applied(doc)
    entries[0]["time"] = _server(at)


def write_large_objects(path: Path, *, events: int, seed: int = 46) -> dict[str, Any]:
    """Write the `large-objects` stream: `events` events over one object per 20 events; return its make-up."""
    rng = random.Random(seed)  # noqa: S311 - seeded test data
    start = 1_795_000_000.0
    count = max(2, events // 20)
    docs = [(_configmap if i % 2 == 0 else _deployment)(rng, i, start) for i in range(count)]
    fought = set(range(0, count, 50))  # one object in 50: hand edits the applier takes back, minutes apart
    rv = 5_000_000
    at = start
    written = 0
    with path.open("wb") as out:
        for step in range(events):
            index = step if step < count else rng.randrange(count)
            doc = docs[index]
            kind = b"ADDED"
            if step >= count:
                kind = b"MODIFIED"
                _write(doc, rng, at, hand_edit=index in fought and rng.random() < 0.5)
            rv += rng.randint(1, 3)
            doc["metadata"]["resourceVersion"] = str(rv)
            line = b'{"type":"%s","object":%s,"observedAt":"%s"}\n' % (
                kind,
                orjson.dumps(doc),
                format_observed(at).encode(),
            )
            out.write(line)
            written += len(line)
            at += 7200.0 / events
    return {"objects": count, "fought_objects": len(fought), "mean_bytes": written / max(1, events)}
