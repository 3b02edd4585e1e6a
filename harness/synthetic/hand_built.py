"""Build an object's first body by hand, as a current API server stores it: defaults filled in, managedFields.

For the kinds the real captures hold none of, and the leader-election ConfigMaps.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from harness.synthetic.fields import KCM, KCM_STATUS, claim, entry_of, managed, trie
from harness.synthetic.population import WORDS, Planned
from harness.synthetic.times import server_time

CONFIG_KEYS = ("application.yaml", "LOG_LEVEL", "FEATURE_FLAGS", "nginx.conf", "settings.json", "JAVA_OPTS")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
APPLIERS = {"kubectl-client-side-apply", "argocd-controller"}  # keep a last-applied annotation
LEADER_KEY = "control-plane.alpha.kubernetes.io/leader"


def pod_template(app: str, seed: int) -> tuple[dict[str, Any], str]:
    """Make a pod template as the API server stores it (defaults filled in); return it and the main image."""
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
    """Return the labels and annotations that the primary manager sets (GitOps tools leave their marks)."""
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
    """Make ObjectMeta in the order the API server writes it."""
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
    words: list[str] = []
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
        renew_leader(doc, obj.created, obj)
        return doc
    keys = rng.sample(CONFIG_KEYS, rng.randint(1, 4))
    doc["data"] = {key: config_text(rng, key, 1) for key in sorted(keys)}
    if obj.primary[0] in APPLIERS:
        doc["metadata"].setdefault("annotations", {})[LAST_APPLIED] = last_applied(doc)
    owned = {"f:data": trie(doc["data"], "data")}
    owned["f:metadata"] = trie({k: doc["metadata"][k] for k in ("labels", "annotations") if k in doc["metadata"]})
    doc["metadata"]["managedFields"] = [managed(obj.primary, "v1", obj.created, owned)]
    return doc


def renew_leader(doc: dict[str, Any], t: float, obj: Planned) -> None:
    """Write the leader-election record of a ConfigMap's holder, renewed at `t`, into its annotation."""
    record = {
        "holderIdentity": f"{obj.name}-7d9f8c6b5-x2k4p_{obj.uid}",
        "leaseDurationSeconds": 15,
        "acquireTime": server_time(0.0),
        "renewTime": server_time(t),
        "leaderTransitions": 3,
    }
    doc["metadata"].setdefault("annotations", {})[LEADER_KEY] = orjson.dumps(record).decode()
    claim(doc, entry_of(doc, obj.primary, t), ("f:metadata", "f:annotations", f"f:{LEADER_KEY}"))
