"""Plan the synthetic cluster's objects: who each is, when it appears, and the role it plays in the stream.

Who: kind, namespace, name, app, team, primary manager; when: created (before the stream, for most) and first
listed.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from harness.synthetic.fields import KCM, Writer

SPAN = 7200.0  # seconds of cluster time the stream covers

WORDS = (
    "api", "worker", "web", "cron", "gateway", "sync", "indexer", "scheduler", "proxy", "exporter",
    "consumer", "publisher", "frontend", "backend", "cache", "router", "notifier", "resolver", "ingester",
    "compactor",
)  # fmt: skip
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


@dataclass(slots=True)
class Planned:
    """One object of the stream: who it is, what role it plays, and its writes in time order."""

    idx: int
    kind: str
    role: str  # benign | fight | hot | correction | migration | leader
    namespace: str
    name: str
    uid: str
    app: str
    team: str
    primary: Writer
    created: float  # seconds after EPOCH (negative: it existed before the capture started)
    listed: float  # when its ADDED event is observed
    seed: int
    owner: int | None = None  # ReplicaSet -> its Deployment
    flavor: str = ""  # of an injected fight: the field and the manager that takes it from the owner
    actions: list[tuple[float, str, tuple[Any, ...]]] = field(default_factory=list)


class Population:
    """The objects of the stream, as planned: kinds in a current cluster's proportions, over teams' namespaces."""

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
