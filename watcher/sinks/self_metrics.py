"""`/metrics`: the watcher's own metrics, declared in one table and read at scrape time.

The watch loop only bumps plain counters on its hot path; this collector turns them into Prometheus families
when Prometheus asks, so no metric library runs per event. Findings metrics come with the metrics issue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Family:
    name: str  # counters without the _total suffix (the exposition adds it)
    type: Literal["counter", "gauge"]
    help: str
    labels: tuple[str, ...] = ()


FAMILIES: tuple[Family, ...] = (
    Family("fightwatch_build_info", "gauge", "Always 1; the version of this fightwatch.", ("version",)),
    Family("fightwatch_ready", "gauge", "1 when every resource that may be watched is listed and watched."),
    Family("fightwatch_event_loop_lag_seconds", "gauge", "How late the last one-second tick of the event loop ran."),
    Family("fightwatch_discovery_ok", "gauge", "1 when the last API discovery pass succeeded."),
    Family("fightwatch_discovery_passes", "counter", "API discovery passes that succeeded."),
    Family("fightwatch_discovery_errors", "counter", "API discovery passes that failed."),
    Family("fightwatch_discovered_resources", "gauge", "Served resources that support list and watch."),
    Family("fightwatch_watched_resources", "gauge", "Resources watched (after allowlist and denylist)."),
    Family(
        "fightwatch_watch_state", "gauge", "1 for the current state of each resource's watch.", ("resource", "state")
    ),
    Family(
        "fightwatch_watch_events", "counter", "Watch events received; list items count as ADDED.", ("resource", "type")
    ),
    Family("fightwatch_watch_bytes", "counter", "Bytes received by lists and watches.", ("resource",)),
    Family("fightwatch_watch_lists", "counter", "Lists completed, the first and relists.", ("resource",)),
    Family("fightwatch_watch_relists", "counter", "Relists after 410 Gone (resourceVersion too old).", ("resource",)),
    Family(
        "fightwatch_watch_rewatches", "counter", "Watches the server ended (timeout) and that resumed.", ("resource",)
    ),
    Family("fightwatch_watch_errors", "counter", "List and watch failures by kind.", ("resource", "failure")),
    Family("fightwatch_watch_objects", "gauge", "Objects known by each resource's watch.", ("resource",)),
    Family("fightwatch_engine_events", "counter", "Events analysed by the detection engine."),
    Family("fightwatch_engine_writes", "counter", "Writes (MODIFIED events that changed the object) analysed."),
    Family("fightwatch_engine_unattributed_writes", "counter", "Writes no managedFields entry explains."),
    Family("fightwatch_engine_ignored_events", "counter", "Events of objects ignored by rules (Leases, ...)."),
    Family("fightwatch_engine_duplicate_events", "counter", "Events of an object version already analysed."),
    Family("fightwatch_engine_resynced_objects", "counter", "Objects re-read by a relist (not counted as writes)."),
    Family("fightwatch_engine_invalid_events", "counter", "Events the engine rejected (logged)."),
    Family("fightwatch_engine_tracked_objects", "gauge", "Objects the engine keeps state for."),
    Family("fightwatch_recording_events", "counter", "Events written to the --record file."),
    Family("fightwatch_recording_bytes", "counter", "Bytes written to the --record file."),
)

Samples = Mapping[str, Iterable[tuple[Sequence[str], float]]]


class SelfCollector(Collector):
    """Every family of FAMILIES, with the samples `read()` returns for it at scrape time."""

    def __init__(self, read: Callable[[], Samples]) -> None:
        self._read = read

    def describe(self) -> Iterator[Metric]:
        """The families without samples (so that registering does not read anything yet)."""
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        return self._families(self._read())

    @staticmethod
    def _families(samples: Samples) -> Iterator[Metric]:
        for family in FAMILIES:
            metric: CounterMetricFamily | GaugeMetricFamily
            if family.type == "counter":
                metric = CounterMetricFamily(family.name, family.help, labels=family.labels)
            else:
                metric = GaugeMetricFamily(family.name, family.help, labels=family.labels)
            for labels, value in samples.get(family.name, ()):
                metric.add_metric(list(labels), value)
            yield metric


def new_registry(read: Callable[[], Samples]) -> CollectorRegistry:
    """A registry with the process metrics (CPU, memory, GC) and the watcher's own."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(SelfCollector(read))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
