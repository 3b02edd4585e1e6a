"""Findings for people (a table) and for programs (one JSON object per line, a stable interface).

The JSON form is shared with the live watcher's `/api/v1/findings`; its fields are documented in README.md.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterable
from typing import IO, Any

import orjson

from watcher.detection.incidents import assign, group, incident_id, severity
from watcher.model import Finding, FindingType, Incident, ObjectRef, WriterCount, format_time


def severity_order(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first: active before resolved, then by write rate, then by handovers."""
    return sorted(findings, key=severity)


def finding_json(finding: Finding, incident: str | None = None) -> dict[str, Any]:
    """`incident`: the id of the incident it is shown in (`incidents.assign`: a consequence's is its root
    cause's); by default its own pattern's."""
    ref = finding.object
    return {
        "id": finding.id,
        "incident": incident or incident_id(finding),
        "type": finding.type.value,
        "state": finding.state.value,
        "object": _object_json(ref),
        "writers": [_writer_json(c) for c in finding.writers],
        "clients": [
            {
                "user": c.user,
                "pod": c.pod or None,
                "user_agent": c.user_agent,
                "manager": c.manager,
                "conflicts": c.conflicts,
                "writes": c.writes,
                "noop_writes": c.noop_writes,
            }
            for c in finding.clients
        ],
        "conflicts": finding.conflicts,
        "related": finding.related,
        "fields": list(finding.fields),
        "handovers": finding.handovers,
        "writes": finding.writes,
        "writes_per_minute": finding.writes_per_minute,
        "flip_period_seconds": None if finding.flip_period is None else round(finding.flip_period, 3),
        "first_seen": format_time(finding.first_seen),
        "detected_at": format_time(finding.detected_at),
        "last_seen": format_time(finding.last_seen),
        "resolved_at": None if finding.resolved_at is None else format_time(finding.resolved_at),
        "summary": finding.summary,
        "hint": finding.hint,
    }


def incident_json(incident: Incident) -> dict[str, Any]:
    return {
        "id": incident.id,
        "type": incident.type.value,
        "state": incident.state.value,
        "summary": incident.summary,
        "writers": [_writer_json(c) for c in incident.writers],
        "fields": list(incident.fields),
        "objects": incident.objects,
        "namespaces": [n or None for n in incident.namespaces],
        "kinds": list(incident.kinds),
        "examples": [_object_json(ref) for ref in incident.examples],
        "findings": list(incident.findings),
        "consequences": list(incident.consequences),
        "writes_per_minute": incident.writes_per_minute,
        "first_seen": format_time(incident.first_seen),
        "detected_at": format_time(incident.detected_at),
        "last_seen": format_time(incident.last_seen),
        "resolved_at": None if incident.resolved_at is None else format_time(incident.resolved_at),
        "hint": incident.hint,
    }


def _object_json(ref: ObjectRef) -> dict[str, Any]:
    return {
        "apiGroup": ref.group,
        "apiVersion": ref.api_version or None,
        "kind": ref.kind or None,
        "resource": ref.resource or None,
        "subresource": ref.subresource or None,
        "namespace": ref.namespace,
        "name": ref.name,
        "uid": ref.uid or None,
    }


def _writer_json(count: WriterCount) -> dict[str, Any]:
    w = count.writer
    return {
        "manager": w.manager,
        "operation": w.operation or None,
        "subresource": w.subresource or None,
        "display": w.display(),
        "note": w.note or None,
        "writes": count.writes,
        "fields": list(count.fields),
        "reacts": count.reacts,
        "users": list(count.users),
    }


def finding_page(base: str | None, finding: Finding) -> str | None:
    """Where a finding's card (with its timeline) is on the watcher's page, given the page's address as users reach
    it (`serve.external_url`); None without one."""
    return f"{base.rstrip('/')}/findings#finding-{finding.id}" if base else None


