"""The objects of the synthetic cluster (scripts/synthetic_cluster.py): their bodies as a current Kubernetes API
server (1.22 and later) stores them, managedFields included, and the writes that change them.

An object's first body comes from the recorded real captures (tests/fixtures/captures/*.jsonl by default) when they
hold one of its kind, with this object's identity and managers, else from a hand-built template. Each write
(`MUTATIONS[op](doc, args, time, planned, rng)`) changes the body in place and records its writer in managedFields
as an Update would on a current server: the writer takes the fields it sets, other managers lose them, and its
entry is stamped with the write's second; kube-controller-manager writes status through the status subresource (an
entry of its own) and an autoscaler's replicas through the scale subresource.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harness.bench.engine import capture_objects

REPO = Path(__file__).resolve().parent.parent

EPOCH = 1614848400  # 2021-03-04T09:00:00Z; stream times are seconds after this
KINDS = ("ConfigMap", "Deployment", "ReplicaSet")
WORDS = (
    "api", "worker", "web", "cron", "gateway", "sync", "indexer", "scheduler", "proxy", "exporter",
    "consumer", "publisher", "frontend", "backend", "cache", "router", "notifier", "resolver", "ingester",
    "compactor",
)  # fmt: skip
CONFIG_KEYS = ("application.yaml", "LOG_LEVEL", "FEATURE_FLAGS", "nginx.conf", "settings.json", "JAVA_OPTS")

Writer = tuple[str, ...]  # (manager, operation) or (manager, operation, subresource)
KCM: Writer = ("kube-controller-manager", "Update")
KCM_STATUS: Writer = ("kube-controller-manager", "Update", "status")  # its status writes, through /status
HPA: Writer = ("kube-controller-manager", "Update", "scale")  # the HorizontalPodAutoscaler's writes of replicas
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
APPLIERS = {"kubectl-client-side-apply", "argocd-controller"}  # keep a last-applied annotation
LEADER_KEY = "control-plane.alpha.kubernetes.io/leader"
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
        if (entry["manager"], entry["operation"], entry.get("subresource", "")) == _key(writer):
            if _key(writer)[2] != "scale":  # (the API server keeps no time for a scale entry)
                entry["time"] = server_time(when)
            return entry
    entry = managed(writer, obj["apiVersion"], when, {})
    entries.append(entry)
    return entry


def _key(writer: Writer) -> tuple[str, str, str]:
    return (writer[0], writer[1], writer[2] if len(writer) > 2 else "")


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
    entry: dict[str, Any] = {"manager": writer[0], "operation": writer[1], "apiVersion": api_version}
    if len(writer) > 2 and writer[2]:
        entry["subresource"] = writer[2]
    if _key(writer)[2] != "scale":  # (the API server keeps no time for a scale entry)
        entry["time"] = server_time(when)
    entry.update(fieldsType="FieldsV1", fieldsV1=sort_trie(owned))
    return entry


# ---------------------------------------------------------------------------------- an object as planned


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
        managed(KCM_STATUS, "apps/v1", status_at, kcm),
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
    }
    meta["managedFields"] = [
        managed(KCM, "apps/v1", obj.created + 1.0, owned),
        managed(KCM_STATUS, "apps/v1", obj.created + 1.0, {"f:status": trie(doc["status"])}),
    ]
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
    """Object shapes: the recorded real captures when present (per kind), else the hand-built ones."""

    def __init__(self, directory: Path) -> None:
        self.real: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, str] = {}
        self.root_ca: dict[str, str] = {"ca.crt": FAKE_CA}
        for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
            try:
                for obj in capture_objects(path):
                    self._consider(obj, path)
            except ValueError as exc:
                print(f"warning: skipping template capture {path}: {exc}", file=sys.stderr)
        for kind in KINDS:
            if kind not in self.real:
                self.sources[kind] = "hand-built"

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

    def build(self, obj: Planned, owner: Planned | None, rng: random.Random) -> dict[str, Any]:
        """The object's body when it is first listed (`owner`: a ReplicaSet's Deployment)."""
        if obj.role == "static":  # kube-root-ca.crt, written by kube-controller-manager in every namespace
            meta = meta_for(obj, {}, {})
            del meta["labels"]
            owned = {"f:data": trie(self.root_ca, "data")}
            meta["managedFields"] = [managed(KCM, "v1", obj.created, owned)]
            return {"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta, "data": dict(self.root_ca)}
        if obj.kind in self.real and obj.role != "leader":
            return self._from_real(obj, owner, rng)
        if obj.kind == "Deployment":
            return hand_deployment(obj, rng)
        if obj.kind == "ReplicaSet":
            assert owner is not None
            return hand_replicaset(obj, owner)
        return hand_configmap(obj, rng)

    def _from_real(self, obj: Planned, owner: Planned | None, rng: random.Random) -> dict[str, Any]:
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
        if owner is not None and owner_refs:
            old = owner_refs[0]["uid"]
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
    for entry, writer in ((main, obj.primary), (status, KCM_STATUS)):
        if entry is None or any(_key(writer) == (e["manager"], e["operation"], e.get("subresource", "")) for e in kept):
            continue
        entry.pop("subresource", None)
        if len(writer) > 2:
            entry["subresource"] = writer[2]
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
    entry = entry_of(doc, KCM_STATUS, t)
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
    entry = entry_of(doc, KCM_STATUS, t)
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
