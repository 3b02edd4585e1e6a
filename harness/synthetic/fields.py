"""Keep an object's managedFields as a current API server does: each manager's fieldsV1 trie, stamped entries.

An Update that sets a field makes its manager the owner: other managers lose it, and a manager left owning nothing
loses its entry.
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.synthetic.times import server_time

Writer = tuple[str, ...]  # (manager, operation) or (manager, operation, subresource)
KCM: Writer = ("kube-controller-manager", "Update")
KCM_STATUS: Writer = ("kube-controller-manager", "Update", "status")  # its status writes, through /status
HPA: Writer = ("kube-controller-manager", "Update", "scale")  # the HorizontalPodAutoscaler's writes of replicas
REPLICAS = ("f:spec", "f:replicas")

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
    """Make the fieldsV1 trie the API server records for a manager that set `value` (an Update that created it)."""
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
    """Return the writer's managedFields entry, created if missing, stamped with the write time."""
    entries: list[dict[str, Any]] = obj["metadata"].setdefault("managedFields", [])
    for entry in entries:
        if (entry["manager"], entry["operation"], entry.get("subresource", "")) == writer_key(writer):
            if writer_key(writer)[2] != "scale":  # (the API server keeps no time for a scale entry)
                entry["time"] = server_time(when)
            return entry
    entry = managed(writer, obj["apiVersion"], when, {})
    entries.append(entry)
    return entry


def writer_key(writer: Writer) -> tuple[str, str, str]:
    return (writer[0], writer[1], writer[2] if len(writer) > 2 else "")


def claim(doc: dict[str, Any], entry: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Make the writer of `entry` the owner of the field at `keys`, as an Update that sets it does.

    Other managers lose it, and a manager left owning nothing loses its entry (structured-merge-diff drops empty
    managers).
    """
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
    if writer_key(writer)[2] != "scale":  # (the API server keeps no time for a scale entry)
        entry["time"] = server_time(when)
    entry.update(fieldsType="FieldsV1", fieldsV1=sort_trie(owned))
    return entry
