"""Write to an object of the synthetic cluster: each write changes the body in place and records its writer.

`MUTATIONS[op](doc, args, time, planned, rng)` records the writer in managedFields as an Update would on a current
server: the writer takes the fields it sets, other managers lose them, and its entry is stamped with the write's
second; kube-controller-manager writes status through the status subresource (an entry of its own) and an
autoscaler's replicas through the scale subresource.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson

from harness.synthetic.fields import KCM, KCM_STATUS, REPLICAS, Writer, claim, disown, entry_of, own
from harness.synthetic.hand_built import (
    APPLIERS,
    LAST_APPLIED,
    config_text,
    last_applied,
    renew_leader,
    status_conditions,
)
from harness.synthetic.population import Planned
from harness.synthetic.times import nano_time, observed_time, server_time


def _bump_generation(doc: dict[str, Any]) -> None:
    doc["metadata"]["generation"] = doc["metadata"].get("generation", 1) + 1


def _refresh_last_applied(doc: dict[str, Any], writer: Writer) -> None:
    annotations = doc["metadata"].get("annotations") or {}
    if writer[0] in APPLIERS and LAST_APPLIED in annotations:
        annotations[LAST_APPLIED] = last_applied(doc)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = doc.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    containers: list[dict[str, Any]] = pod.setdefault("containers", [])
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
    renew_leader(doc, t, obj)


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
