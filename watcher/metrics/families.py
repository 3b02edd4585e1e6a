"""Every metric family fightwatch exposes, declared once: name, type, help, labels (and histogram buckets).

`metrics.Metrics` builds the prometheus-client objects from this table and the metric table of docs/metrics.md is
checked against it, so a family cannot be exposed, documented or alerted on under a name declared nowhere.
Conventions (Prometheus and kube-state-metrics): one `fightwatch_` prefix, base units, `_total` for counters,
`_info` for metadata gauges that are always 1, lower-case label names, and bounded label sets.

`collected` families are computed when scraped rather than updated in place: from the active findings and the
delivery queues, and from plain counters the live watcher keeps on its hot path (bytes received, watch states,
the engine's counts), read through `Metrics.read_at_scrape`. Their series exist only while what they describe
does, and no metrics library runs per chunk or per object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PREFIX = "fightwatch_"

MetricType = Literal["counter", "gauge", "histogram"]

# The identifying labels of one finding's per-object series. `shard`: the series (and the alerts made from them)
# of different shards never collide; the replicas of one shard export the same series (see the alert rules).
FINDING_LABELS = ("type", "group", "kind", "namespace", "name", "shard")
# An incident's series: its id is the same on every shard and replica (a hash of its pattern), so summing over
# shards (after the max over a shard's replicas) gives the whole incident.
INCIDENT_LABELS = ("type", "incident", "shard")
RESOURCE_LABELS = ("group", "resource")

_DURATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Watch lag: receive time minus the object's newest managedFields time, which has one-second resolution.
_LAG_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True, slots=True)
class Family:
    name: str  # without the _total suffix of a counter (prometheus-client adds it)
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    collected: bool = False

    @property
    def exposed_name(self) -> str:
        """The name as scraped (counters end in `_total`)."""
        return f"{self.name}_total" if self.type == "counter" else self.name


FAMILIES: tuple[Family, ...] = (
    # ---------------------------------------------------------------------------------------- what happens
    Family(
        "fightwatch_writes",
        "counter",
        'Writes seen, by the manager they are attributed to (manager="": unattributed; "other": managers '
        "beyond the top-K).",
        ("group", "kind", "namespace", "manager", "operation"),
    ),
    Family(
        "fightwatch_findings",
        "counter",
        "Findings opened (fights and hot loops).",
        ("type", "group", "kind"),
    ),
    Family(
        "fightwatch_findings_active",
        "gauge",
        "Findings active now.",
        ("type",),
        collected=True,
    ),
    Family(
        "fightwatch_finding_info",
        "gauge",
        "1 for each active finding (capped, most severe first): who writes which fields of which object, and its "
        "incident.",
        (*FINDING_LABELS, "incident", "writers", "fields"),
        collected=True,
    ),
    Family(
        "fightwatch_finding_hint_info",
        "gauge",
        "1 for each active finding with per-object series: how to stop it (apart from finding_info, so a hint "
        "that changes as evidence grows does not restart the alert rules' for:).",
        (*FINDING_LABELS, "hint"),
        collected=True,
    ),
    Family(
        "fightwatch_finding_handovers",
        "gauge",
        "Handovers of the contested fields of an active finding (0 for hot loops).",
        FINDING_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_finding_writes_per_minute",
        "gauge",
        "Writes per minute to the object of an active finding, between its first and last write.",
        FINDING_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_finding_series_omitted",
        "gauge",
        "Active findings left without per-object series by metrics.max_finding_series.",
        collected=True,
    ),
    Family(
        "fightwatch_incident_info",
        "gauge",
        "1 for each active incident (capped, most objects first): the writers and the fields of its pattern.",
        (*INCIDENT_LABELS, "writers", "fields"),
        collected=True,
    ),
    Family(
        "fightwatch_incident_objects",
        "gauge",
        "Objects with an active finding of an incident (the findings that follow from another left out), on this "
        "shard: sum over shards for the whole incident.",
        INCIDENT_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_incident_writes_per_minute",
        "gauge",
        "Writes per minute to the objects of an active incident together, on this shard.",
        INCIDENT_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_incident_series_omitted",
        "gauge",
        "Active incidents left without series by metrics.max_incident_series.",
        collected=True,
    ),
    Family(
        "fightwatch_alerting_info",
        "gauge",
        'How alerts are grouped (delivery.per): 1 with per="incident" or per="finding". The bundled alert rules '
        "follow it.",
        ("per",),
    ),
    # --------------------------------------------------------------------------------------- the watcher
    Family(
        "fightwatch_events",
        "counter",
        "Events of a watched resource handed to detection, by type (the objects read at a watch's start, listed or "
        "streamed, count as ADDED; objects gone while no watch was open as DELETED).",
        (*RESOURCE_LABELS, "type"),
    ),
    Family(
        "fightwatch_watch_restarts",
        "counter",
        "Watches (re)started, by reason.",
        (*RESOURCE_LABELS, "reason"),
    ),
    Family(
        "fightwatch_watch_errors",
        "counter",
        'List and watch errors, by HTTP status code ("network": no HTTP answer; "internal": a bug of fightwatch).',
        (*RESOURCE_LABELS, "code"),
    ),
    Family(
        "fightwatch_watches",
        "gauge",
        "Watches of a resource in each state (one watch per resource, or per namespace for plain watch.namespaces).",
        (*RESOURCE_LABELS, "state"),
        collected=True,
    ),
    Family(
        "fightwatch_watch_objects",
        "gauge",
        "Objects of a resource its watches know.",
        RESOURCE_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_watch_lists",
        "counter",
        "Reads of a resource's current objects completed, listed or streamed as a watch's start (the first, and "
        "again after 410 Gone or a failed read).",
        RESOURCE_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_watch_received_bytes",
        "counter",
        "Bytes received by the lists and watches of a resource.",
        RESOURCE_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_resources",
        "gauge",
        "Resources fightwatch watches (state=watched) or may not list and watch (state=forbidden).",
        ("state",),
    ),
    Family(
        "fightwatch_discovered_resources",
        "gauge",
        "Resources the API server serves that support list and watch (before watch.resources and "
        "watch.exclude_resources).",
        collected=True,
    ),
    Family(
        "fightwatch_discovery_ok",
        "gauge",
        "1 when the last API discovery pass succeeded.",
        collected=True,
    ),
    Family(
        "fightwatch_discovery_passes",
        "counter",
        "API discovery passes that succeeded.",
        collected=True,
    ),
    Family(
        "fightwatch_discovery_errors",
        "counter",
        "API discovery passes that failed.",
        collected=True,
    ),
    Family(
        "fightwatch_ready",
        "gauge",
        "1 when discovery works and every resource that may be watched is listed and watched (as /readyz).",
        collected=True,
    ),
    Family(
        "fightwatch_tracked_objects",
        "gauge",
        "Objects the detection engine holds state for.",
    ),
    Family(
        "fightwatch_tracked_objects_limit",
        "gauge",
        "detection.max_objects: beyond it the least recently written objects are let go (absent: no limit).",
        collected=True,
    ),
    Family(
        "fightwatch_engine_evictions",
        "counter",
        "Objects the detection engine let go, by reason (idle: not written for detection.idle_after; capacity: "
        "the least recently written, at detection.max_objects). Objects with an open finding are never let go.",
        ("reason",),
        collected=True,
    ),
    Family(
        "fightwatch_audit_batches",
        "counter",
        "Batches the audit webhook received, by outcome (accepted, invalid, unauthorized, too_large, overflow: "
        "accepted but some of its requests dropped).",
        ("outcome",),
        collected=True,
    ),
    Family(
        "fightwatch_audit_requests_received",
        "counter",
        "Events of the audit webhook's batches: queued for detection, dropped (the queue full), or invalid (skipped).",
        ("outcome",),
        collected=True,
    ),
    Family(
        "fightwatch_audit_requests",
        "counter",
        "Requests the audit analysis processed, by result (write, conflict, apply_conflict, failed, read, ignored).",
        ("result",),
        collected=True,
    ),
    Family(
        "fightwatch_conflicts",
        "counter",
        "Writes rejected with 409 Conflict (audit events), by resource and reason (version: a stale "
        "resourceVersion; apply: server-side apply field conflicts).",
        (*RESOURCE_LABELS, "reason"),
        collected=True,
    ),
    Family(
        "fightwatch_client_conflicts",
        "counter",
        'Writes rejected with 409 Conflict (audit events), by the field manager of the client that sent them ("other": '
        "managers beyond the top-K) and reason (version, apply).",
        ("manager", "reason"),
    ),
    Family(
        "fightwatch_noop_writes",
        "counter",
        "Successful writes that changed nothing (audit events), by resource.",
        RESOURCE_LABELS,
        collected=True,
    ),
    Family(
        "fightwatch_http_requests",
        "counter",
        "Requests the endpoints answered, by endpoint (/metrics, /api/v1/findings, /healthz, /readyz; other: "
        "unknown paths) and status code (401: no or an invalid credential; 403: not allowed; 503: not reviewable).",
        ("endpoint", "code"),
        collected=True,
    ),
    Family(
        "fightwatch_access_reviews",
        "counter",
        "Reviews sent to the API server for callers of the endpoints, by review (TokenReview, "
        "SubjectAccessReview) and result (answered, error: the API server did not answer or refused to).",
        ("review", "result"),
        collected=True,
    ),
    Family(
        "fightwatch_access_cached_answers",
        "counter",
        "Callers' authentication and authorization answered without a review of their own, by freshness: fresh "
        "(cached), shared (the answer of the same review another request was waiting for), stale (expired, used "
        "because the API server could not answer).",
        ("freshness",),
        collected=True,
    ),
    Family(
        "fightwatch_serving_certificate_expiry_timestamp_seconds",
        "gauge",
        "When the certificate served expires (Unix time), by where it comes from (serve.tls, audit_webhook).",
        ("config",),
        collected=True,
    ),
    Family(
        "fightwatch_serving_certificate_reloads",
        "counter",
        "Serving certificates loaded again after a change on disk, by result (loaded; error: the previous one "
        "is served still).",
        ("config", "result"),
        collected=True,
    ),
    Family(
        "fightwatch_engine_events",
        "counter",
        "Events the detection engine processed, by outcome (write, new, resynced, duplicate, ignored, deleted, "
        "invalid).",
        ("outcome",),
        collected=True,
    ),
    Family(
        "fightwatch_event_processing_duration_seconds",
        "histogram",
        "Time to process one watch event (decode, detect, hand the changes to the sinks).",
        buckets=_DURATION_BUCKETS,
    ),
    Family(
        "fightwatch_event_lag_seconds",
        "histogram",
        "Receive time of a MODIFIED watch event minus the newest managedFields time of its object.",
        buckets=_LAG_BUCKETS,
    ),
    Family(
        "fightwatch_last_event_timestamp_seconds",
        "gauge",
        "When the last watch event of a resource was received (seconds since the epoch).",
        RESOURCE_LABELS,
    ),
    Family(
        "fightwatch_event_loop_lag_seconds",
        "gauge",
        "How late the last one-second tick of the event loop ran.",
        collected=True,
    ),
    Family(
        "fightwatch_recording_events",
        "counter",
        "Events written to the --record file.",
        collected=True,
    ),
    Family(
        "fightwatch_recording_bytes",
        "counter",
        "Bytes written to the --record file.",
        collected=True,
    ),
    Family(
        "fightwatch_build_info",
        "gauge",
        "1, labelled with the fightwatch and Python versions and the engine's attribution implementation (`native`, "
        "or `python` where the native engine is not built).",
        ("version", "python_version", "engine"),
    ),
    Family(
        "fightwatch_shard_info",
        "gauge",
        "1, labelled with this process's shard and the number of shards (sharding.shard, sharding.total_shards).",
        ("shard", "total_shards"),
    ),
    # ------------------------------------------------------------------------------------ leader election
    Family(
        "fightwatch_leader",
        "gauge",
        "1 while this replica delivers: it holds the leader-election Lease (or leader election is off).",
    ),
    Family(
        "fightwatch_leader_changes",
        "counter",
        "Leadership changes of this replica: acquired (took the Lease), lost (could not renew it in time: "
        "delivery stopped at once), released (gave it up on shutdown).",
        ("change",),
    ),
    # ------------------------------------------------------------------------------------------ delivery
    Family(
        "fightwatch_delivery_sent",
        "counter",
        "Finding changes delivered, by sink.",
        ("sink",),
    ),
    Family(
        "fightwatch_delivery_failures",
        "counter",
        "Delivery attempts that failed (each retry counts), by sink.",
        ("sink",),
    ),
    Family(
        "fightwatch_delivery_dropped",
        "counter",
        "Finding changes given up, by sink and reason (queue_full: the oldest dropped; attempts: every retry failed; "
        "rejected: the receiver refused it for good; stopped: still queued at shutdown; lost_leadership: queued when "
        "this replica lost the leader-election Lease).",
        ("sink", "reason"),
    ),
    Family(
        "fightwatch_delivery_queue_length",
        "gauge",
        "Finding changes waiting in a sink's queue.",
        ("sink",),
        collected=True,
    ),
)

BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}
