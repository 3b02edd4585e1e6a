"""Write the Grafana dashboards in dashboards/ from one description, so every panel follows the conventions.

Conventions: a `${datasource}` variable (Prometheus), an optional `cluster` variable (matches everything when
the series carry no cluster label), a fixed `uid`, the `fightwatch` tag, and `$__rate_interval` in every rate.
`--check` (used by the tests) fails when the committed JSON differs from what this script writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
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
LEADING = f" * on (job, instance) group_left () fightwatch_leader{{{C}}}"
BY_SHARD = f" * on (job, instance) group_left (shard) fightwatch_shard_info{{{C}}}"
RATE = "$__rate_interval"
# Panels over the API server's audit events have data only where the audit webhook is enabled; their descriptions
# end with this sentence (the tests find these panels by it).
NEEDS_AUDIT = "Needs the audit webhook (docs/audit.md)."
INSTANT_KINDS = ("table", "bargauge")  # panels that show the latest value, not a series over time


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


def merged_table(
    *, hidden: Sequence[str], columns: Sequence[str], renamed: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """A table's transformations: its queries merged into one row per series, columns hidden, ordered, renamed."""
    organize: dict[str, Any] = {
        "excludeByName": dict.fromkeys(hidden, True),
        "indexByName": {column: index for index, column in enumerate(columns)},
    }
    if renamed:
        organize["renameByName"] = renamed
    return [{"id": "merge", "options": {}}, {"id": "organize", "options": organize}]


@dataclass(frozen=True)
class Query:
    """A panel's query: a PromQL expression, its legend (Grafana's own when empty) and its reference."""

    expr: str
    legend: str = ""
    ref: str = "A"

    def target(self, *, instant: bool) -> dict[str, Any]:
        legend = self.legend or "__auto"
        out: dict[str, Any] = {"datasource": DS, "expr": self.expr, "refId": self.ref, "legendFormat": legend}
        if instant:
            out |= {"instant": True, "range": False, "format": "table"}
        return out


@dataclass(frozen=True)
class Panel:
    """A row of a dashboard's panel table: what it shows, where (x, y, width, height on the 24-column grid), how."""

    kind: str
    title: str
    grid: tuple[int, int, int, int]
    queries: Sequence[Query]
    _: KW_ONLY
    description: str = ""
    needs_audit: bool = False
    unit: str = ""
    no_value: str = ""
    overrides: Sequence[dict[str, Any]] = ()
    options: dict[str, Any] | None = None
    transformations: Sequence[dict[str, Any]] = ()

    def json(self) -> dict[str, Any]:
        x, y, w, h = self.grid
        out: dict[str, Any] = {
            "type": self.kind,
            "title": self.title,
            "datasource": DS,
            "targets": [query.target(instant=self.kind in INSTANT_KINDS) for query in self.queries],
            "gridPos": {"x": x, "y": y, "w": w, "h": h},
        }
        description = f"{self.description} {NEEDS_AUDIT}" if self.needs_audit else self.description
        if description:
            out["description"] = description
        defaults = {key: value for key, value in (("unit", self.unit), ("noValue", self.no_value)) if value}
        if defaults or self.overrides:
            out["fieldConfig"] = {"defaults": defaults, "overrides": list(self.overrides)}
        if self.options:
            out["options"] = self.options
        if self.transformations:
            out["transformations"] = list(self.transformations)
        return out


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


def dashboard(
    uid: str, title: str, description: str, panels: Sequence[Panel], variables: list[dict[str, Any]]
) -> dict[str, Any]:
    rendered = [item.json() | {"id": number} for number, item in enumerate(panels, 1)]
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
        "panels": rendered,
        "links": [{"title": "fightwatch dashboards", "type": "dashboards", "tags": ["fightwatch"], "asDropdown": True}],
    }


