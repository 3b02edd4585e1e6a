"""The fight and hot-loop rules, table-driven: a write's handovers (or writers) in, the finding opened out, with no
capture and no attribution in between (the rules' inputs are built by hand)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from tests.unit.captures import IMPLEMENTATIONS
from tests.unit.versions import DETECTION, EPOCH, Entry, Version
from watcher.config import parse_config
from watcher.detection.attribution import Write
from watcher.detection.events import ObjectEvent, encode
from watcher.detection.handovers import Handover
from watcher.detection.ignore import NO_RULES
from watcher.detection.native import implementation as attribution
from watcher.detection.reference import PythonAttribution
from watcher.detection.rules import FightRule, HotLoopRule
from watcher.detection.state import ObjectState
from watcher.model import UNATTRIBUTED, ChangeKind, FindingChange, FindingType, Writer

A, B, C = Writer("a-operator", "Update"), Writer("b-operator", "Update"), Writer("c-operator", "Update")
STATUS = Writer("kube-controller-manager", "Update", "status")  # a controller reporting its object's state
FIELD = "metadata.labels.owner"


def _object() -> tuple[PythonAttribution, ObjectState, ObjectEvent]:
    attribution = PythonAttribution()
    event = attribution.decode(encode("ADDED", Version((Entry("a-operator", 0, (FIELD,)),)).object(1)))
    assert event is not None
    return attribution, attribution.baseline(event, NO_RULES), event


def _write(state: ObjectState, at: float, writers: list[Writer], handovers: list[Handover]) -> Write:
    state.seq += 1
    return Write(EPOCH + at, state.seq, writers, [h.path for h in handovers], handovers)


@dataclass(frozen=True)
class Step:
    """One write with one handover of FIELD: by whom, taken from whom (ownership) and/or value before and after."""

    at: float
    by: Writer
    before: Writer | None = None
    after: Writer | None = None
    was: int | None = None
    now: int | None = None


def own(at: float, loser: Writer, taker: Writer) -> Step:
    return Step(at, taker, loser, taker)


def flip(at: float, was: int, now: int, by: Writer = UNATTRIBUTED) -> Step:
    return Step(at, by, was=was, now=now)


FIGHTS = {
    "ownership ping-pong: a fight at the third handover": (
        [own(0, A, B), own(10, B, A), own(20, A, B), own(30, B, A)],
        3,
        {A, B},
    ),
    "values flipping back and forth: a fight at the third flip": (
        [flip(0, 1, 2), flip(10, 2, 1), flip(20, 1, 2)],
        3,
        {UNATTRIBUTED},
    ),
    # (C has held the field once when it opens, as a writer that wrote once: listed from its next turn on)
    "three writers in turn: a fight at the fourth handover (the third returns nothing yet)": (
        [own(0, A, B), own(10, B, C), own(20, C, A), own(30, A, B)],
        4,
        {A, B},
    ),
    "one field manager flipping values: a fight only at twice the flips (the fifth)": (
        [flip(at, 1 + n % 2, 2 - n % 2, A) for n, at in enumerate(range(0, 80, 10))],
        5,
        {A},
    ),
    "one manager through the status subresource flipping values: its own state, no fight": (
        [flip(at, 1 + n % 2, 2 - n % 2, STATUS) for n, at in enumerate(range(0, 200, 10))],
        None,
        set(),
    ),
    "one correction is no fight": ([own(0, A, B), own(10, B, A)], None, set()),
    "an ownership migration is no fight": ([own(0, A, B), own(10, B, C)], None, set()),
    "values that never come back are no fight": ([flip(0, 1, 2), flip(10, 2, 3), flip(20, 3, 4)], None, set()),
    "handovers a window apart are no fight": (
        [own(0, A, B), own(4000, B, A), own(8000, A, B), own(12000, B, A)],
        None,
        set(),
    ),
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)  # (of the handover log)
@pytest.mark.parametrize("name", sorted(FIGHTS))
def test_fight_rule(name: str, implementation: str) -> None:
    steps, opens_at, writers = FIGHTS[name]
    _, state, event = _object()
    rule = FightRule(DETECTION, attribution(implementation).new_log)
    opened = None
    for n, step in enumerate(steps, start=1):
        handover = Handover(EPOCH + step.at, state.seq + 1, FIELD, step.by, step.before, step.after, step.was, step.now)
        change = rule.observe(state, [handover], _write(state, step.at, [step.by], [handover]), event)
        if change is not None and change.kind is ChangeKind.OPENED:
            assert opened is None
            opened = n
            assert change.finding.type is FindingType.FIGHT
            assert change.finding.fields == (FIELD,)
            assert {c.writer for c in change.finding.writers} == writers
            assert change.finding.handovers == n
            assert change.finding.object.name == "obj"
    assert opened == opens_at


@pytest.mark.parametrize("writer", [A, STATUS], ids=["a manager", "a manager through the status subresource"])
def test_one_manager_the_audit_events_show_several_users_behind_fights_at_the_usual_flip(writer: Writer) -> None:
    """The audit's evidence (`shared`: two users write as this manager) is all a fight of one manager needs."""
    _, state, event = _object()
    rule = FightRule(DETECTION, PythonAttribution().new_log)
    opened = []
    for n, at in enumerate(range(0, 50, 10)):
        step = flip(at, 1 + n % 2, 2 - n % 2, writer)
        handover = Handover(EPOCH + step.at, state.seq + 1, FIELD, step.by, step.before, step.after, step.was, step.now)
        write = _write(state, step.at, [step.by], [handover])
        shared = frozenset({("kube-controller-manager", "status"), ("a-operator", "")})
        change = rule.observe(state, [handover], write, event, shared=shared)
        if change is not None and change.kind is ChangeKind.OPENED:
            opened.append((n + 1, change.finding))
    assert [n for n, _ in opened] == [3]
    assert "audit events show several users" in opened[0][1].hint


