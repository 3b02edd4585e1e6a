#!/usr/bin/env python3
"""Generate a seeded synthetic cluster's watch stream, and the truth of what was injected into it.

    .venv/bin/python scripts/synthetic_cluster.py --out STREAM.jsonl [--events N] [--objects N] [--seed N]
        [--templates DIR] [--metadata-only]

writes a JSON Lines capture (`{"type", "object", "observedAt"}` per line, in observedAt order) of `--events` watch
events over `--objects` objects shaped like a current Kubernetes cluster's (ConfigMaps, Deployments with a pod
template, ReplicaSets, realistic managedFields; the shapes from the real captures in `--templates`, see
scripts/synthetic_objects.py), two hours of it: benign churn (rollouts with their status bursts, status writes,
config edits, leader-election ConfigMaps renewed every 2 s, single corrections A->B->A, ownership migrations
A->B->C) and a known set of injected fights (A->B->A->B... on spec.replicas or a label) and hot loops (one writer,
>= 1 write/s for minutes). Beside it, STREAM.jsonl.truth.json (`Truth`): which objects play which role, and the
stream's sizes. The same seed writes the same bytes. With `--metadata-only`, the same events as a metadata-only
watch receives them and `--record` writes them: each object reduced to its kind, apiVersion and metadata.

Importable: `generate(path, events=, objects=, seed=)` returns the `Truth`; `load_truth(path)` reads a sidecar.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from synthetic_objects import (
    HPA,
    KCM,
    MUTATIONS,
    REPLICAS,
    REPO,
    WORDS,
    Planned,
    Templates,
    Writer,
    observed_time,
)

REAL_CAPTURES = REPO / "tests" / "fixtures" / "captures"  # (read as data: the object shapes)

SPAN = 7200.0  # seconds of cluster time the stream covers
RV0 = 48_000_000  # resourceVersion of the first write in the stream
LATENCY = 0.005  # seconds between a write and its watch event

TEAMS = (
    "payments", "checkout", "search", "identity", "billing", "catalog", "orders", "inventory", "shipping",
    "notifications", "analytics", "ml-serving", "platform", "observability", "ingress", "auth", "cart",
    "pricing", "reviews", "recommendations", "media", "gateway", "ledger", "fraud", "support",
)  # fmt: skip
ENVS = ("prod", "staging", "dev", "qa", "canary", "perf", "sandbox", "dr")

PRIMARIES: tuple[Writer, ...] = (
    ("kubectl-client-side-apply", "Update"),
    ("helm", "Update"),
    ("argocd-controller", "Update"),
    ("kubectl-create", "Update"),
)
PRIMARY_WEIGHTS = (35, 35, 25, 5)
LABEL_FIGHTERS: tuple[Writer, ...] = (("kyverno", "Update"), ("team-labeler", "Update"), ("kubectl-label", "Update"))
# (an HPA's, KEDA's through its HPA, and `kubectl scale`'s writes go through the scale subresource)
SCALERS: tuple[Writer, ...] = (HPA, ("keda-operator", "Update", "scale"), ("kubectl", "Update", "scale"))
HOT_WRITERS: tuple[Writer, ...] = (
    ("config-syncer", "Update"),
    ("external-secrets", "Update"),
    ("reloader", "Update"),
    ("my-operator", "Update"),
)
TEAM_LABEL = ("f:metadata", "f:labels", "f:team")

# --------------------------------------------------------------------------------------------- the truth


@dataclass(slots=True)
class Truth:
    """What the stream is made of: the objects of each role (the injected fights and hot loops among them),
    the flavor of each injected fight, and the stream's sizes; written beside it as STREAM.truth.json."""

    events: int = 0
    objects: int = 0
    bytes: int = 0
    roles: dict[str, list[str]] = field(default_factory=dict)  # role -> uids
    flavors: dict[str, str] = field(default_factory=dict)  # uid -> flavor, of injected fights
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [events, bytes]
    by_type: dict[str, int] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    span: float = SPAN


# ------------------------------------------------------------------------------------------ population


