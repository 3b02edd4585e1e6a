"""Write the Grafana dashboards in dashboards/ from one description, so every panel follows the conventions.

Conventions: a `${datasource}` variable (Prometheus), an optional `cluster` variable (matches everything when
the series carry no cluster label), a fixed `uid`, the `fightwatch` tag, and `$__rate_interval` in every rate.
`--check` (used by the tests) fails when the committed JSON differs from what this script writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
C = 'cluster=~"$cluster"'  # every selector carries it
OBJ = f'{C}, namespace=~"$namespace", kind=~"$kind", name=~"$name"'
INCIDENT = 'incident=~"$incident"'  # only fightwatch_finding_info carries it
# The per-object series of the findings of the chosen incident(s) (any finding while the variable is at All).
OF_INCIDENT = (
    f" and on (cluster, type, group, kind, namespace, name, shard) fightwatch_finding_info{{{OBJ}, {INCIDENT}}}"
)
# With leader election every replica counts what it sees: "what happens" panels count the delivering replica of
# each shard only (fightwatch_leader is 1 there, and on every replica without leader election), and per-finding
# series take the max over a shard's replicas, as the alert rules do.
# Panels over the API server's audit events: they have data only where the audit webhook is enabled.
AUDIT_PANELS = ("Writes rejected with 409 Conflict", "Conflicts by client", "No-op writes", "Audit webhook batches")
NEEDS_AUDIT = "Needs the audit webhook (docs/audit.md)."  # (the tests find these panels by it)
LEADING = f" * on (job, instance) group_left () fightwatch_leader{{{C}}}"
BY_SHARD = f" * on (job, instance) group_left (shard) fightwatch_shard_info{{{C}}}"


def replicas_merged(selector: str) -> str:
    return f"max without (instance, pod) ({selector})"


def over_shards(by: str, selector: str) -> str:
    """Summed over shards (each exports its own objects' series), the replicas of each shard merged first."""
    return f"sum by ({by}) ({replicas_merged(selector)})"


# A table column `incident` links to the object dashboard showing that incident's objects (same time range, data
# source and cluster).
INCIDENT_LINK = {
    "matcher": {"id": "byName", "options": "incident"},
    "properties": [
        {
            "id": "links",
            "value": [
                {
                    "title": "Objects of incident ${__value.raw}",
                    "url": "/d/fightwatch-object?${__url_time_range}&${datasource:queryparam}&${cluster:queryparam}"
                    "&var-incident=${__value.raw}",
                }
            ],
        }
    ],
}


def target(expr: str, legend: str = "", *, instant: bool = False, ref: str = "A") -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DS, "expr": expr, "refId": ref, "legendFormat": legend or "__auto"}
    if instant:
        out |= {"instant": True, "range": False, "format": "table"}
    return out


def panel(kind: str, title: str, targets: list[dict[str, Any]], grid: tuple[int, int, int, int], **extra: Any) -> Any:
    x, y, w, h = grid
    return {
        "type": kind,
        "title": title,
        "datasource": DS,
        "targets": targets,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        **extra,
    }


def variable(name: str, query: str, *, label: str, multi: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "allValue": ".*",
        "multi": multi,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard(uid: str, title: str, description: str, panels: list[Any], variables: list[Any]) -> dict[str, Any]:
    for number, item in enumerate(panels, 1):
        item["id"] = number
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["fightwatch", "kubernetes"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                variable("cluster", "label_values(fightwatch_build_info, cluster)", label="Cluster", multi=False),
                *variables,
            ]
        },
        "panels": panels,
        "links": [{"title": "fightwatch dashboards", "type": "dashboards", "tags": ["fightwatch"], "asDropdown": True}],
    }


