"""The value types made at every finding change: each has an `__init__` of its own (compiled, cheaper than a
dataclass's generated one) and must behave as the dataclass it is declared as: equal and hashed by value, and
`dataclasses.replace` working on it; `Finding.told` is `replace` of writers, summary and hint."""

from __future__ import annotations

import dataclasses
from typing import Any

from watcher.detection.hints import Evidence
from watcher.model import (
    Bin,
    ChangeKind,
    Client,
    Finding,
    FindingChange,
    FindingState,
    FindingType,
    ObjectRef,
    Timeline,
    Traits,
    Writer,
    WriterCount,
)

A = Writer("a", "Update", "")
B = Writer("b", "Apply", "status")


def finding() -> Finding:
    """A finding with no field at its default."""
    return Finding(
        id="f1",
        type=FindingType.FIGHT,
        state=FindingState.ACTIVE,
        object=ObjectRef(api_version="v1", kind="ConfigMap", namespace="n", name="c", uid="u"),
        writers=(WriterCount(A, 3, users=("u",), fields=("data.x",), reacts=True, restores=True, named_from="audit"),),
        fields=("data.x",),
        handovers=4,
        writes=5,
        writes_per_minute=6.5,
        first_seen=1.0,
        detected_at=2.0,
        last_seen=3.0,
        resolved_at=4.0,
        flip_period=0.5,
        summary="s",
        hint="h",
        clients=(Client("user", "agent", "a", conflicts=1),),
        conflicts=1,
        related="f0",
        timeline=Timeline((A, B), b"\0" * 8, (Bin(1.0, 2.0, 0, 1, 0, 0),), 300.0, partial=True),
        traits=Traits(by_ownership=True, evidence="flips", controller=("Deployment", "d"), controller_writer=B),
    )


def test_told_replaces_writers_summary_and_hint_and_keeps_every_other_field() -> None:
    made = finding()
    writers = (WriterCount(B, 1),)
    told = made.told(writers, "summary", "hint")
    assert told == dataclasses.replace(made, writers=writers, summary="summary", hint="hint")
    for field in dataclasses.fields(Finding):
        if field.name not in ("writers", "summary", "hint"):
            assert getattr(told, field.name) == getattr(made, field.name), field.name


def test_untimed_drops_the_timeline_and_keeps_every_other_field() -> None:
    made = finding()
    untimed = made.untimed()
    assert made.timeline is not None
    assert untimed.timeline is None
    assert untimed == dataclasses.replace(made, timeline=None)


def evidence() -> Evidence:
    return Evidence(FindingType.HOT_LOOP, frozenset({A}), frozenset({"x"}), by_ownership=True, drivers=("a",))


def test_value_types_are_equal_and_hashed_by_value() -> None:
    pairs: list[tuple[Any, Any]] = [
        (finding(), finding()),
        (WriterCount(A, 2, fields=("x",)), WriterCount(A, 2, fields=("x",))),
        (Traits(cause="c"), Traits(cause="c")),
        (Timeline((A,), b"", (), 1.0), Timeline((A,), b"", (), 1.0)),
        (FindingChange(ChangeKind.OPENED, finding()), FindingChange(ChangeKind.OPENED, finding())),
        (evidence(), evidence()),
    ]
    for one, other in pairs:
        assert one == other
        assert one is not other
        assert hash(one) == hash(other)
        assert dataclasses.replace(one) == one
    assert WriterCount(A, 2) != WriterCount(A, 3)
    assert ObjectRef("v1", "Pod", "n", "p", "u") != ObjectRef("v1", "Pod", "n", "p", "u", subresource="status")
    assert Traits() == Traits(by_ownership=False, cause="", ignored="")
    assert FindingChange(ChangeKind.OPENED, finding()).catch_up is False