def _first_hot(needed_rate: float, gap: float, tau: float, min_writes: int) -> int:
    """The write at which a steady writer, one write every `gap` seconds, is hot: its decaying rate (writes per
    minute: the sum of exp(-age / tau) over its writes, times 60 / tau) reaches the threshold, and it has written
    `min_writes` times (-1: never)."""
    total, n = 0.0, 0
    while True:
        n += 1
        total = total * math.exp(-gap / tau) + 60.0 / tau
        if total >= needed_rate and n >= min_writes:
            return n
        if n > 10_000:
            return -1


HOT = {
    "5 writes a second": (0.2, 1),
    "2 writes a second": (0.5, 1),
    "1 write every 3 seconds (20/min: under 30/min)": (3.0, 1),
    "two writers, each 5 writes a second": (0.2, 2),
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_hot_loop_rule(name: str) -> None:
    gap, count = HOT[name]
    hot = DETECTION.hot_loop
    expected = _first_hot(hot.min_writes_per_minute, gap, hot.time_constant, hot.min_writes)
    attribution, state, event = _object()
    rule = HotLoopRule(DETECTION)
    writers = [A, B][:count]
    opened = None
    for n in range(1, 200):
        write = _write(state, n * gap, writers, [])
        write.changed = [FIELD]
        change = rule.observe(state, writers, write, event, attribution)
        if change is not None and change.kind is ChangeKind.OPENED:
            opened = n
            assert change.finding.type is FindingType.HOT_LOOP
            assert {c.writer for c in change.finding.writers} == set(writers)
            assert change.finding.fields == (FIELD,)
            break
    assert opened == (expected if 0 < expected < 200 else None)
    if gap >= 3.0:  # (20 writes a minute never reach the threshold)
        assert opened is None


def test_a_pause_of_two_time_constants_starts_a_new_streak() -> None:
    attribution, state, event = _object()
    settings = parse_config({"detection": {"hot_loop": {"min_writes": 40}}}, source="test").detection
    rule = HotLoopRule(settings)

    def write(at: float) -> FindingChange | None:
        return rule.observe(state, [A], _write(state, at, [A], []), event, attribution)

    at = 0.0
    for _ in range(39):  # fast enough (39 writes in 4 s), but one write short of a streak of 40
        at += 0.1
        assert write(at) is None
    at += 2 * settings.hot_loop.time_constant + 1  # the streak is over
    for _ in range(39):  # a new streak: 39 writes again, not 78
        at += 0.1
        assert write(at) is None
    change = write(at + 0.1)
    assert change is not None
    assert change.kind is ChangeKind.OPENED


def test_an_object_keeps_one_rate_per_writer_in_the_order_they_first_wrote() -> None:
    attribution, state, event = _object()
    rule = HotLoopRule(DETECTION)
    for n, writers in enumerate(([B], [A, B], [B], [C, A], [A]), start=1):
        rule.observe(state, writers, _write(state, float(n), writers, []), event, attribution)
    assert state.rates is not None
    assert [(r.writer, r.streak) for r in state.rates] == [(B, 3), (A, 3), (C, 1)]
    assert [r.start_seq for r in state.rates] == [1, 2, 4]  # (the write each streak began with)