def examples(incident: Incident) -> str:
    """A few of an incident's objects by name, and how many more: "Deployment.apps a/web, ... and 37 more"."""
    more = incident.objects - len(incident.examples)
    return ", ".join(ref.display() for ref in incident.examples) + (f" and {more} more" if more > 0 else "")


def incident_page(base: str | None, incident: Incident) -> str | None:
    """Where an incident's findings are on the watcher's page (`finding_page`); None without an address."""
    return f"{base.rstrip('/')}/findings?incident={incident.id}" if base else None


def write_json(findings: Iterable[Finding], out: IO[bytes], *, incidents: bool = False) -> None:
    """One JSON object per line: per finding, most severe first; or (`incidents`) per incident."""
    if incidents:
        for incident in group(findings):
            out.write(orjson.dumps(incident_json(incident)) + b"\n")
        return
    findings = list(findings)
    incident_of = assign(findings)
    for finding in severity_order(findings):
        out.write(orjson.dumps(finding_json(finding, incident_of[finding.id])) + b"\n")


def write_table(
    findings: Iterable[Finding], out: IO[str], *, totals: str, empty: str = "No controller fights or hot loops found."
) -> None:
    findings = list(findings)
    incidents = group(findings)
    ordered, incident_of = _by_incident(incidents, findings)
    if not ordered:
        out.write(empty + "\n")
    else:
        width = shutil.get_terminal_size((160, 24)).columns
        shared = [(n, i) for n, i in enumerate(incidents, 1) if len(i.members) > 1]
        for number, incident in shared:
            follow = len(incident.consequences)
            tail = f"; {follow} finding{'s' * (follow != 1)} follow{'s' * (follow == 1)} from it" if follow else ""
            line = f"Incident {number} ({incident.id}): {incident.summary}{tail}."
            out.write(_wrap(line, width, indent="   ") + "\n")
        if shared:
            out.write("\n")
        rows = _rows(ordered, incident_of if shared else None)
        sizes = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            out.write("  ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)).rstrip() + "\n")
        out.write("\n")
        for number, f in enumerate(ordered, 1):
            out.write(_wrap(f"{number}. {f.summary}.", width, indent="   ") + "\n")
            out.write(_wrap(f"Hint: {f.hint}", width, indent="   ", first="   ") + "\n")
    out.write(f"\n{totals}\n")


def _rows(ordered: list[Finding], incident_of: dict[str, int] | None) -> list[list[str]]:
    """The table's cells; an INCIDENT column only where some incident has several findings."""
    rows = [["#", "INCIDENT", "TYPE", "STATE", "OBJECT", "WRITERS", "FIELDS", "HANDOVERS", "RATE/MIN", "SINCE"]]
    for number, f in enumerate(ordered, 1):
        rows.append(
            [
                str(number),
                str(incident_of[f.id]) if incident_of is not None else "",
                f.type.label,
                f.state.value,
                f.object.display(),
                ", ".join(c.writer.display() for c in f.writers),
                _shorten(", ".join(f.fields) or "-", 60),
                str(f.handovers) if f.type is FindingType.FIGHT else "-",
                f"{f.writes_per_minute:g}",
                format_time(f.first_seen),
            ]
        )
    return rows if incident_of is not None else [row[:1] + row[2:] for row in rows]


def _by_incident(incidents: list[Incident], findings: Iterable[Finding]) -> tuple[list[Finding], dict[str, int]]:
    """The findings in the order of their incidents (most severe first; each incident's consequences after its own
    findings), and each one's incident number."""
    by_id = {f.id: f for f in findings}
    ordered: list[Finding] = []
    numbers: dict[str, int] = {}
    for number, incident in enumerate(incidents, 1):
        for finding_id in incident.members:
            ordered.append(by_id[finding_id])
            numbers[finding_id] = number
    return ordered, numbers


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wrap(text: str, width: int, *, indent: str, first: str = "") -> str:
    return textwrap.fill(
        text, width=max(width, 60), initial_indent=first, subsequent_indent=indent, break_on_hyphens=False
    )