def overview() -> dict[str, Any]:
    rate = "$__rate_interval"
    panels = [
        panel(
            "stat",
            "Active fights",
            [target(f'sum(fightwatch_findings_active{{{C}, type="fight"}}{LEADING})')],
            (0, 0, 4, 4),
        ),
        panel(
            "stat",
            "Active hot loops",
            [target(f'sum(fightwatch_findings_active{{{C}, type="hot_loop"}}{LEADING})')],
            (4, 0, 4, 4),
        ),
        panel(
            "stat",
            "Writes per second",
            [target(f"sum(rate(fightwatch_writes_total{{{C}}}[{rate}]){LEADING})")],
            (8, 0, 4, 4),
            fieldConfig={"defaults": {"unit": "wps"}, "overrides": []},
        ),
        panel(
            "stat",
            "Resources forbidden",
            [target(f'sum(fightwatch_resources{{{C}, state="forbidden"}})')],
            (12, 0, 4, 4),
            description='Resources fightwatch may not list and watch (fightwatch_watches{state="forbidden"} or '
            "/readyz say which).",
        ),
        panel(
            "stat",
            "Tracked objects",
            [target(f"sum(max by (shard) (fightwatch_tracked_objects{{{C}}}{BY_SHARD}))")],
            (16, 0, 4, 4),
            description="Objects the detection engine holds state for (per shard, the most of its replicas).",
        ),
        panel(
            "stat",
            "Event lag p99",
            [
                target(
                    f"histogram_quantile(0.99, sum by (le) (rate(fightwatch_event_lag_seconds_bucket{{{C}}}[{rate}])))"
                )
            ],
            (20, 0, 4, 4),
            fieldConfig={"defaults": {"unit": "s"}, "overrides": []},
        ),
        # Incidents: one root cause (type, writers, fields) on many objects.
        panel(
            "stat",
            "Active incidents",
            [target(f"count(count by (incident) (fightwatch_incident_info{{{C}}}))")],
            (0, 4, 4, 4),
            description="Distinct incidents over all shards: findings of one type, by the same writers, over the "
            "same fields, on any number of objects.",
            fieldConfig={"defaults": {"noValue": "0"}, "overrides": []},
        ),
        panel(
            "stat",
            "Incidents without series",
            [target(f"sum(max by (shard) (fightwatch_incident_series_omitted{{{C}}}{BY_SHARD}))")],
            (0, 8, 4, 4),
            description="Active incidents left without series by metrics.max_incident_series (per shard, the most "
            "of its replicas): the table lists the others.",
        ),
        panel(
            "table",
            "Incidents",
            [
                target(
                    f"max by (cluster, type, incident, writers, fields) (fightwatch_incident_info{{{C}}})",
                    instant=True,
                ),
                target(
                    over_shards("cluster, type, incident", f"fightwatch_incident_objects{{{C}}}"), instant=True, ref="B"
                ),
                target(
                    over_shards("cluster, type, incident", f"fightwatch_incident_writes_per_minute{{{C}}}"),
                    instant=True,
                    ref="C",
                ),
            ],
            (4, 4, 20, 8),
            description="Active incidents, most objects first: objects with an active finding of the incident "
            "(summed over shards) and their writes per minute together. The incident column of Active findings "
            "names each finding's incident; an incident links to the object dashboard showing its objects.",
            fieldConfig={"defaults": {}, "overrides": [INCIDENT_LINK]},
            options={"sortBy": [{"displayName": "objects", "desc": True}]},
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "Value #A": True},
                        "indexByName": {
                            "type": 0,
                            "writers": 1,
                            "fields": 2,
                            "Value #B": 3,
                            "Value #C": 4,
                            "incident": 5,
                        },
                        "renameByName": {"Value #B": "objects", "Value #C": "writes/min"},
                    },
                },
            ],
        ),
        panel(
            "table",
            "Active findings",
            [
                target(replicas_merged(f"fightwatch_finding_info{{{C}}}"), instant=True),
                target(replicas_merged(f"fightwatch_finding_hint_info{{{C}}}"), instant=True, ref="B"),
            ],
            (0, 12, 24, 8),
            description="Who fights over which fields of which object, and how to stop it; the incident it belongs "
            "to (capped: the most severe findings).",
            fieldConfig={"defaults": {}, "overrides": [INCIDENT_LINK]},
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {
                            "Time": True,
                            "Value #A": True,
                            "Value #B": True,
                            "__name__": True,
                            "instance": True,
                            "job": True,
                        },
                        "indexByName": {
                            "type": 0,
                            "namespace": 1,
                            "kind": 2,
                            "name": 3,
                            "writers": 4,
                            "fields": 5,
                            "incident": 6,
                            "hint": 7,
                        },
                    },
                },
            ],
        ),
        panel(
            "timeseries",
            "Findings opened",
            [target(f"sum by (type) (increase(fightwatch_findings_total{{{C}}}[{rate}]){LEADING})", "{{type}}")],
            (0, 20, 12, 8),
        ),
        panel(
            "timeseries",
            "Handovers of active fights",
            [
                target(
                    replicas_merged(f'fightwatch_finding_handovers{{{C}, type="fight"}}'),
                    "{{kind}} {{namespace}}/{{name}}",
                )
            ],
            (12, 20, 12, 8),
        ),
        panel(
            "timeseries",
            "Writes by manager",
            [target(f"sum by (manager) (rate(fightwatch_writes_total{{{C}}}[{rate}]){LEADING})", "{{manager}}")],
            (0, 28, 12, 8),
            fieldConfig={"defaults": {"unit": "wps"}, "overrides": []},
        ),
        panel(
            "timeseries",
            "Writes by kind",
            [target(f"sum by (kind) (rate(fightwatch_writes_total{{{C}}}[{rate}]){LEADING})", "{{kind}}")],
            (12, 28, 12, 8),
            fieldConfig={"defaults": {"unit": "wps"}, "overrides": []},
        ),
        panel(
            "bargauge",
            "Top objects by write rate",
            [
                target(
                    f"topk(10, {replicas_merged(f'fightwatch_finding_writes_per_minute{{{C}}}')})",
                    "{{kind}} {{namespace}}/{{name}}",
                    instant=True,
                )
            ],
            (0, 36, 12, 8),
            description="Objects of active findings, by writes per minute.",
            options={"orientation": "horizontal", "displayMode": "basic"},
        ),
        panel(
            "timeseries",
            "Watch errors by HTTP code",
            [target(f"sum by (code) (rate(fightwatch_watch_errors_total{{{C}}}[{rate}]))", "{{code}}")],
            (12, 36, 12, 8),
        ),
        panel(
            "timeseries",
            "Watch restarts by reason",
            [target(f"sum by (reason) (rate(fightwatch_watch_restarts_total{{{C}}}[{rate}]))", "{{reason}}")],
            (0, 44, 12, 8),
        ),
        panel(
            "timeseries",
            "Events received by type",
            [target(f"sum by (type) (rate(fightwatch_events_total{{{C}}}[{rate}]))", "{{type}}")],
            (12, 44, 12, 8),
        ),
        panel(
            "timeseries",
            "Watches not watching",
            [
                target(
                    f'sum by (state, group, resource) (fightwatch_watches{{{C}, state!="watching"}}) > 0',
                    "{{resource}} {{group}}: {{state}}",
                )
            ],
            (0, 52, 8, 8),
            description="Watches listing, retrying, forbidden or gone (empty while every watch is open).",
        ),
        panel(
            "timeseries",
            "Engine events by outcome",
            [target(f"sum by (outcome) (rate(fightwatch_engine_events_total{{{C}}}[{rate}]))", "{{outcome}}")],
            (8, 52, 8, 8),
            description="What detection made of each event: a write, a new or relisted object, a duplicate, ...",
        ),
        panel(
            "timeseries",
            "Bytes received by resource",
            [
                target(
                    f"topk(10, sum by (group, resource) (rate(fightwatch_watch_received_bytes_total{{{C}}}[{rate}])))",
                    "{{resource}} {{group}}",
                )
            ],
            (16, 52, 8, 8),
            fieldConfig={"defaults": {"unit": "Bps"}, "overrides": []},
        ),
        panel(
            "timeseries",
            "Delivering replica per shard",
            [target(f"fightwatch_leader{{{C}}}{BY_SHARD}", "shard {{shard}}: {{instance}}")],
            (0, 60, 8, 8),
            description="1 on the replica that holds the shard's Lease and delivers (every replica without leader "
            "election); a failover shows as the 1 moving to another replica.",
        ),
        panel(
            "timeseries",
            "Tracked objects and their limit",
            [
                target(f"fightwatch_tracked_objects{{{C}}}", "{{instance}}"),
                target(f"fightwatch_tracked_objects_limit{{{C}}}", "limit {{instance}}"),
            ],
            (8, 60, 8, 8),
            description="Objects the engine holds state for, against detection.max_objects.",
        ),
        panel(
            "timeseries",
            "Objects let go",
            [target(f"sum by (reason) (rate(fightwatch_engine_evictions_total{{{C}}}[{rate}]))", "{{reason}}")],
            (16, 60, 8, 8),
            description="idle: not written for detection.idle_after; capacity: at detection.max_objects (raise it).",
        ),
        # From the API server's audit events (audit_webhook): empty without it.
        panel(
            "timeseries",
            AUDIT_PANELS[0],
            [
                target(
                    f"topk(10, sum by (group, resource, reason) (rate(fightwatch_conflicts_total{{{C}}}[{rate}])))",
                    "{{resource}} {{group}}: {{reason}}",
                )
            ],
            (0, 68, 6, 8),
            description="Writes the API server rejected with 409. version: a stale resourceVersion; apply: "
            "server-side apply field conflicts. The conflict_storm and apply_conflict findings name the objects and "
            f"clients. {NEEDS_AUDIT}",
        ),
        panel(
            "timeseries",
            AUDIT_PANELS[1],
            [
                target(
                    f"topk(10, sum by (manager, reason) (rate(fightwatch_client_conflicts_total{{{C}}}[{rate}])))",
                    "{{manager}}: {{reason}}",
                )
            ],
            (6, 68, 6, 8),
            description=f"The same by the field manager of the client whose writes were rejected. {NEEDS_AUDIT}",
        ),
        panel(
            "timeseries",
            AUDIT_PANELS[2],
            [
                target(
                    f"topk(10, sum by (group, resource) (rate(fightwatch_noop_writes_total{{{C}}}[{rate}])))",
                    "{{resource}} {{group}}",
                )
            ],
            (12, 68, 6, 8),
            description=f"Successful writes that changed nothing: invisible to any watch. {NEEDS_AUDIT}",
        ),
        panel(
            "timeseries",
            AUDIT_PANELS[3],
            [target(f"sum by (outcome) (rate(fightwatch_audit_batches_total{{{C}}}[{rate}]))", "{{outcome}}")],
            (18, 68, 6, 8),
            description="Batches the API server posted: accepted, or turned away (invalid, unauthorized, too_large), "
            f"or accepted with requests dropped (overflow). {NEEDS_AUDIT}",
        ),
    ]
    return dashboard(
        "fightwatch-overview",
        "fightwatch / Overview",
        "Controllers fighting over objects, hot reconcile loops, and the health of the watcher.",
        panels,
        [],
    )


