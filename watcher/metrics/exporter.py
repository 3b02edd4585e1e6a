"""Prometheus metrics: finding changes, writes and the watcher's own health, as prometheus-client series.

The families are declared in `metric_families`; this module only feeds them. Every series set is bounded:
managers beyond the top-K write as `other`, per-object series exist only for active findings (capped, most
severe first, computed at scrape time), incident series only for active incidents (capped, most objects first),
label values that carry lists are cut to a maximum length, and the series of a resource that is no longer watched
are removed.

The service calls the small typed entry points below from its event loop: `on_changes` and `count_write`
from detection, `observe_event`, `watch_restart`, `watch_error`, `set_resources` and `set_tracked` from the
watch loop; `Delivery` reports through `delivery_*`. What the watcher counts as plain numbers on its hot path
(bytes received, watch states, the engine's outcomes) it hands over at scrape time through `read_at_scrape`,
under the names of collected families of the same table.
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections import Counter as Tally
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from watcher.config import MetricsSettings
from watcher.detection.incidents import group, incident_id
from watcher.metrics.families import BY_NAME, FAMILIES, Family
from watcher.model import (
    ChangeKind,
    Finding,
    FindingChange,
    FindingState,
    FindingType,
    ObjectRef,
    ResourceKey,
    Writer,
)
from watcher.rendering.output import severity_order

# No `_created` series: they double every counter's series and read like names of their own
# (`fightwatch_findings_created`). Process-wide in prometheus-client, and set before any metric is made.
disable_created_metrics()  # type: ignore[no-untyped-call]  # (untyped in prometheus-client)


Samples = Mapping[str, Iterable[tuple[Sequence[str], float]]]
"""Family name -> (label values, value) pairs: what a `read_at_scrape` reader returns."""

OTHER = "other"
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")
RESTART_REASONS = (
    "initial",  # the first watch of a resource
    "timeout",  # the server ended the watch at its timeoutSeconds
    "expired",  # 410 Gone: the resourceVersion is too old, relisted
    "error",  # an HTTP error or an ERROR event
    "network",  # the connection dropped or failed
    "stalled",  # nothing received for too long
    "discovery",  # API discovery changed what is watched
)
ERROR_CODES = ("network", "internal", "unknown")  # watch_error codes that are not HTTP statuses
LEADER_CHANGES = ("acquired", "lost", "released")
DROP_REASONS = ("queue_full", "attempts", "rejected", "stopped", "lost_leadership")


def new_registry() -> CollectorRegistry:
    """Make the registry `/metrics` serves.

    It holds the process, platform and GC collectors, and then `Metrics` its families.
    """
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def package_version() -> str:
    try:
        return importlib.metadata.version("fightwatch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """Return the body and content type of a scrape of `registry` (OpenMetrics when the scraper asks for it)."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


