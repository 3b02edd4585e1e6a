"""Build an object's first body from the recorded real captures when they hold one of its kind, else by hand.

A real object takes this object's identity, and its managers are renamed to this object's roles.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from harness.bench.engine import capture_objects
from harness.synthetic.fields import (
    KCM,
    KCM_STATUS,
    REPLICAS,
    disown,
    managed,
    own,
    rename_keys,
    sort_trie,
    trie,
    writer_key,
)
from harness.synthetic.hand_built import (
    APPLIERS,
    CONFIG_KEYS,
    LAST_APPLIED,
    config_text,
    hand_configmap,
    hand_deployment,
    hand_replicaset,
    last_applied,
    meta_for,
    primary_labels,
)
from harness.synthetic.population import Planned
from harness.synthetic.times import server_time

KINDS = ("ConfigMap", "Deployment", "ReplicaSet")
FAKE_CA = (
    "-----BEGIN CERTIFICATE-----\n"
    + "\n".join(
        ("MIIC5zCCAc+gAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMwEQYDVQQDEwprdWJl" * 17)[i : i + 64]
        for i in range(0, 1088, 64)
    )
    + "\n-----END CERTIFICATE-----\n"
)


def copy_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _template_score(obj: dict[str, Any]) -> tuple[int, int, int]:
    """Score a real object as a template: with content (data/spec) first, then more managers, then larger."""
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
            self.sources[kind] = f"real: {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}"

    def build(self, obj: Planned, owner: Planned | None, rng: random.Random) -> dict[str, Any]:
        """Build the object's body when it is first listed (`owner`: a ReplicaSet's Deployment)."""
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
        """Copy the real object of the kind with this object's identity; its managers renamed to this one's roles."""
        doc: dict[str, Any] = copy_json(self.real[obj.kind])
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
        if entry is None or any(
            writer_key(writer) == (e["manager"], e["operation"], e.get("subresource", "")) for e in kept
        ):
            continue
        entry.pop("subresource", None)
        if len(writer) > 2:
            entry["subresource"] = writer[2]
        entry.update(manager=writer[0], operation=writer[1], time=server_time(obj.created + len(kept)))
        kept.append(entry)
    if not kept:
        kept.append(managed(obj.primary, doc["apiVersion"], obj.created, {}))
    return kept
