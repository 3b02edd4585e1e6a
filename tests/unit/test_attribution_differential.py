"""The two implementations of the attribution protocol agree: generated sequences of an object's versions
(managedFields entries of several writers, times in and across seconds, labels, annotations, body values of every
JSON type, status, ownerReferences, relists) give identical writes — writers, changed fields, handovers with their
value hashes — and identical owned fields, through the Python reference and the native implementation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.captures import PURE_PYTHON
from tests.unit.versions import EPOCH, Entry, Version, essence
from watcher.detection.events import encode
from watcher.detection.ignore import NO_RULES
from watcher.detection.native import NativeAttribution
from watcher.detection.reference import PythonAttribution
from watcher.detection.state import ObjectState
from watcher.model import Writer

# A pure-Python build (FIGHTWATCH_PURE_PYTHON, asked for by hand: CI never sets it) has no native engine.
pytestmark = pytest.mark.skipif(PURE_PYTHON, reason="FIGHTWATCH_PURE_PYTHON: no native engine")

# (and the API server's own managers, which are never writers: `model.SERVER_MANAGERS`)
MANAGERS = ("alpha", "beta", "gamma", "ancient-changes", "before-first-apply")
OPERATIONS = ("Update", "Apply")
SUBRESOURCES = ("", "", "status", "scale")
FIELDS = (
    "data.key",
    "data.other",
    "metadata.labels.team",
    "metadata.labels.tier",
    "metadata.annotations.note",
    "spec.replicas",
    "spec.args",
    "spec.ports",
    "status.phase",
    "status.heartbeat",
)
WRITERS = [Writer(m, o, s) for m in MANAGERS for o in OPERATIONS for s in SUBRESOURCES]

scalars = st.one_of(
    st.text(max_size=6),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    # (halfway between two shortest decimal forms: Python's repr takes the even one, Rust's formatting need not)
    st.sampled_from([562949953421312.2, -9007199254740993.0 * 0.5, 2.0**60 + 2.0**8]),
    st.booleans(),
    st.none(),
)
short_text = st.sampled_from(["x", "y", "z", "", "é", 'q"uote', "line\nbreak"])
entries = st.lists(
    st.builds(
        Entry,
        manager=st.sampled_from(MANAGERS),
        seconds=st.sampled_from([0.0, 0.0, 1.0, 2.0, 5.0]),
        fields=st.lists(st.sampled_from(FIELDS), max_size=4, unique=True).map(tuple),
        operation=st.sampled_from(OPERATIONS),
        subresource=st.sampled_from(SUBRESOURCES),
        api_version=st.sampled_from(["v1", "v1", "v2"]),
        timed=st.sampled_from([True, True, True, False]),
    ),
    max_size=4,
).map(tuple)
ports = st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["http", "https", "grpc"]), "port": scalars}), max_size=3
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "data": st.fixed_dictionaries({}, optional={"key": scalars, "other": short_text}),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "replicas": st.integers(0, 5),
                "args": st.lists(scalars, max_size=3),
                "ports": ports,
                "template": st.just({}),
            },
        ),
    },
)
statuses = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"phase": short_text, "heartbeat": scalars, "conditions": ports}),
)
versions = st.builds(
    Version,
    entries=entries,
    labels=st.dictionaries(st.sampled_from(["team", "tier"]), short_text, max_size=2),
    # (any text: escapes of control characters, quotes and backslashes, which the native engine hashes unescaping)
    annotations=st.dictionaries(
        st.sampled_from(["note", "example.com/hash"]), st.one_of(short_text, st.text(max_size=12)), max_size=2
    ),
    body=bodies,
    status=statuses,
    controller=st.booleans(),
    owners=st.lists(
        st.one_of(st.dictionaries(st.sampled_from(["controller", "kind"]), scalars, max_size=2), scalars),
        max_size=2,
    ).map(tuple),
    generation=st.sampled_from([None, 1, 1, 2, 3, -1, 1.0, "2", 2**63]),
)
steps = st.lists(
    st.tuples(st.sampled_from(["MODIFIED", "MODIFIED", "MODIFIED", "ADDED"]), versions, st.floats(0.0, 3.0)),
    min_size=1,
    max_size=8,
)


def _drive(attribution: Any, first: Version, rest: list[tuple[str, Version, float]]) -> list[Any]:
    """Everything an implementation says of the sequence: each write's essence and the owned fields after it."""
    said: list[Any] = []
    data = encode("ADDED", first.object(1), EPOCH)
    event = attribution.decode(data)
    state: ObjectState = attribution.baseline(event, NO_RULES)
    at = 0.0
    for rv, (kind, version, gap) in enumerate(rest, start=2):
        at += gap
        event = attribution.decode(encode(kind, version.object(rv), EPOCH + at))
        if kind == "ADDED":
            attribution.resync(state, event)
            said.append("resynced")
        else:
            state.seq += 1
            said.append(essence(attribution.attribute(state, event, EPOCH + at)))
        said.append({w: attribution.owned(state, event, w) for w in WRITERS})
    return said


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=versions, rest=steps)
def test_both_implementations_attribute_alike(first: Version, rest: list[tuple[str, Version, float]]) -> None:
    assert _drive(NativeAttribution(), first, rest) == _drive(PythonAttribution(), first, rest)
