"""Object versions for tests of attribution: an object's successive states, written the way kube-apiserver writes
them (managedFields entries with `fieldsV1` tries and second-resolution times), fed through an attribution
implementation as watch events. Shared by the table-driven and the differential tests."""

from __future__ import annotations

import time as clock
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from watcher.config import Config
from watcher.detection.attribution import Attribution, Write
from watcher.detection.events import encode
from watcher.detection.ignore import NO_RULES
from watcher.detection.native import implementation
from watcher.detection.state import ObjectState
from watcher.model import Writer

EPOCH = 1614848400.0  # 2021-03-04T09:00:00Z
JSON = dict[str, Any]


def trie(*paths: str) -> JSON:
    """A fieldsV1 trie owning the given dotted paths (`data.key`, `metadata.labels.team`, `status.phase`)."""
    root: JSON = {}
    for path in paths:
        node = root
        for part in path.split("."):
            node = node.setdefault(f"f:{part}", {})
    return root


@dataclass(frozen=True)
class Entry:
    """One managedFields entry: who, how, when (seconds after EPOCH; the server keeps whole seconds), what."""

    manager: str
    seconds: float
    fields: tuple[str, ...]
    operation: str = "Update"
    subresource: str = ""
    api_version: str = "v1"  # (one manager's entries under two apiVersions are one writer)
    timed: bool = True  # (an entry of the scale subresource has no time)

    def json(self) -> JSON:
        entry: JSON = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": trie(*self.fields),
        }
        if self.timed:
            entry["time"] = clock.strftime("%Y-%m-%dT%H:%M:%SZ", clock.gmtime(EPOCH + self.seconds))
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


@dataclass(frozen=True)
class Version:
    """One version of the object."""

    entries: tuple[Entry, ...]
    labels: JSON = field(default_factory=dict)
    annotations: JSON = field(default_factory=dict)
    body: JSON = field(default_factory=dict)  # top-level sections other than metadata and status
    status: JSON | None = None
    controller: bool = False  # has a controller ownerReference
    owners: tuple[Any, ...] = ()  # more ownerReferences, as they are (any JSON: only an object's `controller` counts)
    generation: Any = None  # metadata.generation (any JSON value: the engines read only a whole number)

    def object(self, rv: int, *, kind: str = "ConfigMap", uid: str = "uid-1") -> JSON:
        meta: JSON = {
            "name": "obj",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": str(rv),
            "managedFields": [e.json() for e in self.entries],
        }
        if self.generation is not None:
            meta["generation"] = self.generation
        if self.labels:
            meta["labels"] = self.labels
        if self.annotations:
            meta["annotations"] = self.annotations
        if self.controller:
            meta["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "owner", "controller": True}
            ]
        if self.owners:
            meta["ownerReferences"] = [*meta.get("ownerReferences", ()), *self.owners]
        obj: JSON = {"apiVersion": "v1", "kind": kind, "metadata": meta, **self.body}
        if self.status is not None:
            obj["status"] = self.status
        return obj


def writer(manager: str, operation: str = "Update", subresource: str = "") -> Writer:
    return Writer(manager, operation, subresource)


def attribute(
    attribution: Attribution | str, versions: Sequence[Version], *, at: Iterable[float] | None = None
) -> tuple[list[Write], Attribution, ObjectState]:
    """Feed the versions as one object's events (the first a baseline, the rest writes) through an implementation
    (or a new one of that name); the writes, the implementation and the object's state."""
    chosen = implementation(attribution) if isinstance(attribution, str) else attribution
    times = list(at) if at is not None else [float(i) for i in range(len(versions))]
    writes = []
    state: ObjectState | None = None
    for rv, (version, seconds) in enumerate(zip(versions, times, strict=True), start=1):
        data = encode("ADDED" if state is None else "MODIFIED", version.object(rv), EPOCH + seconds)
        event = chosen.decode(data)
        assert event is not None
        if state is None:
            state = chosen.baseline(event, NO_RULES)
            continue
        state.seq += 1
        writes.append(chosen.attribute(state, event, EPOCH + seconds))
    assert state is not None
    return writes, chosen, state


def essence(write: Write) -> tuple[Any, ...]:
    """What a write says, comparable between implementations."""
    return (write.at, write.seq, tuple(write.writers), tuple(write.changed), tuple(tuple(h) for h in write.handovers))


DETECTION = Config().detection