OVERVIEW = (
    # What happens now.
    Panel(
        "stat", "Active fights", (0, 0, 4, 4), [Query(f'sum(fightwatch_findings_active{{{C}, type="fight"}}{LEADING})')]
    ),
    Panel(
        "stat",
        "Active hot loops",
        (4, 0, 4, 4),
        [Query(f'sum(fightwatch_findings_active{{{C}, type="hot_loop"}}{LEADING})')],
    ),
    Panel(
        "stat",
        "Writes per second",
        (8, 0, 4, 4),
        [Query(f"sum(rate(fightwatch_writes_total{{{C}}}[{RATE}]){LEADING})")],
        unit="wps",
    ),
    Panel(
        "stat",
        "Resources forbidden",
        (12, 0, 4, 4),
        [Query(f'sum(fightwatch_resources{{{C}, state="forbidden"}})')],
        description='Resources fightwatch may not list and watch (fightwatch_watches{state="forbidden"} or '
        "/readyz say which).",
    ),
    Panel(
        "stat",
        "Tracked objects",
        (16, 0, 4, 4),
        [Query(f"sum(max by (shard) (fightwatch_tracked_objects{{{C}}}{BY_SHARD}))")],
        description="Objects the detection engine holds state for (per shard, the most of its replicas).",
    ),
    Panel(
        "stat",
        "Event lag p99",
        (20, 0, 4, 4),
        [Query(f"histogram_quantile(0.99, sum by (le) (rate(fightwatch_event_lag_seconds_bucket{{{C}}}[{RATE}])))")],
        unit="s",
    ),
    # Incidents: one root cause (type, writers, fields) on many objects.
    Panel(
        "stat",
        "Active incidents",
        (0, 4, 4, 4),
        [Query(f"count(count by (incident) (fightwatch_incident_info{{{C}}}))")],
        description="Distinct incidents over all shards: findings of one type, by the same writers, over the "
        "same fields, on any number of objects.",
        no_value="0",
    ),
    Panel(
        "stat",
        "Incidents without series",
        (0, 8, 4, 4),
        [Query(f"sum(max by (shard) (fightwatch_incident_series_omitted{{{C}}}{BY_SHARD}))")],
        description="Active incidents left without series by metrics.max_incident_series (per shard, the most "
        "of its replicas): the table lists the others.",
    ),
    Panel(
        "table",
        "Incidents",
        (4, 4, 20, 8),
        [
            Query(f"max by (cluster, type, incident, writers, fields) (fightwatch_incident_info{{{C}}})"),
            Query(over_shards("cluster, type, incident", f"fightwatch_incident_objects{{{C}}}"), ref="B"),
            Query(over_shards("cluster, type, incident", f"fightwatch_incident_writes_per_minute{{{C}}}"), ref="C"),
        ],
        description="Active incidents, most objects first: objects with an active finding of the incident "
        "(summed over shards) and their writes per minute together. The incident column of Active findings "
        "names each finding's incident; an incident links to the object dashboard showing its objects.",
        overrides=[INCIDENT_LINK],
        options={"sortBy": [{"displayName": "objects", "desc": True}]},
        transformations=merged_table(
            hidden=("Time", "Value #A"),
            columns=("type", "writers", "fields", "Value #B", "Value #C", "incident"),
            renamed={"Value #B": "objects", "Value #C": "writes/min"},
        ),
    ),
    Panel(
        "table",
        "Active findings",
        (0, 12, 24, 8),
        [
            Query(replicas_merged(f"fightwatch_finding_info{{{C}}}")),
            Query(replicas_merged(f"fightwatch_finding_hint_info{{{C}}}"), ref="B"),
        ],
        description="Who fights over which fields of which object, and how to stop it; the incident it belongs "
        "to (capped: the most severe findings).",
        overrides=[INCIDENT_LINK],
        transformations=merged_table(
            hidden=("Time", "Value #A", "Value #B", "__name__", "instance", "job"),
            columns=("type", "namespace", "kind", "name", "writers", "fields", "incident", "hint"),
        ),
    ),
    # Findings and writes over time.
    Panel(
        "timeseries",
        "Findings opened",
        (0, 20, 12, 8),
        [Query(f"sum by (type) (increase(fightwatch_findings_total{{{C}}}[{RATE}]){LEADING})", "{{type}}")],
    ),
    Panel(
        "timeseries",
        "Handovers of active fights",
        (12, 20, 12, 8),
        [
            Query(
                replicas_merged(f'fightwatch_finding_handovers{{{C}, type="fight"}}'), "{{kind}} {{namespace}}/{{name}}"
            )
        ],
    ),
    Panel(
        "timeseries",
        "Writes by manager",
        (0, 28, 12, 8),
        [Query(f"sum by (manager) (rate(fightwatch_writes_total{{{C}}}[{RATE}]){LEADING})", "{{manager}}")],
        unit="wps",
    ),
    Panel(
        "timeseries",
        "Writes by kind",
        (12, 28, 12, 8),
        [Query(f"sum by (kind) (rate(fightwatch_writes_total{{{C}}}[{RATE}]){LEADING})", "{{kind}}")],
        unit="wps",
    ),
    Panel(
        "bargauge",
        "Top objects by write rate",
        (0, 36, 12, 8),
        [
            Query(
                f"topk(10, {replicas_merged(f'fightwatch_finding_writes_per_minute{{{C}}}')})",
                "{{kind}} {{namespace}}/{{name}}",
            )
        ],
        description="Objects of active findings, by writes per minute.",
        options={"orientation": "horizontal", "displayMode": "basic"},
    ),
    # The watches and the engine.
    Panel(
        "timeseries",
        "Watch errors by HTTP code",
        (12, 36, 12, 8),
        [Query(f"sum by (code) (rate(fightwatch_watch_errors_total{{{C}}}[{RATE}]))", "{{code}}")],
    ),
    Panel(
        "timeseries",
        "Watch restarts by reason",
        (0, 44, 12, 8),
        [Query(f"sum by (reason) (rate(fightwatch_watch_restarts_total{{{C}}}[{RATE}]))", "{{reason}}")],
    ),
    Panel(
        "timeseries",
        "Events received by type",
        (12, 44, 12, 8),
        [Query(f"sum by (type) (rate(fightwatch_events_total{{{C}}}[{RATE}]))", "{{type}}")],
    ),
    Panel(
        "timeseries",
        "Watches not watching",
        (0, 52, 8, 8),
        [
            Query(
                f'sum by (state, group, resource) (fightwatch_watches{{{C}, state!="watching"}}) > 0',
                "{{resource}} {{group}}: {{state}}",
            )
        ],
        description="Watches listing, retrying, forbidden or gone (empty while every watch is open).",
    ),
    Panel(
        "timeseries",
        "Engine events by outcome",
        (8, 52, 8, 8),
        [Query(f"sum by (outcome) (rate(fightwatch_engine_events_total{{{C}}}[{RATE}]))", "{{outcome}}")],
        description="What detection made of each event: a write, a new or relisted object, a duplicate, ...",
    ),
    Panel(
        "timeseries",
        "Bytes received by resource",
        (16, 52, 8, 8),
        [
            Query(
                f"topk(10, sum by (group, resource) (rate(fightwatch_watch_received_bytes_total{{{C}}}[{RATE}])))",
                "{{resource}} {{group}}",
            )
        ],
        unit="Bps",
    ),
    # Leadership and capacity.
    Panel(
        "timeseries",
        "Delivering replica per shard",
        (0, 60, 8, 8),
        [Query(f"fightwatch_leader{{{C}}}{BY_SHARD}", "shard {{shard}}: {{instance}}")],
        description="1 on the replica that holds the shard's Lease and delivers (every replica without leader "
        "election); a failover shows as the 1 moving to another replica.",
    ),
    Panel(
        "timeseries",
        "Tracked objects and their limit",
        (8, 60, 8, 8),
        [
            Query(f"fightwatch_tracked_objects{{{C}}}", "{{instance}}"),
            Query(f"fightwatch_tracked_objects_limit{{{C}}}", "limit {{instance}}"),
        ],
        description="Objects the engine holds state for, against detection.max_objects.",
    ),
    Panel(
        "timeseries",
        "Objects let go",
        (16, 60, 8, 8),
        [Query(f"sum by (reason) (rate(fightwatch_engine_evictions_total{{{C}}}[{RATE}]))", "{{reason}}")],
        description="idle: not written for detection.idle_after; capacity: at detection.max_objects (raise it).",
    ),
    # From the API server's audit events (audit_webhook): empty without it.
    Panel(
        "timeseries",
        "Writes rejected with 409 Conflict",
        (0, 68, 6, 8),
        [
            Query(
                f"topk(10, sum by (group, resource, reason) (rate(fightwatch_conflicts_total{{{C}}}[{RATE}])))",
                "{{resource}} {{group}}: {{reason}}",
            )
        ],
        description="Writes the API server rejected with 409. version: a stale resourceVersion; apply: "
        "server-side apply field conflicts. The conflict_storm and apply_conflict findings name the objects and "
        "clients.",
        needs_audit=True,
    ),
    Panel(
        "timeseries",
        "Conflicts by client",
        (6, 68, 6, 8),
        [
            Query(
                f"topk(10, sum by (manager, reason) (rate(fightwatch_client_conflicts_total{{{C}}}[{RATE}])))",
                "{{manager}}: {{reason}}",
            )
        ],
        description="The same by the field manager of the client whose writes were rejected.",
        needs_audit=True,
    ),
    Panel(
        "timeseries",
        "No-op writes",
        (12, 68, 6, 8),
        [
            Query(
                f"topk(10, sum by (group, resource) (rate(fightwatch_noop_writes_total{{{C}}}[{RATE}])))",
                "{{resource}} {{group}}",
            )
        ],
        description="Successful writes that changed nothing: invisible to any watch.",
        needs_audit=True,
    ),
    Panel(
        "timeseries",
        "Audit webhook batches",
        (18, 68, 6, 8),
        [Query(f"sum by (outcome) (rate(fightwatch_audit_batches_total{{{C}}}[{RATE}]))", "{{outcome}}")],
        description="Batches the API server posted: accepted, or turned away (invalid, unauthorized, too_large), "
        "or accepted with requests dropped (overflow).",
        needs_audit=True,
    ),
)

