#!/usr/bin/env python3
"""How to split the watch between shards: each candidate partition measured on recorded watch streams.

For every stream given (JSON Lines of watch events, as `fightwatch run --record` writes and as scripts/bench_replay.py
generates) and every number of shards, each partition is replayed through one detection engine per shard, and
compared with one engine that saw everything:

  resource-hash      what fightwatch ships: a resource (plural.group) goes to a stable hash of its name modulo
                     the shards; the server sends each shard only its resources' events
  resource-balanced  the same unit, resources placed by their measured event counts (largest first, onto the
                     least loaded shard): what `sharding.assign` can reach when an operator pins the heavy ones
  namespace-hash     a namespace goes to a hash of its name: the server can filter it only through one watch per
                     namespace and resource (cluster-scoped objects: shard 0)
  uid-hash           an object goes to a hash of its uid: the API server cannot filter by it, so every shard
                     receives every event and drops the others' (counted as received)
  label-hash         an object goes to a hash of its `team` label (a label selector the server can apply): shown
                     because labels change, and an object whose label changes moves between shards

Reported per partition: events received per shard (the largest and max/mean, the balance), watches per shard
(streams the API server keeps open: resources, times namespaces when split by namespace), and detection coverage:
the findings (object, type) of the unsharded engine that some shard also found, and findings no unsharded engine
made (a fight seen in pieces can be missed, or made up).

  .venv/bin/python scripts/shard_partition.py /tmp/bench/stream.jsonl /tmp/loadrun/ha/fw-1.jsonl --shards 2 3 4
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from watcher.config import Config, ShardingSettings
from watcher.detection import events
from watcher.detection.engine import Engine
from watcher.detection.events import Event
from watcher.offline import tune_gc
from watcher.sources.capture import ReadStats, read_capture
from watcher.sources.discovery import ApiResource, shard_of

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = ("resource-hash", "resource-balanced", "namespace-hash", "uid-hash", "label-hash")
LABEL = "team"


def resource_of(obj: dict[str, Any]) -> ApiResource:
    """The resource of an object, from its apiVersion and kind (plural: the kind in lower case, plus s)."""
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    kind = str(obj.get("kind") or "")
    plural = kind.lower() + ("es" if kind.lower().endswith("s") else "s")
    return ApiResource(group, version, plural, kind, namespaced=bool((obj.get("metadata") or {}).get("namespace")))


def _hash(text: str, shards: int) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") % shards


def events_of(path: Path) -> Iterator[Event]:
    """The events of a capture as the Python reference decodes them (with their objects: partitions read them);
    every engine here is the reference's."""
    for event in read_capture(str(path), events.decode, stats=ReadStats()):
        assert isinstance(event, Event)
        yield event


def census(path: Path) -> dict[str, Any]:
    """Events per resource, namespaces, resources: what the balanced placement and the watch counts need."""
    per_resource: Counter[str] = Counter()
    namespaces: set[str] = set()
    resources: dict[str, ApiResource] = {}
    total = 0
    for event in events_of(path):
        resource = resource_of(event.object)
        per_resource[resource.name] += 1
        resources[resource.name] = resource
        namespace = event.object["metadata"].get("namespace")
        if namespace:
            namespaces.add(namespace)
        total += 1
    return {"events": total, "per_resource": per_resource, "namespaces": namespaces, "resources": resources}


def balanced(per_resource: Counter[str], shards: int) -> dict[str, int]:
    loads = [0] * shards
    placed = {}
    for name, count in per_resource.most_common():
        shard = loads.index(min(loads))
        placed[name] = shard
        loads[shard] += count
    return placed


