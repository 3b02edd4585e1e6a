"""Delivery that follows leadership: the catch-up a new leader delivers first, and the gate that resumes delivery
when this replica starts leading and pauses it when it stops.

(The election itself runs against the real kube-apiserver in tests/integration/test_high_availability.py.)
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from tests.unit.captures import events
from watcher.config import Config, DeliverySettings
from watcher.delivery.dispatch import Delivery
from watcher.detection.engine import Engine
from watcher.leadership.gate import DeliveryGate, catch_up
from watcher.leadership.lease import LeaderChange
from watcher.metrics.exporter import LEADER_CHANGES, Metrics
from watcher.model import ChangeKind, FindingChange


def _engine() -> Engine:
    engine = Engine(Config().detection)
    for name in ("fight-data", "fight-three-writers", "hot-loop-timestamp"):
        for event in events(name, engine.decode):
            engine.process(event)
    return engine


class _Delivery(Delivery):
    """What the gate does to delivery, in order (a delivery to no sink, that records its calls instead)."""

    def __init__(self) -> None:
        super().__init__([], DeliverySettings())
        self.calls: list[tuple[str, list[FindingChange]]] = []

    def pause(self) -> None:
        self.calls.append(("pause", []))

    def resume(self, catch_up: Sequence[FindingChange]) -> None:
        self.calls.append(("resume", list(catch_up)))


def test_a_new_leader_catches_up_on_what_a_previous_leader_may_not_have_told() -> None:
    """Every active finding again (opened if it opened after `since`), and what resolved after `since`."""
    engine = _engine()
    active = engine.active()
    first = min(f.detected_at for f in active)
    engine.advance(first + 1)
    everything = catch_up(engine, None)  # no leader was ever seen
    assert {c.kind for c in everything} == {ChangeKind.OPENED}
    assert all(c.catch_up for c in everything)
    later = catch_up(engine, max(f.detected_at for f in active) + 1)  # all found before the last leader stopped
    assert [c.kind for c in later] == [ChangeKind.UPDATED] * len(active)
    closed = engine.advance(max(f.last_seen for f in active) + 3600)  # all resolve while nobody leads
    assert len(closed) == len(active)
    after = catch_up(engine, max(f.last_seen for f in active))
    assert [c.kind for c in after] == [ChangeKind.RESOLVED] * len(active)
    assert catch_up(engine, max(f.resolved_at or 0 for f in engine.resolved()) + 1) == []


def test_delivery_resumes_with_the_catch_up_when_leading_starts_and_pauses_when_it_ends() -> None:
    engine = _engine()
    registry = CollectorRegistry()
    delivery = _Delivery()
    gate = DeliveryGate(delivery, metrics=Metrics(registry), findings=engine)

    def leader() -> tuple[float | None, ...]:
        changes = (registry.get_sample_value("fightwatch_leader_changes_total", {"change": c}) for c in LEADER_CHANGES)
        return (registry.get_sample_value("fightwatch_leader"), *changes)

    gate.on_change(LeaderChange(leading=True, since=None))
    assert delivery.calls == [("resume", catch_up(engine, None))]
    assert leader() == (1, 1, 0, 0)
    gate.on_change(LeaderChange(leading=False, reason="lost"))
    assert delivery.calls[-1] == ("pause", [])
    assert leader() == (0, 1, 1, 0)
    gate.on_change(LeaderChange(leading=True, since=0.0))
    gate.on_change(LeaderChange(leading=False, reason="released"))
    assert [call for call, _ in delivery.calls] == ["resume", "pause", "resume", "pause"]
    assert leader() == (0, 2, 1, 1)
