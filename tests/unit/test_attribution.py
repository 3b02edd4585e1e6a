"""Write attribution, table-driven: an object's versions in, each write's writers, changed fields and handovers out,
through both implementations of the protocol (the Python reference and the native one)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.unit.captures import IMPLEMENTATIONS
from tests.unit.versions import EPOCH, Entry, Version, attribute, writer
from watcher.detection.events import encode
from watcher.detection.handovers import Handover
from watcher.detection.hashing import text_hash, value_hash
from watcher.model import UNATTRIBUTED, Writer

A, B, KCM = writer("a-operator"), writer("b-operator"), writer("kube-controller-manager")
APPLY = writer("gitops", "Apply")


@dataclass(frozen=True)
class Case:
    versions: tuple[Version, ...]
    writers: list[Writer]  # of the last write
    changed: list[str]  # of the last write
    handovers: list[tuple[str, Writer, Writer | None, Writer | None, int | None, int | None]]  # of the last write


def cm(*entries: Entry, data: str = "1", **labels: str) -> Version:
    return Version(entries=entries, labels=dict(labels), body={"data": {"key": data}})


CASES = {
    "a new entry takes a field from another manager": Case(
        (cm(Entry("a-operator", 0, ("data.key",))), cm(Entry("b-operator", 1, ("data.key",)), data="2")),
        [B],
        ["data.key"],
        [("data.key", B, A, B, text_hash("1"), text_hash("2"))],
    ),
    "an entry whose time advanced names the writer": Case(
        (cm(Entry("a-operator", 0, ("data.key",))), cm(Entry("a-operator", 5, ("data.key",)), data="2")),
        [A],
        ["data.key"],
        [("data.key", A, None, None, text_hash("1"), text_hash("2"))],
    ),
    "an entry whose field set grew names the writer": Case(
        (
            cm(Entry("a-operator", 0, ("data.key",))),
            cm(Entry("a-operator", 0, ("data.key", "metadata.labels.team")), team="x"),
        ),
        [A],
        ["metadata.labels.team"],
        [],  # (a field set for the first time is taken from nobody: no handover)
    ),
    "a rewrite within the second goes to the one owner of what changed": Case(
        (
            cm(Entry("a-operator", 0, ("data.key",)), Entry("b-operator", 0, ("metadata.labels.team",)), team="x"),
            cm(Entry("a-operator", 0, ("data.key",)), Entry("b-operator", 0, ("metadata.labels.team",)), team="y"),
        ),
        [B],
        ["metadata.labels.team"],
        [("metadata.labels.team", B, None, None, text_hash("x"), text_hash("y"))],
    ),
    "a change of a field two managers own is not attributed": Case(
        (
            cm(Entry("a-operator", 0, ("data.key",)), Entry("b-operator", 0, ("data.key",))),
            cm(Entry("a-operator", 0, ("data.key",)), Entry("b-operator", 0, ("data.key",)), data="2"),
        ),
        [UNATTRIBUTED],
        ["data.key"],
        [("data.key", UNATTRIBUTED, A, None, text_hash("1"), text_hash("2"))],  # (the first owner, as a party)
    ),
    "a change nobody owns is not attributed, and names no owner": Case(
        (
            cm(Entry("a-operator", 0, ("metadata.labels.team",))),
            cm(Entry("a-operator", 0, ("metadata.labels.team",)), data="2"),
        ),
        [UNATTRIBUTED],
        ["data.key"],
        [("data.key", UNATTRIBUTED, None, None, text_hash("1"), text_hash("2"))],
    ),
    "an unattributed change of an owned field names its owner as a party": Case(
        (
            cm(
                Entry("a-operator", 0, ("metadata.labels.team",)),
                Entry("b-operator", 0, ("metadata.labels.team",)),
                team="x",
            ),
            cm(
                Entry("a-operator", 0, ("metadata.labels.team",)),
                Entry("b-operator", 0, ("metadata.labels.team",)),
                team="y",
            ),
        ),
        [UNATTRIBUTED],
        ["metadata.labels.team"],
        [("metadata.labels.team", UNATTRIBUTED, A, None, text_hash("x"), text_hash("y"))],
    ),
    "spec.replicas changed alone without an entry (the scale subresource before 1.22) stays unattributed": Case(
        (
            Version((Entry("kubectl", 0, ("spec.replicas",), "Apply"),), body={"spec": {"replicas": 2}}),
            Version((Entry("kubectl", 0, ("spec.replicas",), "Apply"),), body={"spec": {"replicas": 5}}),
        ),
        [UNATTRIBUTED],
        ["spec.replicas"],
        [("spec.replicas", UNATTRIBUTED, writer("kubectl", "Apply"), None, value_hash(2), value_hash(5))],
    ),
    "a single writer flipping a value of a controlled object is an echo: no handover": Case(
        (
            Version((Entry("a-operator", 0, ("data.key",)),), body={"data": {"key": "1"}}, controller=True),
            Version((Entry("a-operator", 3, ("data.key",)),), body={"data": {"key": "2"}}, controller=True),
        ),
        [A],
        ["data.key"],
        [],
    ),
    "server-side apply taking a field from an update": Case(
        (
            cm(Entry("a-operator", 0, ("data.key",))),
            cm(Entry("gitops", 2, ("data.key",), "Apply"), data="2"),
        ),
        [APPLY],
        ["data.key"],
        [("data.key", APPLY, A, APPLY, text_hash("1"), text_hash("2"))],
    ),
    "one manager under Update and Apply is two writers, but no handover between them": Case(
        (
            cm(Entry("gitops", 0, ("data.key",))),
            cm(Entry("gitops", 2, ("data.key",), "Apply"), data="2"),
        ),
        [APPLY],
        ["data.key"],
        [("data.key", APPLY, None, None, text_hash("1"), text_hash("2"))],
    ),
    "lists with merge keys are flattened by key, numbers hash apart from strings": Case(
        (
            Version(
                (Entry("a-operator", 0, ("spec.ports",)),),
                body={"spec": {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}},
            ),
            Version(
                (Entry("a-operator", 0, ("spec.ports",)),),
                body={"spec": {"ports": [{"name": "http", "port": "80"}, {"name": "https", "port": 443}]}},
            ),
        ),
        [UNATTRIBUTED],
        ["spec.ports[name=http].port"],
        [("spec.ports[name=http].port", UNATTRIBUTED, None, None, value_hash(80), text_hash("80"))],
    ),
    "a list without merge keys is one leaf, floats included": Case(
        (
            Version((Entry("a-operator", 0, ("spec.args",)),), body={"spec": {"args": ["--x", 1.5, 1e20]}}),
            Version((Entry("a-operator", 1, ("spec.args",)),), body={"spec": {"args": ["--x", 1.5, 1e21]}}),
        ),
        [A],
        ["spec.args"],
        [("spec.args", A, None, None, None, None)],  # (values checked below: both implementations agree)
    ),
}


def _handover_essence(h: Handover) -> tuple[str, Writer, Writer | None, Writer | None, int | None, int | None]:
    return (h.path, h.by, h.before, h.after, h.was, h.now)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_attribution(engine: str, name: str) -> None:
    case = CASES[name]
    writes, _, _ = attribute(engine, case.versions)
    last = writes[-1]
    assert last.writers == case.writers
    assert last.changed == case.changed
    found = [_handover_essence(h) for h in last.handovers]
    if name.startswith("a list without merge keys"):
        found = [(*h[:4], None, None) for h in found]
    assert found == case.handovers
    assert all(h.at == last.at and h.seq == last.seq == len(writes) for h in last.handovers)


def test_a_list_hashed_whole_hashes_alike_in_both_implementations() -> None:
    versions = CASES["a list without merge keys is one leaf, floats included"].versions
    (python,), _, _ = attribute("python", versions)
    (native,), _, _ = attribute("native", versions)
    assert [tuple(h) for h in python.handovers] == [tuple(h) for h in native.handovers]
    assert python.handovers[0].was != python.handovers[0].now


def _status_version(seconds: float, phase: str, heartbeat: str, *, owner: str = "widget-reconciler") -> Version:
    return Version(
        (Entry("harness", 0, ("spec.size",)), Entry(owner, seconds, ("status.phase", "status.heartbeat"))),
        body={"spec": {"size": 1}},
        status={"phase": phase, "heartbeat": heartbeat},
    )


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_status_loop_is_attributed_to_the_owner_of_the_status_values_it_changes(engine: str) -> None:
    """A controller rewriting status values it owns within one second: managedFields do not change, nothing else
    visible does. From the second such write on, the writer is the one owner of the changed status values."""
    reconciler = writer("widget-reconciler")
    versions = [_status_version(0, "Ready", f"t{i}") for i in range(4)]
    writes, _, _ = attribute(engine, versions, at=[0.0, 0.2, 0.4, 0.6])
    first, *rest = writes
    assert first.writers == [UNATTRIBUTED]  # (the status is kept from here on: nothing to compare with yet)
    assert first.changed == []
    for write in rest:
        assert write.writers == [reconciler]
        assert write.changed == ["status.heartbeat"]
        assert write.handovers == []  # status values are no fight evidence


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_status_values_changed_by_a_manager_that_owns_none_of_them_stay_unattributed(engine: str) -> None:
    versions = [_status_version(0, "Ready", f"t{i}", owner="someone-else") for i in range(3)]
    versions = [
        Version(
            (Entry("harness", 0, ("spec.size",)), Entry("other", 0, ("status.phase",))), body=v.body, status=v.status
        )
        for v in versions
    ]
    writes, _, _ = attribute(engine, versions, at=[0.0, 0.2, 0.4])
    assert [w.writers for w in writes] == [[UNATTRIBUTED], [UNATTRIBUTED]]
    assert writes[-1].changed == ["status.heartbeat"]  # (what changed is still told)


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_a_write_that_changes_visible_values_leaves_status_out(engine: str) -> None:
    reconciler = writer("widget-reconciler")
    quiet = [_status_version(0, "Ready", f"t{i}") for i in range(2)]
    loud = Version(
        (Entry("harness", 0, ("spec.size",)), Entry("widget-reconciler", 0, ("status.phase", "status.heartbeat"))),
        body={"spec": {"size": 2}},
        status={"phase": "Scaling", "heartbeat": "t9"},
    )
    writes, _, _ = attribute(engine, [*quiet, loud], at=[0.0, 0.2, 0.4])
    assert writes[-1].changed == ["spec.size"]
    assert writes[-1].writers == [writer("harness")]
    assert reconciler not in writes[-1].writers


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_owned_fields_are_those_of_the_last_version(engine: str) -> None:
    versions = [
        cm(Entry("a-operator", 0, ("data.key",))),
        cm(Entry("a-operator", 2, ("data.key", "metadata.labels.x")), x="1"),
    ]
    _, attribution, state = attribute(engine, versions)
    last = attribution.decode(encode("MODIFIED", versions[-1].object(2), EPOCH + 1))
    assert last is not None
    assert attribution.owned(state, last, A) == frozenset({"data.key", "metadata.labels.x"})
    assert attribution.owned(state, last, B) is None
