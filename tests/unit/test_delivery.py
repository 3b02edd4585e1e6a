"""Delivery: bounded queues per sink, oldest dropped first, retries with back-off, nothing ever blocks `submit`.

The sinks here are small in-test doubles (a recorder, one that fails, one that never answers): what is tested
is the queueing and retry policy; the real sinks meet real receivers in tests/e2e.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import pytest
from prometheus_client import CollectorRegistry

from tests.unit.captures import events
from watcher.config import Config, DeliverySettings
from watcher.delivery.dispatch import Change, Delivery, DeliveryError
from watcher.detection.engine import Engine
from watcher.metrics.exporter import Metrics
from watcher.model import FindingChange


def _changes() -> list[FindingChange]:
    engine = Engine(Config().detection)
    changes: list[FindingChange] = []
    for name in ("fight-data", "fight-three-writers", "hot-loop-timestamp"):
        for event in events(name, engine.decode):
            changes += engine.process(event)
    changes += engine.advance(max(f.last_seen for f in engine.active()) + 3600)
    assert len(changes) >= 8
    return changes


CHANGES = _changes()


@dataclass
class FakeSink:
    name: str
    fail: int = 0  # attempts that fail before one succeeds
    hang: bool = False
    permanent: bool = False
    batch_size: int = 1
    resend_interval: float | None = None
    per_incident: bool = False
    every_finding: bool = False
    sent: list[list[Change]] = field(default_factory=list)
    attempts: int = 0
    restarts: int = 0
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    def wants(self, change: Change) -> bool:  # noqa: ARG002
        return True

    def restart(self) -> None:
        self.restarts += 1

    async def send(self, changes: Sequence[Change]) -> None:
        self.attempts += 1
        if self.hang:
            await self.gate.wait()
        if self.permanent:
            raise DeliveryError("HTTP 400", retry=False)
        if self.fail:
            self.fail -= 1
            raise DeliveryError("HTTP 503")
        self.sent.append(list(changes))

    async def close(self) -> None:
        return None


def _settings(**overrides: object) -> DeliverySettings:
    base = {"queue_size": 3, "timeout": "0.2s", "attempts": 3, "backoff_initial": "0.01s", "backoff_max": "0.02s"}
    return DeliverySettings.model_validate(base | overrides)


def _metrics() -> tuple[CollectorRegistry, Metrics]:
    registry = CollectorRegistry()
    return registry, Metrics(registry)


async def _until(condition: Callable[[], object], deadline: float = 10.0) -> None:
    async with asyncio.timeout(deadline):
        while not condition():  # noqa: ASYNC110 - polls a plain condition against the deadline
            await asyncio.sleep(0.005)


async def test_a_hanging_sink_fills_only_its_own_queue_dropping_the_oldest() -> None:
    registry, metrics = _metrics()
    hanging, healthy = FakeSink("hanging", hang=True), FakeSink("healthy")
    delivery = Delivery([hanging, healthy], _settings(timeout="60s"), metrics=metrics)
    await delivery.start()
    for change in CHANGES:  # submit returns at once, whatever the sinks do; the healthy sink keeps up
        delivery.submit([change])
        await _until(lambda: delivery.pending("healthy") == 0)
    assert [c for batch in healthy.sent for c in batch] == CHANGES
    assert delivery.pending("hanging") == 4  # one in flight, a full queue of 3
    dropped = len(CHANGES) - 4
    assert (
        registry.get_sample_value("fightwatch_delivery_dropped_total", {"sink": "hanging", "reason": "queue_full"})
        == dropped
    )
    assert registry.get_sample_value("fightwatch_delivery_queue_length", {"sink": "hanging"}) == 4
    hanging.hang = False
    hanging.gate.set()
    await _until(lambda: delivery.pending("hanging") == 0)
    # The first change was in flight; of the rest, the newest three were kept: the oldest went first.
    assert [c for batch in hanging.sent for c in batch] == [CHANGES[0], *CHANGES[-3:]]
    await delivery.stop()


async def test_failures_are_retried_with_back_off_then_given_up_and_counted() -> None:
    registry, metrics = _metrics()
    flaky, broken = FakeSink("flaky", fail=2), FakeSink("broken", fail=1000)
    delivery = Delivery([flaky, broken], _settings(), metrics=metrics)
    await delivery.start()
    delivery.submit(CHANGES[:1])
    await _until(lambda: flaky.sent and broken.attempts == 3 and delivery.pending("broken") == 0)
    assert flaky.sent == [CHANGES[:1]]
    assert registry.get_sample_value("fightwatch_delivery_sent_total", {"sink": "flaky"}) == 1
    assert registry.get_sample_value("fightwatch_delivery_failures_total", {"sink": "flaky"}) == 2
    assert registry.get_sample_value("fightwatch_delivery_failures_total", {"sink": "broken"}) == 3
    assert registry.get_sample_value("fightwatch_delivery_dropped_total", {"sink": "broken", "reason": "attempts"}) == 1
    assert registry.get_sample_value("fightwatch_delivery_sent_total", {"sink": "broken"}) == 0
    await delivery.stop()


async def test_a_refused_change_is_not_retried() -> None:
    registry, metrics = _metrics()
    refusing = FakeSink("refusing", permanent=True)
    delivery = Delivery([refusing], _settings(), metrics=metrics)
    await delivery.start()
    delivery.submit(CHANGES[:2])
    await _until(lambda: refusing.attempts == 2 and delivery.pending("refusing") == 0)
    assert (
        registry.get_sample_value("fightwatch_delivery_dropped_total", {"sink": "refusing", "reason": "rejected"}) == 2
    )
    await delivery.stop()


async def test_a_hanging_attempt_times_out_and_counts_as_a_failure() -> None:
    registry, metrics = _metrics()
    hanging = FakeSink("hanging", hang=True)
    delivery = Delivery([hanging], _settings(timeout="0.05s", attempts=2), metrics=metrics)
    await delivery.start()
    delivery.submit(CHANGES[:1])
    await _until(lambda: delivery.pending("hanging") == 0)
    assert hanging.attempts == 2
    assert registry.get_sample_value("fightwatch_delivery_failures_total", {"sink": "hanging"}) == 2
    await delivery.stop()


async def test_batches_and_the_periodic_resend_of_a_stateful_sink() -> None:
    stateful = FakeSink("stateful", batch_size=100, resend_interval=0.02)
    delivery = Delivery([stateful], _settings(queue_size=100))
    delivery.submit(CHANGES)  # queued before the worker starts: one batch
    await delivery.start()
    await _until(lambda: len(stateful.sent) >= 3)
    assert stateful.sent[0] == CHANGES
    assert stateful.sent[1:3] == [[], []]  # re-sends while idle
    await delivery.stop()


async def test_stop_drains_what_is_queued_then_gives_up_on_the_rest() -> None:
    registry, metrics = _metrics()
    slow, stuck = FakeSink("slow"), FakeSink("stuck", hang=True)
    delivery = Delivery([slow, stuck], _settings(timeout="60s"), metrics=metrics)
    await delivery.start()
    delivery.submit(CHANGES[:2])
    await delivery.stop(drain=0.2)
    assert sum(len(b) for b in slow.sent) == 2
    assert registry.get_sample_value("fightwatch_delivery_dropped_total", {"sink": "stuck", "reason": "stopped"}) == 2


async def test_a_paused_delivery_sends_nothing_and_resumes_with_the_catch_up_only() -> None:
    """A standby (or a leader that lost its Lease) delivers nothing; the new leader's catch-up comes first."""
    _, metrics = _metrics()
    sink = FakeSink("events", batch_size=100)
    delivery = Delivery([sink], _settings(queue_size=100), metrics=metrics)
    await delivery.start(paused=True)
    delivery.submit(CHANGES[:3])  # a standby's changes: not queued at all
    assert delivery.pending("events") == 0
    catch_up = [FindingChange(c.kind, c.finding, catch_up=True) for c in CHANGES[-2:]]
    delivery.resume(catch_up)
    assert sink.restarts == 1  # told to forget what it delivered before
    await _until(lambda: delivery.pending("events") == 0)
    assert [c for batch in sink.sent for c in batch] == catch_up
    await delivery.stop()