def object_drilldown() -> dict[str, Any]:
    rate = "$__rate_interval"
    kind_ns = f'{C}, namespace=~"$namespace", kind=~"$kind"'
    panels = [
        panel(
            "table",
            "Findings on this object",
            [target(replicas_merged(f"fightwatch_finding_info{{{OBJ}, {INCIDENT}}}"), instant=True)],
            (0, 0, 24, 6),
        ),
        panel(
            "timeseries",
            "Handovers",
            [target(replicas_merged(f"fightwatch_finding_handovers{{{OBJ}}}") + OF_INCIDENT, "{{type}} {{name}}")],
            (0, 6, 12, 8),
        ),
        panel(
            "timeseries",
            "Writes per minute to the object",
            [
                target(
                    replicas_merged(f"fightwatch_finding_writes_per_minute{{{OBJ}}}") + OF_INCIDENT,
                    "{{type}} {{name}}",
                )
            ],
            (12, 6, 12, 8),
        ),
        panel(
            "timeseries",
            "Writes by manager (this kind in this namespace)",
            [
                target(
                    f"sum by (manager, operation) (rate(fightwatch_writes_total{{{kind_ns}}}[{rate}]){LEADING})",
                    "{{manager}} ({{operation}})",
                )
            ],
            (0, 14, 24, 8),
            description="Write counters carry no object name (bounded cardinality): this is the object's kind in "
            "its namespace.",
            fieldConfig={"defaults": {"unit": "wps"}, "overrides": []},
        ),
    ]
    return dashboard(
        "fightwatch-object",
        "fightwatch / Object",
        "One object's findings, or the objects of one incident: who writes them, how often the contested fields "
        "change hands.",
        panels,
        [
            # An incident's objects: choose it, and the other variables offer only its objects.
            variable("incident", f"label_values(fightwatch_finding_info{{{C}}}, incident)", label="Incident"),
            variable(
                "namespace", f"label_values(fightwatch_finding_info{{{C}, {INCIDENT}}}, namespace)", label="Namespace"
            ),
            variable(
                "kind",
                f'label_values(fightwatch_finding_info{{{C}, {INCIDENT}, namespace=~"$namespace"}}, kind)',
                label="Kind",
            ),
            variable(
                "name",
                f'label_values(fightwatch_finding_info{{{C}, {INCIDENT}, namespace=~"$namespace", kind=~"$kind"}}, '
                "name)",
                label="Name",
            ),
        ],
    )


DASHBOARDS = {"fightwatch-overview.json": overview, "fightwatch-object.json": object_drilldown}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed dashboards are out of date")
    args = parser.parse_args()
    stale = []
    for name, build in DASHBOARDS.items():
        text = json.dumps(build(), indent=2) + "\n"
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            OUT.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)}: run python scripts/dashboards.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
