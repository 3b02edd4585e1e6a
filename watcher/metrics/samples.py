"""The live watcher's numbers as samples of the collected metric families, read at scrape time.

On its hot path the watcher keeps what changes per event, chunk or object as plain numbers in the parts that count
it (the engine's outcomes, the bytes, lists and objects of each watch, the audit webhook's batches, requests
served, reviews asked): each function here reads one part's numbers into the families `metrics.families`
declares, and the service hands `Metrics.read_at_scrape` the lot. The numbers live in sources, sinks, serving and
detection alike, so this module sits above them all, beside the service.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from watcher.detection.engine import Stats
from watcher.detection.request_engine import RequestEngine
from watcher.metrics.exporter import Samples
from watcher.model import ResourceKey
from watcher.recording import Recording
from watcher.serving.endpoints import ServedRequests
from watcher.serving.security import ServingSecurity
from watcher.sources.cluster import ClusterWatch
from watcher.sources.watch import State

if TYPE_CHECKING:  # imported when the audit webhook is on (its parsers cost memory)
    from watcher.sources.audit_webhook import AuditReceiver

_NONE: tuple[str, ...] = ()  # (the label values of a family without labels)


def event_loop_samples(lag: float) -> Samples:
    """Read how late the event loop ran the last tick."""
    return {"fightwatch_event_loop_lag_seconds": [(_NONE, lag)]}


def engine_samples(stats: Stats, *, invalid: int, max_objects: int | None) -> Samples:
    """Read the engine's outcomes (`invalid`: events the engine never saw, refused on the way), evictions and limit."""
    outcomes = {
        "write": stats.writes,
        "new": stats.new_objects,
        "resynced": stats.resynced_objects,
        "duplicate": stats.duplicate_events,
        "ignored": stats.ignored_events,
        "deleted": stats.deleted_objects + stats.untracked_deletions,
        "invalid": invalid,
    }
    samples: dict[str, Iterable[tuple[Sequence[str], float]]] = {
        "fightwatch_engine_events": [((outcome,), float(n)) for outcome, n in outcomes.items()],
        "fightwatch_engine_evictions": [
            (("idle",), float(stats.evicted_idle)),
            (("capacity",), float(stats.evicted_capacity)),
        ],
    }
    if max_objects is not None:
        samples["fightwatch_tracked_objects_limit"] = [(_NONE, float(max_objects))]
    return samples


def audit_samples(receiver: AuditReceiver, requests: RequestEngine) -> Samples:
    """Read the audit webhook's batches and requests, and what the request engine made of them."""
    from watcher.sources.audit_webhook import OUTCOMES  # noqa: PLC0415 - (imported with the receiver)

    r, s = receiver.stats, requests.stats
    results = {
        "write": s.writes,
        "conflict": s.conflicts,
        "apply_conflict": s.apply_conflicts,
        "failed": s.failed,
        "read": s.reads,
        "ignored": s.ignored + s.without_name + s.dry_run + s.stores_nothing,
    }
    return {
        "fightwatch_audit_batches": [((o,), float(r.batches[o])) for o in OUTCOMES],
        "fightwatch_audit_requests_received": [
            (("queued",), float(r.queued)),
            (("dropped",), float(r.dropped)),
            (("invalid",), float(r.audit.invalid_items)),
        ],
        "fightwatch_audit_requests": [((k,), float(n)) for k, n in results.items()],
        "fightwatch_noop_writes": [(k, float(n)) for k, n in s.noop_by_resource.items()],
        "fightwatch_conflicts": [((*k[:2], k[2]), float(n)) for k, n in s.conflicts_by_resource.items()],
    }


def serving_samples(served: ServedRequests, security: ServingSecurity | None) -> Samples:
    """Read the requests served, and (once serving is set up) the certificates served and the access reviews."""
    tls = security.tls if security is not None else {}
    samples: dict[str, Iterable[tuple[Sequence[str], float]]] = {
        "fightwatch_http_requests": [(k, float(n)) for k, n in served.counts.items()],
        "fightwatch_serving_certificate_expiry_timestamp_seconds": [
            ((key,), t.certificate.not_after.timestamp()) for key, t in tls.items()
        ],
        "fightwatch_serving_certificate_reloads": [
            sample
            for key, t in tls.items()
            for sample in (((key, "loaded"), float(t.reloads)), ((key, "error"), float(t.reload_errors)))
        ],
    }
    if security is not None and security.access is not None:
        a = security.access.stats
        samples["fightwatch_access_reviews"] = [(k, float(n)) for k, n in a.reviews.items()]
        samples["fightwatch_access_cached_answers"] = [
            (("fresh",), float(a.cache_hits)),
            (("shared",), float(a.shared_answers)),
            (("stale",), float(a.stale_answers)),
        ]
    return samples


def recording_samples(recording: Recording) -> Samples:
    """Read what `--record` wrote."""
    return {
        "fightwatch_recording_events": [(_NONE, float(recording.events))],
        "fightwatch_recording_bytes": [(_NONE, float(recording.bytes_written))],
    }


def cluster_samples(cluster: ClusterWatch | None) -> Samples:
    """Read readiness, discovery and every watch's numbers (not ready before the cluster watch starts)."""
    if cluster is None:
        return {"fightwatch_ready": [(_NONE, 0.0)]}
    d = cluster.discovery
    samples: dict[str, Iterable[tuple[Sequence[str], float]]] = {
        "fightwatch_ready": [(_NONE, float(cluster.ready()))],
        "fightwatch_discovery_ok": [(_NONE, float(d.ok))],
        "fightwatch_discovery_passes": [(_NONE, float(d.passes))],
        "fightwatch_discovery_errors": [(_NONE, float(d.errors))],
        "fightwatch_discovered_resources": [(_NONE, float(d.resources))],
    }
    # One watch per resource, or one per namespace: their numbers add up per resource.
    states: dict[ResourceKey, dict[str, int]] = {}
    objects: dict[ResourceKey, int] = {}
    lists: dict[ResourceKey, int] = {}
    received: dict[ResourceKey, int] = {}
    for watch in cluster.watches:
        key, status = watch.key, watch.status
        counts = states.setdefault(key, dict.fromkeys((s.value for s in State), 0))
        counts[status.state.value] += 1
        objects[key] = objects.get(key, 0) + status.objects
        lists[key] = lists.get(key, 0) + status.lists
        received[key] = received.get(key, 0) + status.bytes
    return samples | {
        "fightwatch_watches": [((*k, state), float(n)) for k, c in states.items() for state, n in c.items()],
        "fightwatch_watch_objects": [(k, float(n)) for k, n in objects.items()],
        "fightwatch_watch_lists": [(k, float(n)) for k, n in lists.items()],
        "fightwatch_watch_received_bytes": [(k, float(n)) for k, n in received.items()],
    }


__all__ = [
    "audit_samples",
    "cluster_samples",
    "engine_samples",
    "event_loop_samples",
    "recording_samples",
    "serving_samples",
]
