"""Generate the load test's cluster and load: objects of five kinds, then churn with injected fights and hot loops.

The cluster holds objects of five kinds (ConfigMaps, Secrets, Deployments, headless Services and ServiceAccounts)
in 20 namespaces. The writer sustains a fixed rate of writes: benign churn (merge patches by per-field managers:
each writer owns its own field, so nothing changes hands), injected fights (two operators taking a label from each
other, one write every 4 s) and hot loops (one reconciler stamping a time annotation once a second), starting at
staggered times over the first two thirds of the load.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harness.bench.cluster_load import Load, Write, create_all, write_at_rate
from harness.kube import Kube, Resource

NAMESPACES = 20
FIGHT_PERIOD = 4.0  # seconds between two writes of a fight (the two operators alternate)
HOT_PERIOD = 1.0  # seconds between two writes of a hot loop (60/min, twice the threshold)


@dataclass(frozen=True)
class Workload:
    """The objects of the cluster, and the writes to them."""

    objects: int
    rate: float  # writes per second
    duration: float  # seconds of load
    fights: int
    hot_loops: int
    seed: int


@dataclass(frozen=True)
class Kind:
    """A kind of object of the cluster: its share of the objects, its content and its benign churn."""

    resource: Resource
    share: float  # of the objects
    body: Callable[[int], dict[str, Any]]  # the object's content beyond metadata
    churn: Callable[[int, random.Random], tuple[dict[str, Any], str]]  # a benign patch and its manager

    @property
    def name(self) -> str:
        group = self.resource.api_version.rpartition("/")[0]
        return f"{self.resource.plural}.{group}" if group else self.resource.plural


def _configmap_churn(k: int, rng: random.Random) -> tuple[dict[str, Any], str]:
    key = rng.choice("ab")
    return {"data": {key: str(k)}}, f"writer-{key}"


def _annotate(key: str, manager: str) -> Callable[[int, random.Random], tuple[dict[str, Any], str]]:
    def churn(k: int, _rng: random.Random) -> tuple[dict[str, Any], str]:
        return {"metadata": {"annotations": {key: str(k)}}}, manager

    return churn


def _deployment(i: int) -> dict[str, Any]:
    labels = {"app": f"app-{i}"}
    container = {"name": "app", "image": "registry.example.com/app:1.0.0", "env": [{"name": "A", "value": "1"}]}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    return {"spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}}


def _same(body: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    return lambda _i: body


KINDS = (
    Kind(
        Resource("/api/v1", "configmaps", "ConfigMap"),
        0.40,
        _same({"data": {"config": "x" * 200, "a": "0", "b": "0"}}),
        _configmap_churn,
    ),
    Kind(
        Resource("/api/v1", "secrets", "Secret"),
        0.25,
        _same({"data": {"token": "c2VjcmV0"}}),
        _annotate("example.com/rotated", "rotator"),
    ),
    Kind(
        Resource("/apis/apps/v1", "deployments", "Deployment"),
        0.15,
        _deployment,
        _annotate("example.com/revision", "deployer"),
    ),
    Kind(
        Resource("/api/v1", "services", "Service"),
        0.10,
        _same({"spec": {"clusterIP": "None", "ports": [{"port": 80}]}}),  # headless: no cluster IP to allocate
        _annotate("example.com/checked", "prober"),
    ),
    Kind(
        Resource("/api/v1", "serviceaccounts", "ServiceAccount"),
        0.10,
        _same({"automountServiceAccountToken": False}),
        _annotate("example.com/audited", "auditor"),
    ),
)


@dataclass
class Cluster:
    """The objects, and those of them the load makes fight or loop."""

    objects: list[tuple[Kind, str, str]]  # (kind, namespace, name)
    fights: list[tuple[Kind, str, str, float]]  # ... and when the fight starts (seconds into the load)
    hot: list[tuple[Kind, str, str, float]]


def plan(workload: Workload) -> Cluster:
    """Plan the cluster: its objects, and the fights and hot loops injected into some, with their start times."""
    rng = random.Random(workload.seed)  # noqa: S311 - a reproducible load, not cryptography
    objects = [
        (kind, f"load-{i % NAMESPACES}", f"{kind.resource.plural[:-1]}-{i}")
        for kind in KINDS
        for i in range(round(workload.objects * kind.share))
    ]
    candidates = rng.sample(objects, workload.fights + workload.hot_loops)
    # Starts spread over the first two thirds of the load, so that some fall into the failover.
    span = workload.duration * 2 / 3
    fights = [(*o, span * n / max(1, workload.fights)) for n, o in enumerate(candidates[: workload.fights])]
    hot = [(*o, span * (n + 0.5) / max(1, workload.hot_loops)) for n, o in enumerate(candidates[workload.fights :])]
    return Cluster(objects, fights, hot)


def expected_findings(cluster: Cluster) -> set[tuple[str, str, str, str]]:
    """Return the findings the injected fights and hot loops make: (type, kind, namespace, name)."""
    return {("fight", k.resource.kind, ns, name) for k, ns, name, _ in cluster.fights} | {
        ("hot_loop", k.resource.kind, ns, name) for k, ns, name, _ in cluster.hot
    }


async def populate(kube: Kube, cluster: Cluster) -> None:
    """Create the namespaces and the objects."""

    def body(kind: Kind, namespace: str, name: str, i: int) -> dict[str, Any]:
        r = kind.resource
        return {
            "apiVersion": r.api_version,
            "kind": r.kind,
            "metadata": {"name": name, "namespace": namespace},
        } | kind.body(i)

    namespaces = [f"load-{n}" for n in range(NAMESPACES)]
    bodies = [(k.resource.path(ns), body(k, ns, name, i)) for i, (k, ns, name) in enumerate(cluster.objects)]
    await create_all(kube, namespaces, bodies, manager="load-setup")


async def generate(kube: Kube, cluster: Cluster, workload: Workload, on_tick: Callable[[float], None]) -> Load:
    """Write on a fixed schedule: the injected fights and hot loops when due, benign churn for the rest.

    `on_tick(seconds into the load)` is called before each write.
    """
    rng = random.Random(workload.seed + 1)  # noqa: S311
    due: list[tuple[float, str, Kind, str, str, int]] = []  # (time, what, kind, namespace, name, turn)
    for kind, ns, name, begin in cluster.fights:
        due += [
            (begin + n * FIGHT_PERIOD, "fight", kind, ns, name, n)
            for n in range(int((workload.duration - begin) / FIGHT_PERIOD))
        ]
    for kind, ns, name, begin in cluster.hot:
        due += [
            (begin + n * HOT_PERIOD, "hot", kind, ns, name, n)
            for n in range(int((workload.duration - begin) / HOT_PERIOD))
        ]
    due.sort(key=lambda d: d[0])
    injected = iter(due)
    upcoming = next(injected, None)

    def write_of(k: int) -> Write:
        nonlocal upcoming
        if upcoming is not None and upcoming[0] <= k / workload.rate:
            _, what, kind, ns, name, turn = upcoming
            upcoming = next(injected, None)
            if what == "fight":
                side = "ab"[turn % 2]
                return Write(
                    kind.resource.path(ns, name),
                    {"metadata": {"labels": {"owner": f"team-{side}"}}},
                    f"fight-{side}-operator",
                    True,
                )
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            patch = {"metadata": {"annotations": {"example.com/reconciled-at": stamp}}}
            return Write(kind.resource.path(ns, name), patch, "stamping-reconciler", True)
        kind, ns, name = cluster.objects[rng.randrange(len(cluster.objects))]
        patch, manager = kind.churn(k, rng)
        return Write(kind.resource.path(ns, name), patch, manager)

    return await write_at_rate(kube, rate=workload.rate, duration=workload.duration, write_of=write_of, on_tick=on_tick)
