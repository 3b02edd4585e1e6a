"""What the live watcher keeps as plain numbers, read into the collected metric families at scrape time.

The parts are stand-ins with the numbers the real ones keep (a running watcher's scrapes: tests/integration).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from prometheus_client import CollectorRegistry

from watcher.config import Config, ServeSettings
from watcher.detection.engine import Stats
from watcher.detection.request_engine import RequestEngine
from watcher.metrics.exporter import Metrics, Samples, exposition
from watcher.metrics.samples import (
    audit_samples,
    cluster_samples,
    engine_samples,
    event_loop_samples,
    recording_samples,
    serving_samples,
)
from watcher.recording import Recording
from watcher.serving.endpoints import ServedRequests
from watcher.serving.security import ServingSecurity
from watcher.sources.audit_webhook import AuditReceiver
from watcher.sources.watch import State


def _watch(group: str, plural: str, state: State, objects: int) -> SimpleNamespace:
    return SimpleNamespace(
        key=(group, plural), status=SimpleNamespace(state=state, objects=objects, lists=1, bytes=1000)
    )


def _cluster() -> Any:
    """Two namespaces' watches of ConfigMaps (one retrying), one of Deployments."""
    return SimpleNamespace(
        discovery=SimpleNamespace(ok=True, passes=2, errors=1, resources=40),
        ready=lambda: True,
        watches=[
            _watch("", "configmaps", State.WATCHING, 3),
            _watch("", "configmaps", State.RETRYING, 2),
            _watch("apps", "deployments", State.WATCHING, 1),
        ],
    )


async def _post(path: str, body: dict[str, Any]) -> Any:
    raise AssertionError(f"no review asked here: {path} {body}")


def _reader(samples: Samples) -> Callable[[], Samples]:
    return lambda: samples


def test_the_watches_of_one_resource_add_up_and_every_state_has_its_series() -> None:
    samples = cluster_samples(_cluster())
    watches = dict(samples["fightwatch_watches"])
    assert len(watches) == 2 * len(State)  # (a state no watch is in reads 0)
    assert watches[("", "configmaps", "watching")] == watches[("", "configmaps", "retrying")] == 1
    assert watches[("", "configmaps", "pending")] == 0
    assert dict(samples["fightwatch_watch_objects"]) == {("", "configmaps"): 5, ("apps", "deployments"): 1}
    assert dict(samples["fightwatch_watch_received_bytes"])[("", "configmaps")] == 2000
    assert dict(samples["fightwatch_ready"]) == {(): 1}


def test_before_the_cluster_watch_starts_the_watcher_is_not_ready() -> None:
    assert cluster_samples(None) == {"fightwatch_ready": [((), 0.0)]}


def test_every_invalid_event_is_an_engine_outcome_and_the_limit_is_read_only_when_set() -> None:
    samples = engine_samples(Stats(writes=4), invalid=2, max_objects=None)
    outcomes = dict(samples["fightwatch_engine_events"])
    assert (outcomes[("write",)], outcomes[("invalid",)]) == (4, 2)
    assert "fightwatch_tracked_objects_limit" not in samples
    assert engine_samples(Stats(), invalid=0, max_objects=10)["fightwatch_tracked_objects_limit"] == [((), 10)]


def test_every_part_reads_into_collected_families_of_the_table() -> None:
    """A scrape fails on a name that is not a collected family: each reader, with every part there, is scraped."""
    config = Config()
    receiver = AuditReceiver(config.audit_webhook)
    recording = cast(Recording, SimpleNamespace(events=3, bytes_written=300))  # (a real one opens its file)
    readers: list[Samples] = [
        event_loop_samples(0.1),
        engine_samples(Stats(), invalid=0, max_objects=100),
        audit_samples(receiver, RequestEngine(config.detection)),
        serving_samples(ServedRequests(), ServingSecurity(ServeSettings(), _post)),
        recording_samples(recording),
        cluster_samples(_cluster()),
    ]
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    for samples in readers:
        metrics.read_at_scrape(_reader(samples))
    body, _ = exposition(registry, None)
    for name in ("fightwatch_event_loop_lag_seconds", "fightwatch_audit_batches_total", "fightwatch_ready"):
        assert f"\n{name}" in body.decode()