def chooser(partition: str, shards: int, facts: dict[str, Any]) -> Callable[[Event], int]:
    sharding = ShardingSettings(total_shards=shards)
    placed = balanced(facts["per_resource"], shards)

    def choose(event: Event) -> int:
        obj = event.object
        meta = obj["metadata"]
        if partition == "resource-hash":
            return shard_of(resource_of(obj), sharding)
        if partition == "resource-balanced":
            return placed[resource_of(obj).name]
        if partition == "namespace-hash":
            namespace = meta.get("namespace")
            return _hash(namespace, shards) if namespace else 0
        if partition == "uid-hash":
            return _hash(meta["uid"], shards)
        return _hash(str((meta.get("labels") or {}).get(LABEL, "")), shards)

    return choose


def findings_of(engines: list[Engine]) -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for engine in engines:
        for finding in engine.active() + engine.resolved():
            found[(finding.object.uid, finding.type.value)] += 1
    return found


def measure(path: Path, shards_list: list[int]) -> dict[str, Any]:
    settings = Config().detection
    facts = census(path)
    whole = Engine(settings, attribution="python")
    for event in events_of(path):
        whole.process(event)
    reference = set(findings_of([whole]))
    result: dict[str, Any] = {
        "stream": str(path),
        "events": facts["events"],
        "resources": {name: facts["per_resource"][name] for name, _ in facts["per_resource"].most_common()},
        "namespaces": len(facts["namespaces"]),
        "findings_unsharded": len(reference),
        "partitions": {},
    }
    namespaced = sum(1 for r in facts["resources"].values() if r.namespaced)
    cluster_scoped = len(facts["resources"]) - namespaced
    for shards in shards_list:
        for partition in PARTITIONS:
            choose = chooser(partition, shards, facts)
            engines = [Engine(settings, attribution="python") for _ in range(shards)]
            processed = [0] * shards
            for event in events_of(path):
                shard = choose(event)
                processed[shard] += 1
                engines[shard].process(event)
            received = [facts["events"]] * shards if partition == "uid-hash" else processed
            if partition.startswith("resource"):
                watches = [0] * shards
                for resource in facts["resources"].values():
                    watches[choose_resource(partition, resource, shards, facts)] += 1
            elif partition == "namespace-hash":
                per_shard = Counter(_hash(n, shards) for n in facts["namespaces"])
                watches = [per_shard[i] * namespaced + (cluster_scoped if i == 0 else 0) for i in range(shards)]
            else:
                watches = [len(facts["resources"])] * shards
            found = findings_of(engines)
            result["partitions"][f"{partition}/{shards}"] = {
                "shards": shards,
                "received_per_shard": received,
                "received_max_over_mean": round(max(received) / statistics.fmean(received), 3),
                "received_max_share": round(max(received) / facts["events"], 3),
                "processed_per_shard": processed,
                "watches_per_shard": watches,
                "coverage": f"{len(reference & set(found))}/{len(reference)}",
                "missed": len(reference - set(found)),
                "made_up": len(set(found) - reference),
                "found_by_two_shards": sum(1 for n in found.values() if n > 1),
            }
            print(f"{path.name} {partition}/{shards}: {result['partitions'][f'{partition}/{shards}']}", flush=True)
    return result


def choose_resource(partition: str, resource: ApiResource, shards: int, facts: dict[str, Any]) -> int:
    if partition == "resource-hash":
        return shard_of(resource, ShardingSettings(total_shards=shards))
    return balanced(facts["per_resource"], shards)[resource.name]


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| stream | partition | shards | events received, largest shard (max/mean) | watches per shard | coverage |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        for key, p in result["partitions"].items():
            partition = key.split("/")[0]
            made_up = f", {p['made_up']} made up" if p["made_up"] else ""
            watches = "/".join(str(w) for w in p["watches_per_shard"])
            lines.append(
                f"| {Path(result['stream']).name} | {partition} | {p['shards']} | "
                f"{max(p['received_per_shard']):,} ({p['received_max_over_mean']:.2f}) | {watches} | "
                f"{p['coverage']}{made_up} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("streams", nargs="+", type=Path)
    parser.add_argument("--shards", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "sharding.json")
    args = parser.parse_args()
    tune_gc()
    results = [measure(path, args.shards) for path in args.streams]
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps({"results": results}, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