class Population:
    def __init__(self, rng: random.Random, objects: int) -> None:
        self.rng = rng
        namespaces = [f"{team}-{env}" for team in TEAMS for env in ENVS]
        self.objects: list[Planned] = []
        n_leader = max(1, objects // 10_000)
        n_dep = int(objects * 0.3)
        n_rs = int(objects * 0.3)
        n_static = min(len(namespaces), objects // 20)  # one kube-root-ca.crt per namespace
        kinds = ["ConfigMap"] * (n_leader + n_static) + ["Deployment"] * n_dep + ["ReplicaSet"] * n_rs
        kinds += ["ConfigMap"] * (objects - len(kinds))
        deployments: list[int] = []
        for idx, kind in enumerate(kinds):
            if n_leader <= idx < n_leader + n_static:
                self.objects.append(self._root_ca(idx, namespaces[idx - n_leader]))
                continue
            namespace = rng.choice(namespaces)
            team = namespace.rsplit("-", 1)[0]
            app = f"{team}-{rng.choice(WORDS)}-{idx:x}"
            owner = None
            if kind == "ReplicaSet":
                owner = rng.choice(deployments)
                dep = self.objects[owner]
                namespace, team, app = dep.namespace, dep.team, dep.app
                name = f"{app}-{rng.getrandbits(40):010x}"[:63]
            elif kind == "ConfigMap":
                name = f"{app}-{rng.choice(('config', 'env', 'settings', 'scripts'))}"
            else:
                name = app
            if rng.random() < 0.75:
                created, listed = -rng.uniform(60.0, 90 * 86400.0), rng.uniform(0.0, 2.5)
            else:
                created = listed = rng.uniform(30.0, SPAN * 0.85)
            primary = KCM if kind == "ReplicaSet" else rng.choices(PRIMARIES, PRIMARY_WEIGHTS)[0]
            obj = Planned(
                idx=idx,
                kind=kind,
                role="leader" if idx < n_leader else "benign",
                namespace=namespace,
                name=name,
                uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                app=app,
                team=team,
                primary=primary,
                created=created,
                listed=listed,
                seed=rng.getrandbits(32),
                owner=owner,
            )
            if obj.role == "leader":
                obj.name = f"{rng.choice(('cert-manager-controller', 'ingress-controller-leader'))}-{idx}"
                obj.primary = ("controller", "Update")
            self.objects.append(obj)
            if kind == "Deployment":
                deployments.append(idx)

    def _root_ca(self, idx: int, namespace: str) -> Planned:
        rng = self.rng
        return Planned(
            idx=idx,
            kind="ConfigMap",
            role="static",
            namespace=namespace,
            name="kube-root-ca.crt",
            uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            app="kube-root-ca",
            team="kube-system",
            primary=KCM,
            created=-rng.uniform(86400.0, 90 * 86400.0),
            listed=rng.uniform(0.0, 2.5),
            seed=0,
        )

    def pick(self, count: int, kinds: tuple[str, ...], role: str) -> list[Planned]:
        pool = [o for o in self.objects if o.role == "benign" and o.kind in kinds]
        chosen = self.rng.sample(pool, min(count, len(pool)))
        for obj in chosen:
            obj.role = role
        return chosen


def plan(rng: random.Random, events: int, objects: int) -> Population:
    """Decide every object's writes: injected fights and hot loops first, benign churn fills the budget."""
    pop = Population(rng, objects)
    inject(rng, pop, objects)
    churn = [o for o in pop.objects if o.role not in ("leader", "static")]
    deleted = rng.sample([o for o in churn if o.role == "benign"], round(len(churn) * 0.01))
    fixed = len(pop.objects) + len(deleted) + sum(len(o.actions) for o in pop.objects)
    for obj, count in zip(churn, spread(rng, max(0, events - fixed), len(churn)), strict=True):
        obj.actions += benign(rng, obj, count)
    for obj in deleted:
        last = max((t for t, _, _ in obj.actions), default=obj.listed)
        obj.actions.append((last + rng.uniform(5.0, 300.0), "delete", ()))
    for obj in pop.objects:
        obj.actions.sort(key=lambda a: a[0])
        previous = obj.listed
        for i, (t, op, args) in enumerate(obj.actions):  # writes of one object are >= 50 ms apart
            if t < previous + 0.05:
                obj.actions[i] = (previous + 0.05, op, args)
            previous = obj.actions[i][0]
    return pop


def inject(rng: random.Random, pop: Population, objects: int) -> None:
    for obj in pop.pick(round(objects * 0.015), ("Deployment",), "fight"):
        obj.actions += fight(rng, obj, "replicas")
    for obj in pop.pick(round(objects * 0.015), ("ConfigMap", "Deployment"), "fight"):
        obj.actions += fight(rng, obj, "label")
    for obj in pop.pick(max(3, round(objects * 0.0025)), ("ConfigMap", "Deployment"), "hot"):
        obj.actions += hot_loop(rng, obj)
    for obj in pop.pick(round(objects * 0.005), ("Deployment",), "correction"):
        obj.actions += correction(rng, obj)
    for obj in pop.pick(round(objects * 0.005), ("ConfigMap",), "migration"):
        obj.actions += migration(rng, obj)
    for obj in pop.objects:
        if obj.role == "leader":  # leader election in a ConfigMap annotation, renewed every 2 s
            t = obj.listed + rng.uniform(0.1, 2.0)
            while t < SPAN:
                obj.actions.append((t, "leader", ()))
                t += rng.uniform(1.98, 2.02)


def spread(rng: random.Random, budget: int, count: int, cap: int = 120) -> list[int]:
    """Split `budget` writes over `count` objects, heavy-tailed, at most `cap` each (2 h: no hot loops)."""
    weights = [rng.lognormvariate(0.0, 0.8) for _ in range(count)]
    scale = budget / sum(weights)
    counts = [min(cap, math.floor(w * scale)) for w in weights]
    short = budget - sum(counts)
    while short > 0:
        i = rng.randrange(count)
        if counts[i] < cap:
            counts[i] += 1
            short -= 1
    return counts


def fight(rng: random.Random, obj: Planned, what: str) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Two managers alternately taking spec.replicas or the `team` label: A->B->A->B..."""
    writes = rng.randint(4, 12)
    period = rng.choice((rng.uniform(2.0, 15.0), rng.uniform(15.0, 120.0)))
    start = rng.uniform(obj.listed + 30.0, max(obj.listed + 31.0, SPAN - writes * period * 1.1 - 10.0))
    if what == "replicas":
        keys, taker, values = REPLICAS, rng.choice(SCALERS), (3, rng.randint(5, 12))
    else:
        keys, taker, values = TEAM_LABEL, rng.choice(LABEL_FIGHTERS), (obj.team, rng.choice(TEAMS))
        if values[1] == obj.team:
            values = (obj.team, "unassigned")
    alone = "owns only this field"
    obj.flavor = f"{'spec.replicas' if what == 'replicas' else 'label'} taken by {taker[0]} ({alone})"
    out = []
    t = start
    for k in range(writes):
        by, loser, value = (taker, obj.primary, values[1]) if k % 2 == 0 else (obj.primary, taker, values[0])
        out.append((t, "take", (by, loser, keys, value)))
        t += period * rng.uniform(0.9, 1.1)
    return out


def hot_loop(rng: random.Random, obj: Planned) -> list[tuple[float, str, tuple[Any, ...]]]:
    """One writer stamping an annotation with the time, >= 1 write/s for 1-2 minutes."""
    writer = rng.choice(HOT_WRITERS)
    period, duration = rng.uniform(0.5, 1.0), rng.uniform(60.0, 120.0)
    start = rng.uniform(obj.listed + 10.0, max(obj.listed + 11.0, SPAN - duration - 10.0))
    out = []
    t = start
    while t < start + duration:
        out.append((t, "annotate", (writer, "reconciler.example.com/last-sync")))
        t += period * rng.uniform(0.8, 1.2)
    return out


def correction(rng: random.Random, obj: Planned) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Not a fight: someone edits spec.replicas once and the owner sets it back (A->B->A)."""
    t = rng.uniform(obj.listed + 30.0, max(obj.listed + 31.0, SPAN - 700.0))
    edit = ("kubectl-edit", "Update")
    return [
        (t, "take", (edit, obj.primary, REPLICAS, 4)),
        (t + rng.uniform(30.0, 600.0), "take", (obj.primary, edit, REPLICAS, 3)),
    ]


def migration(rng: random.Random, obj: Planned) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Not a fight: ownership of a label moves on, A->B->C, with a new value each time."""
    t = rng.uniform(obj.listed + 30.0, max(obj.listed + 31.0, SPAN - 1300.0))
    b, c = ("helm", "Update"), ("argocd-controller", "Update")
    if obj.primary[0] == "helm":
        b = ("kubectl-client-side-apply", "Update")
    if obj.primary[0] == "argocd-controller":
        c = ("kubectl-client-side-apply", "Update")
    return [
        (t, "take", (b, obj.primary, TEAM_LABEL, f"{obj.team}-v2")),
        (t + rng.uniform(60.0, 1200.0), "take", (c, b, TEAM_LABEL, f"{obj.team}-v3")),
    ]


def benign(rng: random.Random, obj: Planned, count: int) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Everyday churn: rollouts with a status burst, status writes, config edits; values never go back."""
    groups: list[list[tuple[str, tuple[Any, ...]]]] = []
    left = count
    while left > 0:
        if obj.kind == "Deployment" and left >= 3 and rng.random() < 0.3:
            first = "rollout" if rng.random() < 0.8 else "restart"
            size = min(left, rng.randint(3, 5))
            group = [(first, ()), ("dep_status", ("start",))]
            group += [("dep_status", ("progress",))] * (size - 3) + [("dep_status", ("done",))]
        elif obj.kind == "Deployment":
            size, group = 1, [("dep_status", ("blip",))]
        elif obj.kind == "ReplicaSet":
            size, group = 1, [("rs_status", ())]
        elif rng.random() < 0.1:
            size, group = 1, [("cm_annotate", ())]
        else:
            size, group = 1, [("cm_data", ())]
        groups.append(group[:size])
        left -= size
    if obj.kind == "ReplicaSet" and groups and rng.random() < 0.3:
        groups[-1] = [("rs_scale_down", ())]
    starts = sorted(rng.uniform(obj.listed + 1.0, SPAN) for _ in groups)
    out = []
    t = obj.listed
    for start, group in zip(starts, groups, strict=True):
        t = max(start, t + 1.0)
        for op, args in group:
            out.append((t, op, args))
            t += rng.uniform(1.0, 8.0)
    return out


# ---------------------------------------------------------------------------------------------- writing


def generate(
    path: Path,
    *,
    events: int,
    objects: int,
    seed: int,
    templates_dir: Path = REAL_CAPTURES,
    metadata_only: bool = False,
) -> Truth:
    """Write the stream (JSON Lines, ordered by observedAt) and return what was injected and its sizes; with
    `metadata_only`, each object as a metadata-only watch sends it (PartialObjectMetadata: kind, apiVersion and
    metadata) and a recording writes it (with the kind and apiVersion of the resource watched)."""
    rng = random.Random(seed)  # noqa: S311 - deterministic test data, not security
    pop = plan(rng, events, objects)
    templates = Templates(templates_dir)
    schedule = [(obj.listed, obj.idx, -1) for obj in pop.objects]
    schedule += [(t, obj.idx, k) for obj in pop.objects for k, (t, _, _) in enumerate(obj.actions)]
    schedule.sort()
    truth = Truth(objects=len(pop.objects), templates=dict(templates.sources), seed=seed)
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
            if metadata_only:
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


def truth_path(stream: Path) -> Path:
    return stream.with_name(stream.name + ".truth.json")


def write_truth(stream: Path, truth: Truth) -> None:
    truth_path(stream).write_bytes(orjson.dumps(truth, option=orjson.OPT_INDENT_2))


def load_truth(stream: Path) -> Truth | None:
    """The stream's truth sidecar, or None (a recording has none)."""
    sidecar = truth_path(stream)
    return Truth(**orjson.loads(sidecar.read_bytes())) if sidecar.exists() else None


def obtain_as_asked(args: argparse.Namespace, workdir: Path) -> tuple[Path, Truth | None, float | None]:
    """`obtain` with the options of `add_arguments` (and the caller's `--stream`)."""
    return obtain(
        args.stream,
        workdir,
        events=args.events,
        objects=args.objects,
        seed=args.seed,
        templates=args.templates,
        metadata_only=args.metadata_only,
    )


def obtain(
    stream: Path | None,
    workdir: Path,
    *,
    events: int,
    objects: int,
    seed: int,
    templates: Path = REAL_CAPTURES,
    metadata_only: bool = False,
) -> tuple[Path, Truth | None, float | None]:
    """The stream to measure: `stream` with its truth if it exists; else one generated there (and kept, with its
    sidecar) or, without `stream`, in `workdir`. Returns its path, its truth and the seconds generating took."""
    if stream is not None and stream.exists():
        return stream, load_truth(stream), None
    path = stream or workdir / "stream.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    truth = generate(
        path, events=events, objects=objects, seed=seed, templates_dir=templates, metadata_only=metadata_only
    )
    seconds = time.perf_counter() - start
    if stream is not None:
        write_truth(path, truth)
    return path, truth, seconds


def stream_summary(path: Path, truth: Truth | None, events: int) -> dict[str, Any]:
    """The stream as results describe it: its size and, from its truth, its make-up."""
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


# ------------------------------------------------------------------------------------------------- main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The generator's options (for the scripts that generate the stream they measure)."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the stream to write (and OUT.truth.json beside it)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    truth = generate(
        args.out,
        events=args.events,
        objects=args.objects,
        seed=args.seed,
        templates_dir=args.templates,
        metadata_only=args.metadata_only,
    )
    write_truth(args.out, truth)
    roles = ", ".join(f"{role} {len(uids):,}" for role, uids in sorted(truth.roles.items()))
    print(
        f"{args.out}: {truth.events:,} events, {truth.objects:,} objects, {truth.bytes / 1e6:,.0f} MB in "
        f"{time.perf_counter() - start:.1f} s; roles: {roles}; truth in {truth_path(args.out)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
