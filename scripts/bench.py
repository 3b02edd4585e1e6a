#!/usr/bin/env python3
"""Benchmark the replay pipeline on a large, realistic, seeded watch stream.

One run
1. generates (or reuses, `--stream PATH`) a JSON Lines capture of >= 200,000 watch events over >= 20,000
   objects shaped like a Kubernetes v1.20 cluster (ConfigMaps, Deployments with a pod template, ReplicaSets,
   realistic managedFields), with benign churn and a known set of injected fights and hot loops. Object
   shapes come from the recorded real captures in tests/fixtures/captures/*.jsonl when they exist, else from
   hand-built v1.20 templates;
2. measures, pinned to one core, best of `--runs`: the full replay pipeline (read_capture + Engine.process),
   JSON decoding alone (the floor) and kubernetes-asyncio model deserialization (what a naive watcher pays);
3. measures engine memory per tracked object with tracemalloc;
4. checks that the engine finds the injected fights and hot loops (recall) and nothing else (false positives);
and prints a Markdown table; the same results go to `--json`. `--profile` adds a cProfile of the replay.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import math
import multiprocessing
import os
import platform
import pstats
import random
import sys
import sysconfig
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata as pkg_metadata
from pathlib import Path
from typing import Any

import orjson

from watcher.cli import tune_gc
from watcher.config import Config, DetectionSettings
from watcher.detection.engine import Engine, native_available
from watcher.model import Finding, FindingType
from watcher.sources.capture import READ_BUFFER, ReadStats, read_capture, read_parsed

REPO = Path(__file__).resolve().parent.parent
REAL_CAPTURES = REPO / "tests" / "fixtures" / "captures"

EPOCH = 1614848400  # 2021-03-04T09:00:00Z, the Kubernetes v1.20 era; stream times are seconds after this
SPAN = 7200.0  # seconds of cluster time the stream covers
RV0 = 48_000_000  # resourceVersion of the first write in the stream
LATENCY = 0.005  # seconds between a write and its watch event
KINDS = ("ConfigMap", "Deployment", "ReplicaSet")
MODELS = {"ConfigMap": "V1ConfigMap", "Deployment": "V1Deployment", "ReplicaSet": "V1ReplicaSet"}

TEAMS = (
    "payments", "checkout", "search", "identity", "billing", "catalog", "orders", "inventory", "shipping",
    "notifications", "analytics", "ml-serving", "platform", "observability", "ingress", "auth", "cart",
    "pricing", "reviews", "recommendations", "media", "gateway", "ledger", "fraud", "support",
)  # fmt: skip
ENVS = ("prod", "staging", "dev", "qa", "canary", "perf", "sandbox", "dr")
WORDS = (
    "api", "worker", "web", "cron", "gateway", "sync", "indexer", "scheduler", "proxy", "exporter",
    "consumer", "publisher", "frontend", "backend", "cache", "router", "notifier", "resolver", "ingester",
    "compactor",
)  # fmt: skip
CONFIG_KEYS = ("application.yaml", "LOG_LEVEL", "FEATURE_FLAGS", "nginx.conf", "settings.json", "JAVA_OPTS")

Writer = tuple[str, str]  # (manager, operation)
KCM: Writer = ("kube-controller-manager", "Update")
PRIMARIES: tuple[Writer, ...] = (
    ("kubectl-client-side-apply", "Update"),
    ("helm", "Update"),
    ("argocd-controller", "Update"),
    ("kubectl-create", "Update"),
)
PRIMARY_WEIGHTS = (35, 35, 25, 5)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
APPLIERS = {"kubectl-client-side-apply", "argocd-controller"}  # keep a last-applied annotation
LABEL_FIGHTERS: tuple[Writer, ...] = (("kyverno", "Update"), ("team-labeler", "Update"), ("kubectl-label", "Update"))
SCALERS: tuple[Writer, ...] = (KCM, ("keda-operator", "Update"), ("kubectl-scale", "Update"))
HOT_WRITERS: tuple[Writer, ...] = (
    ("config-syncer", "Update"),
    ("external-secrets", "Update"),
    ("reloader", "Update"),
    ("my-operator", "Update"),
)
LEADER_KEY = "control-plane.alpha.kubernetes.io/leader"
TEAM_LABEL = ("f:metadata", "f:labels", "f:team")
REPLICAS = ("f:spec", "f:replicas")
FAKE_CA = (
    "-----BEGIN CERTIFICATE-----\n"
    + "\n".join(
        ("MIIC5zCCAc+gAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMwEQYDVQQDEwprdWJl" * 17)[i : i + 64]
        for i in range(0, 1088, 64)
    )
    + "\n-----END CERTIFICATE-----\n"
)

# ----------------------------------------------------------------------------------------------- helpers


def server_time(t: float) -> str:
    """managedFields time: RFC 3339, one-second resolution (what the API server writes)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH + math.floor(t)))


def observed_time(t: float) -> str:
    whole = math.floor(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(EPOCH + whole)) + f".{int((t - whole) * 1e6):06d}Z"


def nano_time(t: float) -> str:
    whole = math.floor(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(EPOCH + whole)) + f".{int((t - whole) * 1e9):09d}Z"


def copy_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


# ------------------------------------------------------------------------------------ fieldsV1 and tries

MAP_FIELDS = {"labels", "annotations", "data", "matchLabels", "limits", "requests", "nodeSelector"}
POINTER_FIELDS = {"rollingUpdate", "readinessProbe", "livenessProbe", "httpGet", "configMap"}
ATOMIC_FIELDS = {"selector", "args", "command"}
LIST_KEYS: dict[str, tuple[tuple[str, ...], bool]] = {  # list -> (merge keys, has a "." node)
    "containers": (("name",), False),
    "ports": (("containerPort", "protocol"), True),
    "env": (("name",), True),
    "volumeMounts": (("mountPath",), True),
    "volumes": (("name",), True),
    "conditions": (("type",), True),
    "ownerReferences": (("uid",), True),
}


def trie(value: Any, name: str = "") -> dict[str, Any]:
    """The fieldsV1 trie the API server records for a manager that set `value` (an Update that created it)."""
    if name in ATOMIC_FIELDS or not isinstance(value, dict | list) or not value:
        return {}
    if isinstance(value, list):
        spec = LIST_KEYS.get(name)
        if spec is None:
            return {}
        keys, dot = spec
        node: dict[str, Any] = {".": {}} if dot else {}
        for item in value:
            key = orjson.dumps({k: item[k] for k in keys}, option=orjson.OPT_SORT_KEYS).decode()
            node[f"k:{key}"] = {".": {}, **_fields(item)}
        return node
    if name in MAP_FIELDS:
        return {".": {}, **{f"f:{k}": {} for k in value}}
    return ({".": {}} if name in POINTER_FIELDS else {}) | _fields(value)