async def test_pausing_stops_at_once_and_counts_what_was_queued() -> None:
    registry, metrics = _metrics()
    stuck = FakeSink("stuck", hang=True)
    delivery = Delivery([stuck], _settings(timeout="60s"), metrics=metrics)
    await delivery.start()
    delivery.submit(CHANGES[:3])
    await _until(lambda: stuck.attempts == 1)  # one in flight, two queued
    delivery.pause()  # the Lease was lost: the attempt in flight is abandoned, the queue dropped
    assert delivery.pending("stuck") == 0
    labels = {"sink": "stuck", "reason": "lost_leadership"}
    assert registry.get_sample_value("fightwatch_delivery_dropped_total", labels) == 3
    delivery.submit(CHANGES[3:4])
    assert delivery.pending("stuck") == 0
    stuck.hang = False
    stuck.gate.set()
    await asyncio.sleep(0)  # (the cancelled attempt ends)
    assert stuck.sent == []
    await delivery.stop(drain=0.1)


def test_sink_names_are_unique() -> None:
    with pytest.raises(ValueError, match="same name"):
        Delivery([FakeSink("x"), FakeSink("x")], _settings())


async def test_a_finding_that_follows_from_another_is_not_delivered() -> None:
    sink = FakeSink("sink", batch_size=100)
    delivery = Delivery([sink], _settings(queue_size=100))
    root = CHANGES[0]
    other = next(c for c in CHANGES if c.finding.id != root.finding.id)
    cascade = replace(other, finding=replace(other.finding, related=root.finding.id))
    delivery.submit([root, cascade])
    await delivery.start()
    await _until(lambda: sink.sent)
    assert sink.sent[0] == [root]  # its root cause is told; it is not
    await delivery.stop()