KIND_NS = f'{C}, namespace=~"$namespace", kind=~"$kind"'
OBJECT = (
    Panel(
        "table",
        "Findings on this object",
        (0, 0, 24, 6),
        [Query(replicas_merged(f"fightwatch_finding_info{{{OBJ}, {INCIDENT}}}"))],
    ),
    Panel(
        "timeseries",
        "Handovers",
        (0, 6, 12, 8),
        [Query(replicas_merged(f"fightwatch_finding_handovers{{{OBJ}}}") + OF_INCIDENT, "{{type}} {{name}}")],
    ),
    Panel(
        "timeseries",
        "Writes per minute to the object",
        (12, 6, 12, 8),
        [Query(replicas_merged(f"fightwatch_finding_writes_per_minute{{{OBJ}}}") + OF_INCIDENT, "{{type}} {{name}}")],
    ),
    Panel(
        "timeseries",
        "Writes by manager (this kind in this namespace)",
        (0, 14, 24, 8),
        [
            Query(
                f"sum by (manager, operation) (rate(fightwatch_writes_total{{{KIND_NS}}}[{RATE}]){LEADING})",
                "{{manager}} ({{operation}})",
            )
        ],
        description="Write counters carry no object name (bounded cardinality): this is the object's kind in "
        "its namespace.",
        unit="wps",
    ),
)


def overview() -> dict[str, Any]:
    return dashboard(
        "fightwatch-overview",
        "fightwatch / Overview",
        "Controllers fighting over objects, hot reconcile loops, and the health of the watcher.",
        OVERVIEW,
        [],
    )


def object_drilldown() -> dict[str, Any]:
    return dashboard(
        "fightwatch-object",
        "fightwatch / Object",
        "One object's findings, or the objects of one incident: who writes them, how often the contested fields "
        "change hands.",
        OBJECT,
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