HINT_LENGTH = 1024  # hints are sentences; one label per active finding, capped like the other per-object series


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit - 1` characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def writer_label(writer: Writer) -> str:
    """`manager(Operation)` or `manager(Operation/subresource)`; `(unattributed)` for writes nobody owns."""
    if writer.manager is None:
        return "(unattributed)"
    detail = "/".join(p for p in (writer.operation, writer.subresource) if p)
    return f"{writer.manager}({detail})" if detail else writer.manager


class ManagerLabels:
    """Bounds the `manager` label: the K managers that write most (lately) keep their name, the rest are `other`.

    A Space-Saving sketch of 4K entries counts writes per manager in bounded memory; each entry also keeps the
    count it inherited when it replaced another (its possible overestimate), so a newcomer is judged by what
    it certainly wrote. Counts are halved every `decay_every` writes, so they follow what writes now; the
    ranking is revisited every `rerank_every` writes by managers without a place. Until K managers
    are admitted, every new manager is; after that a manager takes the place of the weakest admitted one only
    when it certainly wrote at least twice as much (hysteresis: similar managers do not swap series back and
    forth). `on_evict` gets a manager that lost its place, so its series can be removed.
    """

    def __init__(
        self, k: int, on_evict: Callable[[str], None], *, rerank_every: int = 4096, decay_every: int = 1 << 16
    ) -> None:
        self.k = k
        self._on_evict = on_evict
        self._capacity = 4 * k
        self._counts: dict[str, list[float]] = {}  # manager -> [count, overestimate]
        self.admitted: set[str] = set()
        self._rerank_every = rerank_every
        self._since_rerank = 0
        self._decay_every = decay_every
        self._since_decay = 0

    def label(self, manager: str) -> str:
        self._count(manager)
        self._since_decay += 1
        if self._since_decay >= self._decay_every:
            self._since_decay = 0
            for entry in self._counts.values():
                entry[0] /= 2
                entry[1] /= 2
        if manager in self.admitted:
            return manager
        if len(self.admitted) < self.k:
            self.admitted.add(manager)
            return manager
        self._since_rerank += 1
        if self._since_rerank >= self._rerank_every:
            self.rerank()
        return manager if manager in self.admitted else OTHER

    def _count(self, manager: str) -> None:
        counts = self._counts
        entry = counts.get(manager)
        if entry is not None:
            entry[0] += 1
        elif len(counts) < self._capacity:
            counts[manager] = [1.0, 0.0]
        else:  # Space-Saving: the newcomer replaces the smallest count and inherits it as its overestimate
            weakest = min((m for m in counts if m not in self.admitted), key=lambda m: counts[m][0], default=None)
            if weakest is not None:
                floor = counts.pop(weakest)[0]
                counts[manager] = [floor + 1, floor]

    def rerank(self) -> None:
        self._since_rerank = 0
        counts = self._counts

        def certain(manager: str) -> float:
            count, over = counts.get(manager, (0.0, 0.0))
            return count - over

        contenders = sorted((m for m in counts if m not in self.admitted), key=certain, reverse=True)
        for manager in contenders:
            weakest = min(self.admitted, key=lambda m: counts.get(m, [0.0])[0])
            if certain(manager) < max(2 * counts.get(weakest, [0.0])[0], 2):
                break
            self.admitted.discard(weakest)
            self.admitted.add(manager)
            self._on_evict(weakest)


class Metrics:
    """All of fightwatch's metric families in one registry (a fresh `CollectorRegistry` in tests)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        settings: MetricsSettings | None = None,
        *,
        active: Callable[[], Iterable[Finding]] | None = None,
        shard: int = 0,
        total_shards: int = 1,
        engine: str = "python",
        alerts_per: str = "incident",
    ) -> None:
        """Register the metric families on `registry`.

        `active`: where scrapes read the active findings, current to the last write (`Engine.active`); without it,
        the snapshots of the last changes passed to `on_changes`, which the engine only emits on notable changes (so
        handovers and rates lag). `shard` labels the per-finding series; `engine` names the engine's attribution
        implementation (`native` or `python`) in `fightwatch_build_info`; `alerts_per`: `delivery.per`, for
        `fightwatch_alerting_info`.
        """
        self.registry = registry
        self.settings = settings or MetricsSettings()
        self.active = active
        self.shard = str(shard)
        self._direct: dict[str, Any] = {}
        for family in FAMILIES:
            if not family.collected:
                self._direct[family.name] = _make(family, registry)
        self._writes: Counter = self._direct["fightwatch_writes"]
        self._findings: Counter = self._direct["fightwatch_findings"]
        self._client_conflicts: Counter = self._direct["fightwatch_client_conflicts"]
        self._events: Counter = self._direct["fightwatch_events"]
        self._restarts: Counter = self._direct["fightwatch_watch_restarts"]
        self._errors: Counter = self._direct["fightwatch_watch_errors"]
        self._resources: Gauge = self._direct["fightwatch_resources"]
        self._tracked: Gauge = self._direct["fightwatch_tracked_objects"]
        self._duration: Histogram = self._direct["fightwatch_event_processing_duration_seconds"]
        self._lag: Histogram = self._direct["fightwatch_event_lag_seconds"]
        self._last_event: Gauge = self._direct["fightwatch_last_event_timestamp_seconds"]
        self._sent: Counter = self._direct["fightwatch_delivery_sent"]
        self._failures: Counter = self._direct["fightwatch_delivery_failures"]
        self._dropped: Counter = self._direct["fightwatch_delivery_dropped"]
        self._direct["fightwatch_build_info"].labels(package_version(), platform.python_version(), engine).set(1)
        self._direct["fightwatch_shard_info"].labels(self.shard, str(total_shards)).set(1)
        self._direct["fightwatch_alerting_info"].labels(alerts_per).set(1)
        self._leader: Gauge = self._direct["fightwatch_leader"]
        self._leader_changes: Counter = self._direct["fightwatch_leader_changes"]
        self._leader.set(1)  # (until leader election says otherwise)
        for change in LEADER_CHANGES:
            self._leader_changes.labels(change)
        for state in ("watched", "forbidden"):
            self._resources.labels(state).set(0)
        self._active: dict[str, Finding] = {}
        self._queues: dict[str, Callable[[], int]] = {}
        self._readers: list[Callable[[], Samples]] = []
        self._write_children: dict[tuple[str, ...], Any] = {}
        self._series_by_manager: dict[str, set[tuple[str, ...]]] = {}
        self._managers = ManagerLabels(self.settings.top_managers, self._forget_manager)
        self._conflict_managers = ManagerLabels(self.settings.top_managers, self._forget_conflict_manager)
        self._conflict_children: dict[tuple[str, str], Any] = {}
        self._resource_series: dict[ResourceKey, set[tuple[Any, tuple[str, ...]]]] = {}
        self._event_children: dict[tuple[ResourceKey, str], tuple[Any, Any]] = {}
        registry.register(_Collected(self))

    # ------------------------------------------------------------------------------------------ detection

    def on_changes(self, changes: Iterable[FindingChange]) -> None:
        """Follow the engine's finding changes: count opened findings, keep the active set for scrapes."""
        for change in changes:
            finding = change.finding
            if change.kind is ChangeKind.RESOLVED or finding.state is FindingState.RESOLVED:
                self._active.pop(finding.id, None)
                continue
            if change.kind is ChangeKind.OPENED:
                ref = finding.object
                self._findings.labels(finding.type.value, ref.group, ref.kind or ref.resource).inc()
            self._active[finding.id] = finding

    def count_write(self, ref: ObjectRef, writers: Sequence[Writer]) -> None:
        """One write to `ref`, attributed to `writers` (several when one write advanced several entries)."""
        namespace = (ref.namespace or "") if self.settings.writes_namespace_label else ""
        for writer in writers:
            manager = "" if writer.manager is None else self._managers.label(writer.manager)
            key = (ref.group, ref.kind, namespace, manager, writer.operation)
            child = self._write_children.get(key)
            if child is None:
                child = self._write_children[key] = self._writes.labels(*key)
                self._series_by_manager.setdefault(manager, set()).add(key)
            child.inc()

    def count_conflict(self, manager: str, reason: str) -> None:
        """Count one write by a client under `manager` rejected with 409 (`reason`: version or apply).

        The managers are labelled top-K by name, like the writes.
        """
        key = (self._conflict_managers.label(manager), reason)
        child = self._conflict_children.get(key)
        if child is None:
            child = self._conflict_children[key] = self._client_conflicts.labels(*key)
        child.inc()

    def _forget_conflict_manager(self, manager: str) -> None:
        for key in [k for k in self._conflict_children if k[0] == manager]:
            del self._conflict_children[key]
            self._client_conflicts.remove(*key)

    def _forget_manager(self, manager: str) -> None:
        for key in self._series_by_manager.pop(manager, ()):
            self._write_children.pop(key, None)
            self._writes.remove(*key)

    # ----------------------------------------------------------------------------------------- watch loop

    def observe_event(
        self,
        resource: ResourceKey,
        event_type: str,
        *,
        duration: float,
        lag: float | None,
        received_at: float | None = None,
    ) -> None:
        """Count one watch event of `resource`, processed in `duration` seconds.

        `lag`: receive time minus its object's newest managedFields time (None when the object has none).
        """
        children = self._event_children.get((resource, event_type))
        if children is None:  # (once per resource and type: label lookups cost more than the updates)
            group, plural = resource
            kind = event_type if event_type in EVENT_TYPES else OTHER
            children = (self._events.labels(group, plural, kind), self._last_event.labels(group, plural))
            self._event_children[(resource, event_type)] = children
            self._note(resource, self._last_event, (group, plural))
            self._note(resource, self._events, (group, plural, kind))
        children[0].inc()
        children[1].set(time.time() if received_at is None else received_at)
        self._duration.observe(duration)
        if lag is not None:
            self._lag.observe(max(lag, 0.0))

    def watch_restart(self, resource: ResourceKey, reason: str) -> None:
        """Count a (re)start of a watch of `resource`.

        `reason` is one of RESTART_REASONS (others count as `other`).
        """
        labels = (*resource, reason if reason in RESTART_REASONS else OTHER)
        self._restarts.labels(*labels).inc()
        self._note(resource, self._restarts, labels)

    def watch_error(self, resource: ResourceKey, code: int | str | None) -> None:
        """Count a list or watch of `resource` that failed with HTTP status `code`.

        `code` is None without an HTTP answer; else one of ERROR_CODES.
        """
        if code is None:
            label = "network"
        elif isinstance(code, int):
            label = str(code) if 100 <= code <= 599 else OTHER
        else:
            label = code if code in ERROR_CODES else OTHER
        labels = (*resource, label)
        self._errors.labels(*labels).inc()
        self._note(resource, self._errors, labels)

    def set_resources(self, watched: Collection[ResourceKey], forbidden: Collection[ResourceKey]) -> None:
        """Record what API discovery found: the resources watched now and those the RBAC forbids listing/watching.

        Every watched resource gets its `fightwatch_events_total` series at 0, so "no events" is a value an
        alert can compare; the series of resources neither watched nor forbidden any more are removed (a
        forbidden resource keeps its error counts, for FightwatchWatchErrors).
        """
        self._resources.labels("watched").set(len(watched))
        self._resources.labels("forbidden").set(len(forbidden))
        for resource in set(self._resource_series) - set(watched) - set(forbidden):
            for metric, labels in self._resource_series.pop(resource):
                metric.remove(*labels)
            for key in [k for k in self._event_children if k[0] == resource]:
                del self._event_children[key]
        for resource in watched:
            for kind in ("ADDED", "MODIFIED", "DELETED"):
                labels = (*resource, kind)
                self._events.labels(*labels)
                self._note(resource, self._events, labels)

    def set_tracked(self, objects: int) -> None:
        """Objects the engine holds state for (`Engine.tracked_objects`)."""
        self._tracked.set(objects)

    # ------------------------------------------------------------------------------------ leader election

    def set_leader(self, leading: bool) -> None:
        """Whether this replica delivers now (holds the Lease, or leader election is off)."""
        self._leader.set(1 if leading else 0)

    def leader_change(self, change: str) -> None:
        """`acquired`, `lost` or `released` (one of LEADER_CHANGES)."""
        self._leader_changes.labels(change if change in LEADER_CHANGES else OTHER).inc()

    def _note(self, resource: ResourceKey, metric: Any, labels: tuple[str, ...]) -> None:
        self._resource_series.setdefault(resource, set()).add((metric, labels))

    # ------------------------------------------------------------------------------------------- delivery

    def delivery_queue(self, sink: str, length: Callable[[], int]) -> None:
        """Expose the length of a sink's queue (read at scrape time); start its counters at 0."""
        self._queues[sink] = length
        self._sent.labels(sink)
        self._failures.labels(sink)
        for reason in DROP_REASONS:
            self._dropped.labels(sink, reason)

    def delivery_sent(self, sink: str, changes: int = 1) -> None:
        self._sent.labels(sink).inc(changes)

    def delivery_failed(self, sink: str) -> None:
        self._failures.labels(sink).inc()

    def delivery_dropped(self, sink: str, reason: str, changes: int = 1) -> None:
        self._dropped.labels(sink, reason).inc(changes)

    # ------------------------------------------------------------------------------------ at scrape time

    def read_at_scrape(self, reader: Callable[[], Samples]) -> None:
        """Have every scrape add `reader()`'s samples to the collected families they name.

        A name that is not a collected family of the table is a bug, and fails the scrape.
        """
        self._readers.append(reader)

    def collect(self) -> Iterator[Metric]:
        active = list(self.active() if self.active is not None else self._active.values())
        by_type = Tally(f.type.value for f in active)
        families = {name: _family(BY_NAME[name]) for name in _COLLECTED}
        for kind in FindingType:
            families["fightwatch_findings_active"].add_metric([kind.value], by_type[kind.value])
        cap = self.settings.max_finding_series
        roots = [f for f in active if f.related is None]  # (a finding that follows from another has no series)
        shown = severity_order(roots)[:cap]
        families["fightwatch_finding_series_omitted"].add_metric([], len(roots) - len(shown))
        limit = self.settings.max_label_length
        for finding in shown:
            ref = finding.object
            ids = [finding.type.value, ref.group, ref.kind or ref.resource, ref.namespace or "", ref.name, self.shard]
            # (By name, not by writes: an order by writes flips with every write of two alternating writers,
            # and each new label set would restart the `for:` of the alert rules.)
            writers = cut(",".join(sorted(writer_label(c.writer) for c in finding.writers)), limit)
            fields = cut(",".join(finding.fields), limit)
            families["fightwatch_finding_info"].add_metric([*ids, incident_id(finding), writers, fields], 1)
            families["fightwatch_finding_hint_info"].add_metric([*ids, cut(finding.hint, HINT_LENGTH)], 1)
            families["fightwatch_finding_handovers"].add_metric(ids, finding.handovers)
            families["fightwatch_finding_writes_per_minute"].add_metric(ids, finding.writes_per_minute)
        self._incident_series(families, roots)
        for sink, length in self._queues.items():
            families["fightwatch_delivery_queue_length"].add_metric([sink], length())
        for reader in self._readers:
            for name, samples in reader().items():
                family = families.get(name)
                if family is None:
                    raise ValueError(f"{name} is not a collected family of metric_families.FAMILIES")
                for labels, value in samples:
                    family.add_metric(list(labels), value)
        yield from families.values()

    def _incident_series(self, families: dict[str, Any], roots: list[Finding]) -> None:
        """Add the series of the active incidents (capped, most objects first).

        Their labels are the same on every shard and replica (the writers and fields of the pattern, by name).
        """
        incidents = group(roots)
        cap = self.settings.max_incident_series
        families["fightwatch_incident_series_omitted"].add_metric([], max(len(incidents) - cap, 0))
        limit = self.settings.max_label_length
        for incident in incidents[:cap]:
            ids = [incident.type.value, incident.id, self.shard]
            writers = cut(",".join(sorted(writer_label(c.writer) for c in incident.writers)), limit)
            families["fightwatch_incident_info"].add_metric([*ids, writers, cut(",".join(incident.fields), limit)], 1)
            families["fightwatch_incident_objects"].add_metric(ids, incident.objects)
            families["fightwatch_incident_writes_per_minute"].add_metric(ids, incident.writes_per_minute)


_COLLECTED = tuple(f.name for f in FAMILIES if f.collected)


def _make(family: Family, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
    if family.type == "counter":
        return Counter(family.name, family.help, family.labels, registry=registry)
    if family.type == "histogram":
        return Histogram(family.name, family.help, family.labels, registry=registry, buckets=family.buckets)
    return Gauge(family.name, family.help, family.labels, registry=registry)


def _family(family: Family) -> CounterMetricFamily | GaugeMetricFamily:
    if family.type == "counter":
        return CounterMetricFamily(family.name, family.help, labels=family.labels)
    return GaugeMetricFamily(family.name, family.help, labels=family.labels)


class _Collected:
    """The registry's view of the families computed at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.collect()

    def describe(self) -> Iterator[Metric]:
        return iter([_family(BY_NAME[name]) for name in _COLLECTED])


__all__ = [
    "ERROR_CODES",
    "LEADER_CHANGES",
    "RESTART_REASONS",
    "ManagerLabels",
    "Metrics",
    "ResourceKey",
    "Samples",
    "exposition",
    "new_registry",
    "package_version",
]
