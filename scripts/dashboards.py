"""Write the Grafana dashboards in dashboards/ from one description, so every panel follows the conventions.

Conventions: a `${datasource}` variable (Prometheus), an optional `cluster` variable (matches everything when
the series carry no cluster label), a fixed `uid`, the `fightwatch` tag, and `$__rate_interval` in every rate.
Each dashboard is a table: rows of the grid (`Row`), their panels (`Panel`), each panel's queries (`Query`); a few
short functions turn it into Grafana's JSON. `--check` (used by the tests) fails when the committed JSON differs
from what this script writes.
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
GRID_COLUMNS = 24  # the width of Grafana's grid
INSTANT_KINDS = ("table", "bargauge")  # panels that show the latest value, not a series over time


def replicas_merged(selector: str) -> str:
    return f"max without (instance, pod) ({selector})"


def over_shards(by: str, selector: str) -> str:
    """Summed over shards (each exports its own objects' series), the replicas of each shard merged first."""
    return f"sum by ({by}) ({replicas_merged(selector)})"


def per_second(counter: str, by: str = "", *, selector: str = C, leading: bool = False) -> str:
    """A counter's rate over the rate interval, summed (by some labels); with `leading`, the delivering replicas'."""
    rate = f"rate({counter}{{{selector}}}[{RATE}])" + (LEADING if leading else "")
    return f"sum by ({by}) ({rate})" if by else f"sum({rate})"


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
    """A panel of a dashboard's table: what it shows, how, and where in its row when not one of equal neighbours."""

    kind: str
    title: str
    queries: Sequence[Query]
    _: KW_ONLY
    place: tuple[int, int, int, int] | None = None  # x, y, width, height within the row
    description: str = ""
    needs_audit: bool = False
    unit: str = ""
    no_value: str = ""
    overrides: Sequence[dict[str, Any]] = ()
    options: dict[str, Any] | None = None
    transformations: Sequence[dict[str, Any]] = ()

    def json(self, grid: tuple[int, int, int, int]) -> dict[str, Any]:
        x, y, w, h = grid
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


def stat(title: str, expr: str, **more: Any) -> Panel:
    return Panel("stat", title, [Query(expr)], **more)


def series(title: str, expr: str, legend: str, **more: Any) -> Panel:
    return Panel("timeseries", title, [Query(expr, legend)], **more)


@dataclass(frozen=True)
class Row:
    """A row of the grid, `height` high: its panels side by side at equal widths, or each at its own `place`."""

    height: int
    panels: Sequence[Panel]


def laid_out(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The panels' JSON, rows top to bottom on Grafana's 24-column grid, numbered from 1."""
    panels: list[dict[str, Any]] = []
    top = 0
    for row in rows:
        width = GRID_COLUMNS // len(row.panels)
        for index, item in enumerate(row.panels):
            x, y, w, h = item.place or (index * width, 0, width, row.height)
            panels.append(item.json((x, top + y, w, h)) | {"id": len(panels) + 1})
        top += row.height
    return panels


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
    uid: str, title: str, description: str, rows: Sequence[Row], variables: list[dict[str, Any]]
) -> dict[str, Any]:
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
        "panels": laid_out(rows),
        "links": [{"title": "fightwatch dashboards", "type": "dashboards", "tags": ["fightwatch"], "asDropdown": True}],
    }


WRITES = "fightwatch_writes_total"
HANDOVERS = "fightwatch_finding_handovers"
WRITES_PER_MINUTE = "fightwatch_finding_writes_per_minute"
OBJECT_LEGEND = "{{kind}} {{namespace}}/{{name}}"
INCIDENTS_TABLE = Panel(
    "table",
    "Incidents",
    [
        Query(f"max by (cluster, type, incident, writers, fields) (fightwatch_incident_info{{{C}}})"),
        Query(over_shards("cluster, type, incident", f"fightwatch_incident_objects{{{C}}}"), ref="B"),
        Query(over_shards("cluster, type, incident", f"fightwatch_incident_writes_per_minute{{{C}}}"), ref="C"),
    ],
    place=(4, 0, 20, 8),
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
)
FINDINGS_TABLE = Panel(
    "table",
    "Active findings",
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
)
OVERVIEW = (
    Row(  # What happens now.
        4,
        [
            stat("Active fights", f'sum(fightwatch_findings_active{{{C}, type="fight"}}{LEADING})'),
            stat("Active hot loops", f'sum(fightwatch_findings_active{{{C}, type="hot_loop"}}{LEADING})'),
            stat("Writes per second", per_second(WRITES, leading=True), unit="wps"),
            stat(
                "Resources forbidden",
                f'sum(fightwatch_resources{{{C}, state="forbidden"}})',
                description='Resources fightwatch may not list and watch (fightwatch_watches{state="forbidden"} '
                "or /readyz say which).",
            ),
            stat(
                "Tracked objects",
                f"sum(max by (shard) (fightwatch_tracked_objects{{{C}}}{BY_SHARD}))",
                description="Objects the detection engine holds state for (per shard, the most of its replicas).",
            ),
            stat(
                "Event lag p99",
                f"histogram_quantile(0.99, {per_second('fightwatch_event_lag_seconds_bucket', 'le')})",
                unit="s",
            ),
        ],
    ),
    Row(  # Incidents: one root cause (type, writers, fields) on many objects.
        8,
        [
            stat(
                "Active incidents",
                f"count(count by (incident) (fightwatch_incident_info{{{C}}}))",
                place=(0, 0, 4, 4),
                description="Distinct incidents over all shards: findings of one type, by the same writers, over "
                "the same fields, on any number of objects.",
                no_value="0",
            ),
            stat(
                "Incidents without series",
                f"sum(max by (shard) (fightwatch_incident_series_omitted{{{C}}}{BY_SHARD}))",
                place=(0, 4, 4, 4),
                description="Active incidents left without series by metrics.max_incident_series (per shard, the "
                "most of its replicas): the table lists the others.",
            ),
            INCIDENTS_TABLE,
        ],
    ),
    Row(8, [FINDINGS_TABLE]),
    Row(
        8,
        [
            series(
                "Findings opened",
                f"sum by (type) (increase(fightwatch_findings_total{{{C}}}[{RATE}]){LEADING})",
                "{{type}}",
            ),
            series("Handovers of active fights", replicas_merged(f'{HANDOVERS}{{{C}, type="fight"}}'), OBJECT_LEGEND),
        ],
    ),
    Row(
        8,
        [
            series("Writes by manager", per_second(WRITES, "manager", leading=True), "{{manager}}", unit="wps"),
            series("Writes by kind", per_second(WRITES, "kind", leading=True), "{{kind}}", unit="wps"),
        ],
    ),
    Row(
        8,
        [
            Panel(
                "bargauge",
                "Top objects by write rate",
                [Query(f"topk(10, {replicas_merged(f'{WRITES_PER_MINUTE}{{{C}}}')})", OBJECT_LEGEND)],
                description="Objects of active findings, by writes per minute.",
                options={"orientation": "horizontal", "displayMode": "basic"},
            ),
            # The watches and the engine.
            series("Watch errors by HTTP code", per_second("fightwatch_watch_errors_total", "code"), "{{code}}"),
        ],
    ),
    Row(
        8,
        [
            series("Watch restarts by reason", per_second("fightwatch_watch_restarts_total", "reason"), "{{reason}}"),
            series("Events received by type", per_second("fightwatch_events_total", "type"), "{{type}}"),
        ],
    ),
    Row(
        8,
        [
            series(
                "Watches not watching",
                f'sum by (state, group, resource) (fightwatch_watches{{{C}, state!="watching"}}) > 0',
                "{{resource}} {{group}}: {{state}}",
                description="Watches listing, retrying, forbidden or gone (empty while every watch is open).",
            ),
            series(
                "Engine events by outcome",
                per_second("fightwatch_engine_events_total", "outcome"),
                "{{outcome}}",
                description="What detection made of each event: a write, a new or relisted object, a duplicate, ...",
            ),
            series(
                "Bytes received by resource",
                f"topk(10, {per_second('fightwatch_watch_received_bytes_total', 'group, resource')})",
                "{{resource}} {{group}}",
                unit="Bps",
            ),
        ],
    ),
    Row(  # Leadership and capacity.
        8,
        [
            series(
                "Delivering replica per shard",
                f"fightwatch_leader{{{C}}}{BY_SHARD}",
                "shard {{shard}}: {{instance}}",
                description="1 on the replica that holds the shard's Lease and delivers (every replica without "
                "leader election); a failover shows as the 1 moving to another replica.",
            ),
            Panel(
                "timeseries",
                "Tracked objects and their limit",
                [
                    Query(f"fightwatch_tracked_objects{{{C}}}", "{{instance}}"),
                    Query(f"fightwatch_tracked_objects_limit{{{C}}}", "limit {{instance}}"),
                ],
                description="Objects the engine holds state for, against detection.max_objects.",
            ),
            series(
                "Objects let go",
                per_second("fightwatch_engine_evictions_total", "reason"),
                "{{reason}}",
                description="idle: not written for detection.idle_after; capacity: at detection.max_objects (raise "
                "it).",
            ),
        ],
    ),
    Row(  # From the API server's audit events (audit_webhook): empty without it.
        8,
        [
            series(
                "Writes rejected with 409 Conflict",
                f"topk(10, {per_second('fightwatch_conflicts_total', 'group, resource, reason')})",
                "{{resource}} {{group}}: {{reason}}",
                description="Writes the API server rejected with 409. version: a stale resourceVersion; apply: "
                "server-side apply field conflicts. The conflict_storm and apply_conflict findings name the objects "
                "and clients.",
                needs_audit=True,
            ),
            series(
                "Conflicts by client",
                f"topk(10, {per_second('fightwatch_client_conflicts_total', 'manager, reason')})",
                "{{manager}}: {{reason}}",
                description="The same by the field manager of the client whose writes were rejected.",
                needs_audit=True,
            ),
            series(
                "No-op writes",
                f"topk(10, {per_second('fightwatch_noop_writes_total', 'group, resource')})",
                "{{resource}} {{group}}",
                description="Successful writes that changed nothing: invisible to any watch.",
                needs_audit=True,
            ),
            series(
                "Audit webhook batches",
                per_second("fightwatch_audit_batches_total", "outcome"),
                "{{outcome}}",
                description="Batches the API server posted: accepted, or turned away (invalid, unauthorized, "
                "too_large), or accepted with requests dropped (overflow).",
                needs_audit=True,
            ),
        ],
    ),
)

KIND_NS = f'{C}, namespace=~"$namespace", kind=~"$kind"'
OBJECT = (
    Row(
        6,
        [
            Panel(
                "table",
                "Findings on this object",
                [Query(replicas_merged(f"fightwatch_finding_info{{{OBJ}, {INCIDENT}}}"))],
            )
        ],
    ),
    Row(
        8,
        [
            series("Handovers", replicas_merged(f"{HANDOVERS}{{{OBJ}}}") + OF_INCIDENT, "{{type}} {{name}}"),
            series(
                "Writes per minute to the object",
                replicas_merged(f"{WRITES_PER_MINUTE}{{{OBJ}}}") + OF_INCIDENT,
                "{{type}} {{name}}",
            ),
        ],
    ),
    Row(
        8,
        [
            series(
                "Writes by manager (this kind in this namespace)",
                per_second(WRITES, "manager, operation", selector=KIND_NS, leading=True),
                "{{manager}} ({{operation}})",
                description="Write counters carry no object name (bounded cardinality): this is the object's kind "
                "in its namespace.",
                unit="wps",
            )
        ],
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