def _fields(value: dict[str, Any]) -> dict[str, Any]:
    return {f"f:{k}": trie(v, k) for k, v in value.items() if v is not None}


def sort_trie(node: dict[str, Any]) -> dict[str, Any]:
    return {k: sort_trie(node[k]) for k in sorted(node)}


def own(node: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
            ordered = sorted(node.items())
            node.clear()
            node.update(ordered)
        node = child


def disown(node: dict[str, Any], keys: tuple[str, ...]) -> None:
    stack = []
    for key in keys:
        if key not in node:
            return
        stack.append((node, key))
        node = node[key]
    for parent, key in reversed(stack):
        if parent[key]:
            break
        del parent[key]


def rename_keys(node: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    return {(k.replace(old, new) if k.startswith("k:") else k): rename_keys(v, old, new) for k, v in node.items()}


def entry_of(obj: dict[str, Any], writer: Writer, when: float) -> dict[str, Any]:
    """The writer's managedFields entry, created if missing, stamped with the write time."""
    entries = obj["metadata"].setdefault("managedFields", [])
    for entry in entries:
        if entry["manager"] == writer[0] and entry["operation"] == writer[1]:
            entry["time"] = server_time(when)
            return entry
    entry = {
        "manager": writer[0],
        "operation": writer[1],
        "apiVersion": obj["apiVersion"],
        "time": server_time(when),
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    }
    entries.append(entry)
    return entry


def claim(doc: dict[str, Any], entry: dict[str, Any], keys: tuple[str, ...]) -> None:
    """An Update that sets a field makes its manager the owner: other managers lose it, and a manager left
    owning nothing loses its entry (structured-merge-diff drops empty managers)."""
    own(entry["fieldsV1"], keys)
    entries = doc["metadata"]["managedFields"]
    for other in list(entries):
        if other is not entry:
            disown(other["fieldsV1"], keys)
            if not other["fieldsV1"]:
                entries.remove(other)


def managed(writer: Writer, api_version: str, when: float, owned: dict[str, Any]) -> dict[str, Any]:
    return {
        "manager": writer[0],
        "operation": writer[1],
        "apiVersion": api_version,
        "time": server_time(when),
        "fieldsType": "FieldsV1",
        "fieldsV1": sort_trie(owned),
    }


# ------------------------------------------------------------------------------------------ population


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


@dataclass(slots=True)
class Truth:
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
    alone = "owns only this field" if taker != KCM else "owns other fields too"
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


# ------------------------------------------------------------------------------------- object templates


def pod_template(app: str, seed: int) -> tuple[dict[str, Any], str]:
    """A pod template as the API server stores it (defaults filled in), and the main container's image."""
    rng = random.Random(seed)  # noqa: S311 - deterministic test data
    team = app.split("-", maxsplit=1)[0]
    image = f"registry.example.com/{team}/{app}:1.{rng.randint(0, 30)}.0"
    main: dict[str, Any] = {
        "name": app.split("-")[-2] if "-" in app else "app",
        "image": image,
        "ports": [{"name": "http", "containerPort": rng.choice((8080, 8000, 3000, 9090)), "protocol": "TCP"}],
    }
    if rng.random() < 0.7:
        main["env"] = [
            {"name": name, "value": value}
            for name, value in (
                ("LOG_LEVEL", "info"),
                ("APP_ENV", "production"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4317"),
                ("DB_POOL_SIZE", str(rng.randint(5, 50))),
            )[: rng.randint(1, 4)]
        ]
    main["resources"] = (
        {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}
        if rng.random() < 0.8
        else {}
    )
    if rng.random() < 0.5:
        main["volumeMounts"] = [{"name": "config", "mountPath": "/etc/app"}]
    if rng.random() < 0.7:
        probe = {"path": "/healthz", "port": main["ports"][0]["containerPort"], "scheme": "HTTP"}
        main["readinessProbe"] = {
            "httpGet": probe,
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        }
    main |= {
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    spec: dict[str, Any] = {}
    if "volumeMounts" in main:
        spec["volumes"] = [{"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}}]
    spec["containers"] = [main]
    spec |= {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": app,
        "serviceAccount": app,
        "securityContext": {},
        "schedulerName": "default-scheduler",
    }
    return {"metadata": {"creationTimestamp": None, "labels": {"app": app}}, "spec": spec}, image


def primary_labels(obj: Planned) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations that the primary manager sets (GitOps tools leave their marks)."""
    labels = {"app": obj.app}
    annotations: dict[str, str] = {}
    if obj.primary[0] == "helm":
        labels |= {"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": f"{obj.team}-0.{obj.seed % 40}.1"}
        annotations |= {"meta.helm.sh/release-name": obj.team, "meta.helm.sh/release-namespace": obj.namespace}
    elif obj.primary[0] == "argocd-controller":
        labels["app.kubernetes.io/instance"] = obj.namespace
    if obj.role in ("fight", "migration"):
        labels["team"] = obj.team
    return labels, annotations


def last_applied(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != "team"}
    applied: dict[str, Any] = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"annotations": {}, "labels": labels, "name": meta["name"], "namespace": meta["namespace"]},
    }
    if "data" in obj:
        applied["data"] = obj["data"]
    if "spec" in obj:
        spec = obj["spec"]
        pod = spec.get("template", {}).get("spec", {})
        containers = [
            {k: c[k] for k in ("name", "image", "ports", "env", "resources") if k in c}
            for c in pod.get("containers", ())
        ]
        applied["spec"] = {
            "replicas": spec.get("replicas"),
            "selector": spec.get("selector"),
            "template": {
                "metadata": {"labels": spec.get("template", {}).get("metadata", {}).get("labels")},
                "spec": {"containers": containers},
            },
        }
    return orjson.dumps(applied, option=orjson.OPT_SORT_KEYS).decode() + "\n"


def meta_for(
    obj: Planned, labels: dict[str, str], annotations: dict[str, str], generation: int | None = None
) -> dict[str, Any]:
    """ObjectMeta in the order the API server writes it."""
    meta: dict[str, Any] = {"name": obj.name, "namespace": obj.namespace, "uid": obj.uid, "resourceVersion": "0"}
    if generation is not None:
        meta["generation"] = generation
    meta["creationTimestamp"] = server_time(obj.created)
    meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return meta


def status_conditions(when: float, rs_name: str) -> list[dict[str, Any]]:
    stamp = server_time(when)
    return [
        {
            "type": "Available",
            "status": "True",
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
            "reason": "MinimumReplicasAvailable",
            "message": "Deployment has minimum availability.",
        },
        {
            "type": "Progressing",
            "status": "True",
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
            "reason": "NewReplicaSetAvailable",
            "message": f'ReplicaSet "{rs_name}" has successfully progressed.',
        },
    ]


def hand_deployment(obj: Planned, rng: random.Random) -> dict[str, Any]:
    labels, annotations = primary_labels(obj)
    template, _ = pod_template(obj.app, obj.seed)
    spec = {
        "replicas": 3,
        "selector": {"matchLabels": {"app": obj.app}},
        "template": template,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
        "revisionHistoryLimit": 10,
        "progressDeadlineSeconds": 600,
    }
    doc: dict[str, Any] = {"kind": "Deployment", "apiVersion": "apps/v1"}
    doc["metadata"] = meta_for(obj, labels, annotations, generation=1)
    doc["spec"] = spec
    if obj.primary[0] in APPLIERS:
        doc["metadata"].setdefault("annotations", {})[LAST_APPLIED] = last_applied(doc)
    owned = {"f:metadata": trie({k: doc["metadata"][k] for k in ("labels", "annotations") if k in doc["metadata"]})}
    owned["f:spec"] = trie(spec)
    status_at = obj.created + rng.uniform(2.0, 30.0)
    doc["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "1"
    doc["status"] = {
        "observedGeneration": 1,
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "conditions": status_conditions(status_at, f"{obj.app}-{obj.seed:010x}"),
    }
    kcm = {
        "f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}},
        "f:status": trie(doc["status"]),
    }
    doc["metadata"]["managedFields"] = [
        managed(obj.primary, "apps/v1", obj.created, owned),
        managed(KCM, "apps/v1", status_at, kcm),
    ]
    return doc


def hand_replicaset(obj: Planned, owner: Planned) -> dict[str, Any]:
    template, _ = pod_template(owner.app, owner.seed)
    hash_ = obj.name.rsplit("-", 1)[-1]
    template["metadata"]["labels"]["pod-template-hash"] = hash_
    meta = meta_for(
        obj,
        {"app": owner.app, "pod-template-hash": hash_},
        {
            "deployment.kubernetes.io/desired-replicas": "3",
            "deployment.kubernetes.io/max-replicas": "4",
            "deployment.kubernetes.io/revision": "1",
        },
        generation=1,
    )
    meta["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    doc: dict[str, Any] = {"kind": "ReplicaSet", "apiVersion": "apps/v1", "metadata": meta}
    doc["spec"] = {"replicas": 3, "selector": {"matchLabels": {"app": owner.app, "pod-template-hash": hash_}}}
    doc["spec"]["template"] = template
    doc["status"] = {
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "observedGeneration": 1,
    }
    owned = {
        "f:metadata": trie({k: meta[k] for k in ("annotations", "labels", "ownerReferences")}),
        "f:spec": trie(doc["spec"]),
        "f:status": trie(doc["status"]),
    }
    meta["managedFields"] = [managed(KCM, "apps/v1", obj.created + 1.0, owned)]
    return doc


def config_text(rng: random.Random, key: str, revision: int) -> str:
    size = min(16_000, int(rng.lognormvariate(5.5, 1.1)))
    words = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(f"{rng.choice(WORDS)}_{rng.randrange(1000)}: {rng.choice(WORDS)}")
    if key.isupper():
        return f"{rng.choice(WORDS)}-{revision}"
    return f"# revision {revision}\n" + "\n".join(words) + "\n"


def hand_configmap(obj: Planned, rng: random.Random) -> dict[str, Any]:
    labels, annotations = primary_labels(obj)
    doc: dict[str, Any] = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta_for(obj, labels, annotations)}
    if obj.role == "leader":
        del doc["metadata"]["labels"]
        doc["metadata"]["managedFields"] = []
        m_leader(doc, (), obj.created, obj, rng)
        return doc
    keys = rng.sample(CONFIG_KEYS, rng.randint(1, 4))
    doc["data"] = {key: config_text(rng, key, 1) for key in sorted(keys)}
    if obj.primary[0] in APPLIERS:
        doc["metadata"].setdefault("annotations", {})[LAST_APPLIED] = last_applied(doc)
    owned = {"f:data": trie(doc["data"], "data")}
    owned["f:metadata"] = trie({k: doc["metadata"][k] for k in ("labels", "annotations") if k in doc["metadata"]})
    doc["metadata"]["managedFields"] = [managed(obj.primary, "v1", obj.created, owned)]
    return doc


def _template_score(obj: dict[str, Any]) -> tuple[int, int, int]:
    """Prefer objects with content (data/spec), then more managers, then larger ones."""
    entries = obj["metadata"].get("managedFields") or []
    return (int(bool(obj.get("data") or obj.get("spec"))), len(entries), len(orjson.dumps(obj)))


class Templates:
    """Object shapes: the recorded real captures when present (per kind), else the hand-built v1.20 ones."""

    def __init__(self, directory: Path) -> None:
        self.real: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, str] = {}
        self.root_ca: dict[str, str] = {"ca.crt": FAKE_CA}
        for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
            try:
                for event in read_capture(str(path), stats=ReadStats(), skip_invalid=True):
                    self._consider(event.object, path)
            except ValueError as exc:
                print(f"warning: skipping template capture {path}: {exc}", file=sys.stderr)
        for kind in KINDS:
            if kind not in self.real:
                self.sources[kind] = "hand-built v1.20"

    def _consider(self, obj: dict[str, Any], path: Path) -> None:
        kind = obj.get("kind")
        entries = obj.get("metadata", {}).get("managedFields") or []
        if kind not in KINDS or not entries or obj.get("metadata", {}).get("deletionTimestamp"):
            return
        if kind == "Deployment" and not obj.get("spec", {}).get("template"):
            return
        if obj["metadata"].get("name") == "kube-root-ca.crt":
            self.root_ca = obj.get("data") or self.root_ca
            return
        score = _template_score(obj)
        best = self.real.get(kind)
        if best is None or score > _template_score(best):
            self.real[kind] = copy_json(obj)
            self.sources[kind] = f"real: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}"

    def build(self, obj: Planned, pop: Population, rng: random.Random) -> dict[str, Any]:
        if obj.role == "static":  # kube-root-ca.crt, written by kube-controller-manager in every namespace
            meta = meta_for(obj, {}, {})
            del meta["labels"]
            owned = {"f:data": trie(self.root_ca, "data")}
            meta["managedFields"] = [managed(KCM, "v1", obj.created, owned)]
            return {"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta, "data": dict(self.root_ca)}
        if obj.kind in self.real and obj.role != "leader":
            return self._from_real(obj, pop, rng)
        if obj.kind == "Deployment":
            return hand_deployment(obj, rng)
        if obj.kind == "ReplicaSet":
            assert obj.owner is not None
            return hand_replicaset(obj, pop.objects[obj.owner])
        return hand_configmap(obj, rng)

    def _from_real(self, obj: Planned, pop: Population, rng: random.Random) -> dict[str, Any]:
        """A real object with this object's identity; its managers renamed to this object's roles."""
        doc = copy_json(self.real[obj.kind])
        meta = doc["metadata"]
        meta.pop("selfLink", None)
        meta.update(name=obj.name, namespace=obj.namespace, uid=obj.uid, resourceVersion="0")
        meta["creationTimestamp"] = server_time(obj.created)
        if "generation" in meta:
            meta["generation"] = 1
        extra, annotations = primary_labels(obj)
        kept = meta["managedFields"] = real_managers(doc, obj)
        owner_refs = meta.get("ownerReferences") or []
        if obj.owner is not None and owner_refs:
            old = owner_refs[0]["uid"]
            owner = pop.objects[obj.owner]
            owner_refs[0].update(uid=owner.uid, name=owner.name)
            for entry in kept:
                entry["fieldsV1"] = rename_keys(entry["fieldsV1"], old, owner.uid)
        primary = kept[0]["fieldsV1"]
        if obj.kind == "ConfigMap":  # real shape, but this cluster's config sizes
            doc["data"] = {key: config_text(rng, key, 1) for key in sorted(rng.sample(CONFIG_KEYS, rng.randint(1, 4)))}
            for entry in kept:
                entry["fieldsV1"].pop("f:data", None)
            primary["f:data"] = trie(doc["data"], "data")
            kept[0]["fieldsV1"] = primary = sort_trie(primary)
        for key, value in {**extra, **annotations}.items():
            section = "labels" if key in extra else "annotations"
            meta.setdefault(section, {})[key] = value
            own(primary, ("f:metadata", f"f:{section}", f"f:{key}"))
        if obj.kind == "Deployment" and obj.role in ("fight", "correction"):
            doc.setdefault("spec", {})["replicas"] = 3
            for entry in kept[1:]:
                disown(entry["fieldsV1"], REPLICAS)
            own(primary, REPLICAS)
        if obj.primary[0] in APPLIERS or LAST_APPLIED in meta.get("annotations", {}):
            meta.setdefault("annotations", {})[LAST_APPLIED] = last_applied(doc)
            own(primary, ("f:metadata", "f:annotations", f"f:{LAST_APPLIED}"))
        return doc


def real_managers(doc: dict[str, Any], obj: Planned) -> list[dict[str, Any]]:
    """Keep the real entry that owns most (renamed to the primary) and the one owning status (renamed kcm)."""
    entries = doc["metadata"].get("managedFields") or []
    status = next((e for e in entries if "f:status" in (e.get("fieldsV1") or {})), None)
    others = [e for e in entries if e is not status]
    main = max(others, key=lambda e: len(orjson.dumps(e.get("fieldsV1"))), default=None)
    kept: list[dict[str, Any]] = []
    for entry, writer in ((main, obj.primary), (status, KCM)):
        if entry is None or any(e["manager"] == writer[0] for e in kept):
            continue
        entry.pop("subresource", None)
        entry.update(manager=writer[0], operation=writer[1], time=server_time(obj.created + len(kept)))
        kept.append(entry)
    if not kept:
        kept.append(managed(obj.primary, doc["apiVersion"], obj.created, {}))
    return kept


# -------------------------------------------------------------------------------------------- mutations


def _bump_generation(doc: dict[str, Any]) -> None:
    doc["metadata"]["generation"] = doc["metadata"].get("generation", 1) + 1


def _refresh_last_applied(doc: dict[str, Any], writer: Writer) -> None:
    annotations = doc["metadata"].get("annotations") or {}
    if writer[0] in APPLIERS and LAST_APPLIED in annotations:
        annotations[LAST_APPLIED] = last_applied(doc)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = doc.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    containers = pod.setdefault("containers", [])
    if not containers:
        containers.append({"name": "app", "image": "registry.example.com/app:1.0.0"})
    return containers


def m_rollout(doc: dict[str, Any], _args: tuple[Any, ...], t: float, obj: Planned, _rng: random.Random) -> None:
    main = _containers(doc)[0]
    repo, _, tag = main.get("image", "app:1.0.0").rpartition(":")
    parts = [*tag.split("."), "0", "0"][:3]
    try:
        parts[2] = str(int(parts[2]) + 1)
    except ValueError:
        parts = ["1", "0", "1"]
    main["image"] = f"{repo or 'app'}:{'.'.join(parts)}"
    _bump_generation(doc)
    container = "k:" + orjson.dumps({"name": main.get("name", "app")}).decode()
    image = ("f:spec", "f:template", "f:spec", "f:containers", container, "f:image")
    claim(doc, entry_of(doc, obj.primary, t), image)
    _refresh_last_applied(doc, obj.primary)


def m_restart(doc: dict[str, Any], _args: tuple[Any, ...], t: float, _obj: Planned, _rng: random.Random) -> None:
    template = doc.setdefault("spec", {}).setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    tmeta.setdefault("annotations", {})["kubectl.kubernetes.io/restartedAt"] = observed_time(t)[:19] + "Z"
    _bump_generation(doc)
    entry = entry_of(doc, ("kubectl-rollout", "Update"), t)
    own(entry["fieldsV1"], ("f:spec", "f:template", "f:metadata", "f:annotations", "."))
    claim(doc, entry, ("f:spec", "f:template", "f:metadata", "f:annotations", "f:kubectl.kubernetes.io/restartedAt"))


def m_dep_status(doc: dict[str, Any], args: tuple[Any, ...], t: float, _obj: Planned, rng: random.Random) -> None:
    phase = args[0]
    meta, status = doc["metadata"], doc.setdefault("status", {})
    replicas = (doc.get("spec") or {}).get("replicas", 1)
    entry = entry_of(doc, KCM, t)
    status["observedGeneration"] = meta.get("generation", 1)
    conditions = status.setdefault("conditions", status_conditions(t, meta["name"]))
    progressing = next((c for c in conditions if c.get("type") == "Progressing"), conditions[-1])
    progressing["lastUpdateTime"] = server_time(t)
    if phase == "start":
        annotations = meta.setdefault("annotations", {})
        revision = int(annotations.get("deployment.kubernetes.io/revision", "1")) + 1
        annotations["deployment.kubernetes.io/revision"] = str(revision)
        claim(doc, entry, ("f:metadata", "f:annotations", "f:deployment.kubernetes.io/revision"))
        status["updatedReplicas"] = 1
        progressing.update(reason="ReplicaSetUpdated", message=f'ReplicaSet "{meta["name"]}" is progressing.')
    elif phase == "progress":
        status["updatedReplicas"] = min(replicas, status.get("updatedReplicas", 0) + 1)
    elif phase == "done":
        status["updatedReplicas"] = replicas
        progressing.update(
            reason="NewReplicaSetAvailable", message=f'ReplicaSet "{meta["name"]}" has successfully progressed.'
        )
    ready = replicas if phase == "done" or rng.random() < 0.5 else max(0, replicas - 1)
    status.update(replicas=replicas, readyReplicas=ready, availableReplicas=ready)
    if ready < replicas:
        status["unavailableReplicas"] = replicas - ready
        claim(doc, entry, ("f:status", "f:unavailableReplicas"))
    elif "unavailableReplicas" in status:
        del status["unavailableReplicas"]
        disown(entry["fieldsV1"], ("f:status", "f:unavailableReplicas"))


def m_rs_status(doc: dict[str, Any], _args: tuple[Any, ...], t: float, _obj: Planned, rng: random.Random) -> None:
    entry = entry_of(doc, KCM, t)
    status = doc.setdefault("status", {})
    replicas = (doc.get("spec") or {}).get("replicas", 1)
    status["observedGeneration"] = doc["metadata"].get("generation", 1)
    ready = replicas if rng.random() < 0.5 else max(0, replicas - 1)
    status.update(replicas=replicas, fullyLabeledReplicas=replicas)
    for key in ("readyReplicas", "availableReplicas"):
        if ready:
            status[key] = ready
            claim(doc, entry, ("f:status", f"f:{key}"))
        elif key in status:
            del status[key]
            disown(entry["fieldsV1"], ("f:status", f"f:{key}"))


def m_rs_scale_down(doc: dict[str, Any], _args: tuple[Any, ...], t: float, obj: Planned, rng: random.Random) -> None:
    doc.setdefault("spec", {})["replicas"] = 0
    _bump_generation(doc)
    claim(doc, entry_of(doc, KCM, t), REPLICAS)
    m_rs_status(doc, (), t, obj, rng)


def m_cm_data(doc: dict[str, Any], _args: tuple[Any, ...], t: float, obj: Planned, rng: random.Random) -> None:
    data = doc.setdefault("data", {})
    key = rng.choice(sorted(data)) if data else "application.yaml"
    revision = doc["metadata"].get("annotations", {}).get("bench.fightwatch.io/revision", "1")
    revision = str(int(revision) + 1)
    data[key] = config_text(rng, key, int(revision))
    entry = entry_of(doc, obj.primary, t)
    claim(doc, entry, ("f:data", f"f:{key}"))
    doc["metadata"].setdefault("annotations", {})["bench.fightwatch.io/revision"] = revision
    claim(doc, entry, ("f:metadata", "f:annotations", "f:bench.fightwatch.io/revision"))
    _refresh_last_applied(doc, obj.primary)


def m_cm_annotate(doc: dict[str, Any], _args: tuple[Any, ...], t: float, obj: Planned, _rng: random.Random) -> None:
    key = "owner.example.com/contact"
    doc["metadata"].setdefault("annotations", {})[key] = f"{obj.team}-oncall@example.com"
    claim(doc, entry_of(doc, ("kubectl-annotate", "Update"), t), ("f:metadata", "f:annotations", f"f:{key}"))


def m_take(doc: dict[str, Any], args: tuple[Any, ...], t: float, _obj: Planned, _rng: random.Random) -> None:
    by, _loser, keys, value = args
    if keys == REPLICAS:
        doc.setdefault("spec", {})["replicas"] = value
        _bump_generation(doc)
    else:
        doc["metadata"].setdefault("labels", {})["team"] = value
    claim(doc, entry_of(doc, by, t), keys)  # the loser's entry loses it (and vanishes if left empty)


def m_annotate(doc: dict[str, Any], args: tuple[Any, ...], t: float, _obj: Planned, _rng: random.Random) -> None:
    writer, key = args
    doc["metadata"].setdefault("annotations", {})[key] = nano_time(t)
    claim(doc, entry_of(doc, writer, t), ("f:metadata", "f:annotations", f"f:{key}"))


def m_leader(doc: dict[str, Any], _args: tuple[Any, ...], t: float, obj: Planned, _rng: random.Random) -> None:
    record = {
        "holderIdentity": f"{obj.name}-7d9f8c6b5-x2k4p_{obj.uid}",
        "leaseDurationSeconds": 15,
        "acquireTime": server_time(0.0),
        "renewTime": server_time(t),
        "leaderTransitions": 3,
    }
    doc["metadata"].setdefault("annotations", {})[LEADER_KEY] = orjson.dumps(record).decode()
    claim(doc, entry_of(doc, obj.primary, t), ("f:metadata", "f:annotations", f"f:{LEADER_KEY}"))


def m_delete(_doc: dict[str, Any], _args: tuple[Any, ...], _t: float, _obj: Planned, _rng: random.Random) -> None:
    return


Mutation = Callable[[dict[str, Any], tuple[Any, ...], float, Planned, random.Random], None]
MUTATIONS: dict[str, Mutation] = {
    "rollout": m_rollout,
    "restart": m_restart,
    "dep_status": m_dep_status,
    "rs_status": m_rs_status,
    "rs_scale_down": m_rs_scale_down,
    "cm_data": m_cm_data,
    "cm_annotate": m_cm_annotate,
    "take": m_take,
    "annotate": m_annotate,
    "leader": m_leader,
    "delete": m_delete,
}

# ---------------------------------------------------------------------------------------------- writing


def generate(path: Path, *, events: int, objects: int, seed: int, templates_dir: Path = REAL_CAPTURES) -> Truth:
    """Write the stream (JSON Lines, ordered by observedAt) and return what was injected and its sizes."""
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
                doc = templates.build(obj, pop, rng)
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


# ------------------------------------------------------------------------------------------ measurement


@dataclass(slots=True)
class Timing:
    best: float
    runs: list[float]
    events: int

    @property
    def rate(self) -> float:
        return self.events / self.best


NATIVE = [native_available()]  # the engine measured: the native front end where built (`--engine`)


def replay(path: Path, settings: DetectionSettings) -> tuple[float, Engine, ReadStats]:
    engine = Engine(settings, native=NATIVE[0])
    stats = ReadStats()
    start = time.perf_counter()
    if engine.native:
        process_parsed = engine.process_parsed
        for parsed in read_parsed(str(path), engine.front, stats=stats):
            process_parsed(parsed)
    else:
        process = engine.process
        for event in read_capture(str(path), stats=stats):
            process(event)
    return time.perf_counter() - start, engine, stats


def native_bytes() -> int:
    """Bytes the native front end holds (its own allocator count: tracemalloc sees only Python's)."""
    if not NATIVE[0]:
        return 0
    from watcher import _native  # noqa: PLC0415 - only where it is built

    return _native.allocated()


def decode_only(path: Path) -> tuple[float, int]:
    loads = orjson.loads
    count = 0
    start = time.perf_counter()
    with path.open("rb", buffering=READ_BUFFER) as stream:  # (read as the replay reads it)
        for line in stream:
            loads(line)
            count += 1
    return time.perf_counter() - start, count


def k8s_models(path: Path, total: int, sample: int) -> tuple[float, int, int]:
    """Decode + deserialize each sampled event's object into kubernetes-asyncio models (V1Deployment, ...)."""
    stride = max(1, total // sample)
    lines = []
    with path.open("rb") as stream:
        for number, line in enumerate(stream):
            if number % stride == 0:
                lines.append(line)

    async def run() -> float:
        from kubernetes_asyncio.client import ApiClient  # noqa: PLC0415 - optional, slow to import

        async with ApiClient() as client:
            deserialize = client._ApiClient__deserialize  # the body of ApiClient.deserialize, minus json.loads
            start = time.perf_counter()
            for line in lines:
                event = orjson.loads(line)
                obj = event["object"]
                deserialize(obj, MODELS.get(obj["kind"], "object"))
            return time.perf_counter() - start

    return asyncio.run(run()), len(lines), stride


def best_of(runs: int, fn: Callable[[], tuple[float, int]]) -> Timing:
    times, count = [], 0
    for _ in range(runs):
        gc.collect()
        seconds, count = fn()
        times.append(seconds)
    return Timing(min(times), times, count)


def memory_per_object(path: Path, settings: DetectionSettings) -> dict[str, float]:
    """Bytes the engine holds after the replay (tracemalloc), per tracked object. Events are streamed."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    native_before = native_bytes()
    _, engine, _ = replay(path, settings)
    gc.collect()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    native = native_bytes() - native_before
    after += native
    tracked = engine.tracked_objects
    return {
        "retained_bytes": after - before,
        "native_bytes": native,
        "peak_bytes": peak - before,
        "tracked_objects": tracked,
        "bytes_per_object": (after - before) / max(1, tracked),
        "active_findings": len(engine.active()),
        "resolved_findings": len(engine.resolved()),
    }


def watch_index_per_object(path: Path) -> dict[str, float]:
    """Bytes per object of what the live watcher keeps besides the engine: each watch's uid -> (namespace, name)
    index of the objects it knows (to tell which vanished across a relist), built here from the stream's ADDED
    events as the watch builds it from its lists."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index: dict[str, tuple[str | None, str]] = {}
    with path.open("rb") as stream:
        for line in stream:
            if not line.startswith(b'{"type":"ADDED"'):
                continue
            meta = orjson.loads(line)["object"]["metadata"]
            namespace = meta.get("namespace")
            index[meta["uid"]] = (sys.intern(namespace) if namespace else None, meta.get("name") or "")
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"bytes": after - before, "objects": len(index), "bytes_per_object": (after - before) / max(1, len(index))}


def rss_per_object(path: Path, settings: DetectionSettings) -> dict[str, float]:
    """Resident memory the replay adds (VmRSS, no tracemalloc), per tracked object: what the allocator really
    takes, fragmentation included, rather than what Python objects hold."""
    tune_gc()  # as fightwatch does (this may run in a fresh interpreter)
    gc.collect()
    before = _vm_rss()
    _, engine, _ = replay(path, settings)
    gc.collect()
    grown = _vm_rss() - before
    return {
        "rss_growth_bytes": grown,
        "tracked_objects": engine.tracked_objects,
        "bytes_per_object": grown / max(1, engine.tracked_objects),
    }


def memory_only(path: Path, truth: Truth | None) -> dict[str, Any]:
    """Engine memory per tracked object as shipped (objects idle for the fight window let go, the default cap)
    and with every object kept (no idle eviction, no cap): the worst case, every object of the stream tracked."""
    shipped = Config().detection
    everything = shipped.model_copy(update={"idle_after": 10 * SPAN, "max_objects": None})
    results: dict[str, Any] = {
        "machine": machine(),
        "stream": stream_summary(path, truth, truth.events if truth else 0),
    }
    for name, settings in (("every_object_kept", everything), ("defaults", shipped)):
        results[name] = memory_per_object(path, settings)
        print(f"{name}: {results[name]}", file=sys.stderr)
    results["watch_index"] = watch_index_per_object(path)
    # In a fresh interpreter: this one's heap already holds what the replays above left, which the next replay
    # would reuse rather than grow.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        results["every_object_kept_rss"] = pool.apply(rss_per_object, (path, everything))
    print(f"every_object_kept_rss: {results['every_object_kept_rss']}", file=sys.stderr)
    return results


def _vm_rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024


def timeline(path: Path, settings: DetectionSettings, every: int, *, traced: bool) -> list[dict[str, float]]:
    """Replay the stream and sample, every `every` events: the simulated time, the tracked objects, the
    handovers logged (and objects with a log), and the engine's memory: tracemalloc's count of what Python
    holds (`traced`) or the resident memory the replay added (VmRSS; tracemalloc off, its own tables would count).
    """
    gc.collect()
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if traced else _vm_rss()
    engine = Engine(settings)
    process = engine.process
    states = engine._objects  # (a benchmark's look inside: the handover logs' sizes)
    series: list[dict[str, float]] = []
    first: float | None = None

    def sample(events: int) -> None:
        logs = [s.history.size() for s in states.values() if s.history is not None]  # (handovers, not words)
        point: dict[str, float] = {
            "events": events,
            "sim_minutes": round((engine.now - first) / 60, 2) if first is not None else 0.0,
            "tracked_objects": len(states),
            "objects_with_handovers": len(logs),
            "handovers_logged": sum(logs),
            "evicted_idle": engine.stats.evicted_idle,
        }
        if traced:
            point["traced_bytes"] = tracemalloc.get_traced_memory()[0] - base
        else:
            rss = _vm_rss()
            point["rss_bytes"] = rss - base
            point["process_rss_bytes"] = rss
        series.append(point)

    count = 0
    for event in read_capture(str(path), stats=ReadStats()):
        process(event)
        count += 1
        if first is None and engine.now > -math.inf:
            first = engine.now
        if count % every == 0:
            sample(count)
    if count % every:
        sample(count)
    if traced:
        tracemalloc.stop()
    print(f"timeline ({'tracemalloc' if traced else 'VmRSS'}): {series[-1]}", file=sys.stderr)
    return series


def memory_timeline(path: Path, truth: Truth | None, every: int, window: float | None) -> dict[str, Any]:
    """Engine memory over the stream's simulated time at the defaults (fight window and idle time 1 h, or
    `window`): does it level off once the window has turned over? One replay counted by VmRSS, one by tracemalloc."""
    settings = Config().detection
    if window is not None:
        fight = settings.fight.model_copy(update={"window": window})
        settings = settings.model_copy(update={"idle_after": window, "fight": fight})
    results: dict[str, Any] = {
        "machine": machine(),
        "stream": stream_summary(path, truth, truth.events if truth else 0),
        "settings": {
            "fight_window_s": settings.fight.window,
            "idle_after_s": settings.idle_seconds,
            "history": settings.history,
            "max_objects": settings.max_objects,
        },
        "sample_every_events": every,
        # VmRSS first, on this process's fresh heap (as a live process's); then tracemalloc's count.
        "rss": timeline(path, settings, every, traced=False),
        "tracemalloc": timeline(path, settings, every, traced=True),
    }
    if truth is None:  # (a recording: no sidecar to count from)
        results["stream"]["events"] = results["rss"][-1]["events"]
    return results


def profile(path: Path, settings: DetectionSettings, top: int = 15) -> list[dict[str, Any]]:
    profiler = cProfile.Profile()
    profiler.enable()
    replay(path, settings)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():
        short = filename.replace(str(REPO) + "/", "").replace(sys.prefix, "<venv>")
        rows.append({"function": f"{short}:{line}({func})", "calls": calls, "tottime": tottime, "cumtime": cumtime})
    rows.sort(key=lambda r: -r["tottime"])
    return rows[:top]


# ---------------------------------------------------------------------------------------------- checking


NOT_CHECKED: dict[str, Any] = {
    "injected": 0,
    "found": 0,
    "recall": None,
    "missed_examples": [],
    "false_positives": 0,
    "false_positives_by_role": {},
    "false_positive_examples": [],
}


def check(engine: Engine, truth: Truth) -> dict[str, Any]:
    """Recall of injected fights and hot loops, and findings on objects that were not made to misbehave."""
    findings: list[Finding] = engine.active() + engine.resolved()
    found: dict[FindingType, dict[str, Finding]] = {FindingType.FIGHT: {}, FindingType.HOT_LOOP: {}}
    for finding in findings:
        found[finding.type].setdefault(finding.object.uid, finding)
    role_of = {uid: role for role, uids in truth.roles.items() for uid in uids}
    out: dict[str, Any] = {"findings": len(findings), "resolved_buffer_full": len(engine.resolved()) >= 10_000}
    flavors: dict[str, list[int]] = {}
    for uid, flavor in sorted(truth.flavors.items()):
        counts = flavors.setdefault(flavor, [0, 0])
        counts[0] += uid in found[FindingType.FIGHT]
        counts[1] += 1
    out["fight_recall_by_flavor"] = {flavor: f"{hit}/{total}" for flavor, (hit, total) in sorted(flavors.items())}
    for kind, role in ((FindingType.FIGHT, "fight"), (FindingType.HOT_LOOP, "hot")):
        injected = set(truth.roles.get(role, ()))
        hits = injected & set(found[kind])
        misses = sorted(injected - hits)
        extra = sorted(set(found[kind]) - injected)
        out[kind.value] = {
            "injected": len(injected),
            "found": len(hits),
            "recall": len(hits) / len(injected) if injected else None,
            "missed_examples": misses[:5],
            "false_positives": len(extra),
            "false_positives_by_role": dict(Counter(role_of.get(uid, "?") for uid in extra)),
            "false_positive_examples": [
                f"{found[kind][uid].object.display()}: {found[kind][uid].summary}" for uid in extra[:5]
            ],
        }
    return out


# ---------------------------------------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    model = "unknown"
    with Path("/proc/cpuinfo").open(encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    for package in ("orjson", "kubernetes_asyncio"):
        try:
            versions[package] = pkg_metadata.version(package)
        except pkg_metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "pinned_to": sorted(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        **interpreter_build(),
        **versions,
    }


def interpreter_build() -> dict[str, Any]:
    """How the interpreter was built: it moves the replay by about a fifth on the same code (README, "Benchmark").

    `libpython` is the shared library the interpreter runs from, or none when it is linked into the executable;
    `configure_flags` are the optimization flags its configure recorded (Debian's python3.11 records none although
    it is built with PGO and LTO: its packaging keeps them out of sysconfig).
    """
    with Path("/proc/self/maps").open(encoding="utf-8") as maps:
        shared = sorted({line.split()[-1] for line in maps if "/libpython" in line})
    configured = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    return {
        "executable": os.path.realpath(sys.executable),
        "libpython": shared[0] if shared else None,
        "configure_flags": [f for f in ("--enable-optimizations", "--with-lto") if f in configured],
    }


def markdown(results: dict[str, Any]) -> str:
    full, floor, k8s, mem = results["replay"], results["decode"], results["k8s_models"], results["memory"]
    stream, found = results["stream"], results["detection"]
    ratio = full["events_per_s"] / floor["events_per_s"]

    def ok(good: bool) -> str:
        return "met" if good else "**NOT met**"

    def recall(kind: str) -> str:
        r = found[kind]
        pct = f" ({100 * r['recall']:.1f}%)" if r["recall"] is not None else ""
        return f"{r['found']}/{r['injected']}{pct}"

    kinds = ", ".join(f"{k} {v['mean_bytes']:,.0f} B" for k, v in stream.get("by_kind", {}).items())
    full_rate, floor_rate = full["events_per_s"], floor["events_per_s"]
    rows = [
        (
            "Full replay (read_capture + Engine.process)",
            f"{full_rate:,.0f} ev/s ({full['best_s']:.2f} s)",
            f">= 50,000 ev/s: {ok(full_rate >= 50_000)}; runs: " + ", ".join(f"{t:.2f} s" for t in full["runs_s"]),
        ),
        (
            "JSON decode floor (readline + orjson.loads)",
            f"{floor_rate:,.0f} ev/s ({floor['best_s']:.2f} s)",
            "runs: " + ", ".join(f"{t:.2f} s" for t in floor["runs_s"]),
        ),
        ("Full replay / decode floor", f"{100 * ratio:.1f}%", f">= 40%: {ok(ratio >= 0.40)}"),
        (
            "kubernetes-asyncio models (orjson.loads + deserialize)",
            f"{k8s['events_per_s']:,.0f} ev/s",
            f"measured on {k8s['sampled_events']:,} events (1 in {k8s['stride']} of the stream)",
        ),
        ("Full replay / k8s models", f"{full_rate / k8s['events_per_s']:.1f}x", ""),
        (
            "Engine memory per tracked object",
            f"{mem['bytes_per_object']:,.0f} B",
            f"<= 1 KiB: {ok(mem['bytes_per_object'] <= 1024)}; tracemalloc: {mem['retained_bytes'] / 1e6:.1f} MB "
            f"retained / {mem['tracked_objects']:,} objects",
        ),
        (
            "Stream",
            f"{stream['events']:,} events, {stream['objects']:,} objects, {stream['bytes'] / 1e6:,.0f} MB",
            ", ".join(f"{k} {v:,}" for k, v in stream.get("by_type", {}).items()),
        ),
        ("Mean event size", f"{stream['mean_bytes']:,.0f} B", kinds),
        ("Fights found (recall)", recall("fight"), f"false positives: {found['fight']['false_positives']}"),
        ("Hot loops found (recall)", recall("hot_loop"), f"false positives: {found['hot_loop']['false_positives']}"),
    ]
    lines = ["| Measurement | Result | Notes |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    m = results["machine"]
    lines.append("")
    lines.append(
        f"Machine: {m['cpu']}, {m['cores']} cores (pinned to {m['pinned_to']}), {m['implementation']} "
        f"{m['python']} ({m['executable']}, libpython {m['libpython'] or 'linked in'}, configured with "
        f"{' '.join(m['configure_flags']) or 'no optimization flags recorded'}), orjson {m['orjson']}, "
        f"kubernetes-asyncio {m['kubernetes_asyncio']}. "
        f"Best of {results['runs']} runs; templates: {stream.get('templates', {})}."
    )
    for kind in ("fight", "hot_loop"):
        r = found[kind]
        if r["missed_examples"]:
            lines.append(f"- missed {kind} (uids): {', '.join(r['missed_examples'])}")
        for example in r["false_positive_examples"]:
            lines.append(f"- false positive {kind} ({r['false_positives_by_role']}): {example}")
    if found.get("fight_recall_by_flavor"):
        lines += ["", "| Injected fight | Found |", "|---|---|"]
        lines += [f"| {flavor} | {hits} |" for flavor, hits in found["fight_recall_by_flavor"].items()]
    if results.get("profile"):
        lines += ["", "| tottime s | cumtime s | calls | function |", "|---:|---:|---:|---|"]
        lines += [
            f"| {r['tottime']:.3f} | {r['cumtime']:.3f} | {r['calls']:,} | `{r['function']}` |"
            for r in results["profile"]
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000, help="events to generate (default 200,000)")
    parser.add_argument("--objects", type=int, default=20_000, help="objects to generate (default 20,000)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per measurement; the best counts")
    parser.add_argument("--seed", type=int, default=20210304, help="random seed of the generated stream")
    parser.add_argument("--json", type=Path, default=Path("bench-results/replay.json"), help="write results here")
    parser.add_argument(
        "--stream",
        type=Path,
        help="reuse this stream (with its .truth.json sidecar) if it exists, else generate it there and keep it",
    )
    parser.add_argument(
        "--templates", type=Path, default=REAL_CAPTURES, help="real captures (*.jsonl) to take object shapes from"
    )
    parser.add_argument("--k8s-sample", type=int, default=20_000, help="events deserialized into k8s models")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of one full replay (top 15)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to CPU 0")
    parser.add_argument(
        "--engine",
        choices=("native", "python"),
        default="native" if native_available() else "python",
        help="native: the native front end and the Python detectors (the default where built); python: the "
        "Python engine",
    )
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="only measure memory per object (as shipped, and with every object kept) and the watch index",
    )
    parser.add_argument(
        "--memory-timeline",
        type=int,
        metavar="N",
        help="only replay at the defaults, sampling every N events the simulated time, tracked objects, handovers "
        "logged, tracemalloc's count and VmRSS (results to --json; with --stream, so that a generated stream is "
        "replayed by a fresh process)",
    )
    parser.add_argument(
        "--window", type=float, help="with --memory-timeline: the fight window and idle time, seconds (default 1 h)"
    )
    return parser.parse_args(argv)


def prepare_stream(args: argparse.Namespace, workdir: Path) -> tuple[Path, Truth | None, float | None]:
    if args.stream is not None and args.stream.exists():
        sidecar = truth_path(args.stream)
        truth = Truth(**orjson.loads(sidecar.read_bytes())) if sidecar.exists() else None
        return args.stream, truth, None
    path = args.stream or workdir / "stream.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    truth = generate(path, events=args.events, objects=args.objects, seed=args.seed, templates_dir=args.templates)
    seconds = time.perf_counter() - start
    if args.stream is not None:
        truth_path(path).write_bytes(orjson.dumps(truth, option=orjson.OPT_INDENT_2))
    return path, truth, seconds


def stream_summary(path: Path, truth: Truth | None, events: int) -> dict[str, Any]:
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    NATIVE[0] = args.engine == "native"
    if not args.no_pin:
        os.sched_setaffinity(0, {0})
    settings = Config().detection
    with tempfile.TemporaryDirectory(prefix="fightwatch-bench-") as tmp:
        path, truth, gen_seconds = prepare_stream(args, Path(tmp))
        if gen_seconds is not None:
            print(f"generated {path} in {gen_seconds:.1f} s", file=sys.stderr)
            if args.memory_timeline and args.stream is not None:
                # Generating leaves this heap hundreds of MB large and mostly free: a replay would reuse it and
                # VmRSS would not show its growth. Start afresh on the stream now kept.
                print("restarting on the kept stream, for a fresh heap", file=sys.stderr)
                os.execv(sys.executable, [sys.executable, *sys.argv])  # noqa: S606 - this very script again

        if args.memory_only or args.memory_timeline:
            if args.memory_timeline:
                results = memory_timeline(path, truth, args.memory_timeline, args.window)
            else:
                results = memory_only(path, truth)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
            print(f"results written to {args.json}", file=sys.stderr)
            return 0
        tune_gc()  # what `fightwatch replay` does; it applies to every measurement below alike
        # Memory first, as in a fresh process: the engine's shared caches (paths, tries, shapes) count too.
        memory = memory_per_object(path, settings)
        floor = best_of(args.runs, lambda: decode_only(path))
        print(f"decode floor: {floor.rate:,.0f} ev/s", file=sys.stderr)
        engines: list[Engine] = []

        def full() -> tuple[float, int]:
            engines.clear()  # the previous engine must not be alive (and traversed by the GC) during a run
            gc.collect()
            seconds, engine, stats = replay(path, settings)
            engines[:] = [engine]
            return seconds, stats.events

        replayed = best_of(args.runs, full)
        print(f"full replay: {replayed.rate:,.0f} ev/s", file=sys.stderr)
        engine = engines.pop()
        detection = check(engine, truth) if truth is not None else {}
        tracked = engine.tracked_objects
        del engine
        k8s_seconds, k8s_events, stride = k8s_models(path, floor.events, args.k8s_sample)
        print(f"k8s models: {k8s_events / k8s_seconds:,.0f} ev/s", file=sys.stderr)
        results: dict[str, Any] = {
            "machine": machine(),
            "runs": args.runs,
            "stream": stream_summary(path, truth, floor.events),
            "generation_s": gen_seconds,
            "replay": {
                "engine": "native front end" if NATIVE[0] else "python",
                "events_per_s": replayed.rate,
                "best_s": replayed.best,
                "runs_s": replayed.runs,
                "tracked_objects": tracked,
            },
            "decode": {"events_per_s": floor.rate, "best_s": floor.best, "runs_s": floor.runs},
            "k8s_models": {
                "events_per_s": k8s_events / k8s_seconds,
                "sampled_events": k8s_events,
                "stride": stride,
                "seconds": k8s_seconds,
                "scaled_full_stream_s": k8s_seconds * floor.events / k8s_events,
            },
            "ratio_replay_to_decode": replayed.rate / floor.rate,
            "memory": memory,
            "detection": detection or dict.fromkeys(("fight", "hot_loop"), NOT_CHECKED),
            "profile": profile(path, settings) if args.profile else None,
        }
    print(markdown(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"\nresults written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
