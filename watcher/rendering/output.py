"""Findings for people (a table, fitted to the terminal) and for programs (JSON or YAML).

For programs, one JSON object per line, or the same objects as a YAML stream: a stable interface.

The JSON form is shared with the live watcher's `/api/v1/findings`; its fields are documented in docs/output.md.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import textwrap
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import IO, Any, Final

import orjson
import yaml

from watcher.detection.incidents import assign, group, incident_id, severity
from watcher.model import Finding, FindingState, FindingType, Incident, ObjectRef, WriterCount, format_time, moment
from watcher.rendering.columns import Cell, Column, lay_out


def severity_order(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first: active before resolved, then by write rate, then by handovers."""
    return sorted(findings, key=severity)


def finding_json(finding: Finding, incident: str | None = None) -> dict[str, Any]:
    """Return a finding's JSON object.

    `incident`: the id of the incident it is shown in (`incidents.assign`: a consequence's is its root
    cause's); by default its own pattern's.
    """
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
        "writes_per_minute": number_json(finding.writes_per_minute),
        "flip_period_seconds": None if finding.flip_period is None else number_json(round(finding.flip_period, 3)),
        "first_seen": time_json(finding.first_seen),
        "detected_at": time_json(finding.detected_at),
        "last_seen": time_json(finding.last_seen),
        "resolved_at": None if finding.resolved_at is None else time_json(finding.resolved_at),
        "summary": finding.summary,
        "hint": finding.hint,
    }


def number_json(value: float) -> float | None:
    """Return a number as JSON holds it: null for NaN and the infinities (as orjson writes them; YAML would not)."""
    return value if math.isfinite(value) else None


def time_json(seconds: float) -> str | None:
    """Return a time as RFC 3339 (`format_time`); null where no RFC 3339 date can write it (`model.moment`).

    Such a time (unknown, or outside the years 1 to 9999) the readers refuse; it reaches a finding only through a bug.
    """
    return format_time(seconds) if moment(seconds) is not None else None


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
        "writes_per_minute": number_json(incident.writes_per_minute),
        "first_seen": time_json(incident.first_seen),
        "detected_at": time_json(incident.detected_at),
        "last_seen": time_json(incident.last_seen),
        "resolved_at": None if incident.resolved_at is None else time_json(incident.resolved_at),
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
        "restores": count.restores,
        "named_from": count.named_from or None,
        "users": list(count.users),
    }


def finding_page(base: str | None, finding: Finding) -> str | None:
    """Return where a finding's card (with its timeline) is on the watcher's page.

    Given the page's address as users reach it (`serve.external_url`); None without one.
    """
    return f"{base.rstrip('/')}/findings#finding-{finding.id}" if base else None


def examples(incident: Incident) -> str:
    """Name a few of an incident's objects, and how many more: "Deployment.apps a/web, ... and 37 more"."""
    more = incident.objects - len(incident.examples)
    return ", ".join(ref.display() for ref in incident.examples) + (f" and {more} more" if more > 0 else "")


def incident_page(base: str | None, incident: Incident) -> str | None:
    """Where an incident's findings are on the watcher's page (`finding_page`); None without an address."""
    return f"{base.rstrip('/')}/findings?incident={incident.id}" if base else None


def write_json(findings: Iterable[Finding], out: IO[bytes], *, incidents: bool = False) -> None:
    """One JSON object per line: per finding, most severe first; or (`incidents`) per incident."""
    for document in _documents(findings, incidents=incidents):
        out.write(orjson.dumps(document) + b"\n")


def _documents(findings: Iterable[Finding], *, incidents: bool) -> Iterator[dict[str, Any]]:
    if incidents:
        yield from (incident_json(incident) for incident in group(findings))
        return
    findings = list(findings)
    incident_of = assign(findings)
    for finding in severity_order(findings):
        yield finding_json(finding, incident_of[finding.id])


def write_yaml(findings: Iterable[Finding], out: IO[str], *, incidents: bool = False) -> None:
    """Write the objects of `write_json`, in its order, as a YAML stream.

    One document (`---`) per finding or incident.
    """
    documents = _documents(findings, incidents=incidents)
    yaml.dump_all(documents, out, Dumper=_YAML_DUMPER, explicit_start=True, sort_keys=False, allow_unicode=True)


_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # (libyaml's, where PyYAML was built with it)


WATCH_TYPES: Final = (FindingType.FIGHT, FindingType.HOT_LOOP)
REQUEST_TYPES: Final = (FindingType.CONFLICT_STORM, FindingType.APPLY_CONFLICT, FindingType.NOOP_WRITES)


def counted(findings: Iterable[Finding], *, watch: bool, requests: bool) -> str:
    """Return the totals' first line, by every type the analysis could find.

    E.g. `2 fights, 0 hot loops (1 active).`; the types are the watch's and the audit requests'.
    """
    findings = list(findings)
    counts = Counter(f.type for f in findings)
    kinds = [*(WATCH_TYPES if watch else ()), *(REQUEST_TYPES if requests else ())]
    active = sum(f.state is FindingState.ACTIVE for f in findings)
    return f"{', '.join(k.counted(counts[k]) for k in kinds)} ({active} active)."


def write_findings(findings: list[Finding], output: str, *, incidents: bool = False, totals: str, empty: str) -> None:
    """Write the findings on standard output as `-o` asks.

    `table` (cut to the terminal), `wide`, `json`, `yaml`. With `json` and `yaml` standard output holds the findings
    only, for a pipeline to read; the `totals` (what was read) go to standard error.
    """
    if output in ("json", "yaml"):
        if output == "json":
            write_json(findings, sys.stdout.buffer, incidents=incidents)
        else:
            write_yaml(findings, sys.stdout, incidents=incidents)
        sys.stdout.flush()
        print(totals, file=sys.stderr)
        return
    width = table_width(sys.stdout, wide=output == "wide")
    write_table(findings, sys.stdout, totals=totals, empty=empty, width=width)
    sys.stdout.flush()


def table_width(stream: IO[str], *, wide: bool = False) -> int | None:
    """Return the width to cut the table to.

    `$COLUMNS` when set (as `ls`, `ps` and Python's shutil honour it), else the terminal's when `stream` is one; None
    (every cell whole) for `-o wide` and when the output is piped or redirected, so that grep and files get the whole
    text (kubectl never cuts its tables).
    """
    if wide:
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (AttributeError, OSError, ValueError):  # (no file descriptor: a StringIO, a closed stream)
        return None


def write_table(
    findings: Iterable[Finding],
    out: IO[str],
    *,
    totals: str,
    empty: str = "No controller fights or hot loops found.",
    width: int | None = None,
) -> None:
    """Write the findings as a table, then each one's summary and hint, then the `totals`.

    `width` (`table_width`): no line is longer; None: the table's cells whole, the text wrapped at the terminal's width
    (else 160).
    """
    findings = list(findings)
    incidents = group(findings)
    ordered, incident_of = _by_incident(incidents, findings)
    wrap = width if width is not None else shutil.get_terminal_size((160, 24)).columns
    if not ordered:
        out.write(_wrap(empty, wrap, indent="") + "\n")
    else:
        shared = [(n, i) for n, i in enumerate(incidents, 1) if len(i.members) > 1]
        for number, incident in shared:
            follow = len(incident.consequences)
            tail = f"; {follow} finding{'s' * (follow != 1)} follow{'s' * (follow == 1)} from it" if follow else ""
            line = f"Incident {number} ({incident.id}): {incident.summary}{tail}."
            out.write(_wrap(line, wrap, indent="   ") + "\n")
        if shared:
            out.write("\n")
        columns = _COLUMNS if shared else [c for c in _COLUMNS if c.header != "INCIDENT"]
        for line in lay_out(columns, _rows(ordered, incident_of if shared else None), width):
            out.write(line + "\n")
        out.write("\n")
        for number, f in enumerate(ordered, 1):
            out.write(_wrap(f"{number}. {f.summary}.", wrap, indent="   ") + "\n")
            out.write(_wrap(f"Hint: {f.hint}", wrap, indent="   ", first="   ") + "\n")
    out.write("\n" + "\n".join(_wrap(line, wrap, indent="   ") for line in totals.splitlines()) + "\n")


# The table's columns, most important first; the long ones are cut, and the last ones dropped, to fit a width.
_COLUMNS: Final = (
    Column("#"),
    Column("INCIDENT", drop=4),
    Column("TYPE"),
    Column("STATE"),
    Column("OBJECT", cut="middle", minimum=32),
    Column("WRITERS", cut="end", minimum=20),
    Column("FIELDS", cut="end", minimum=16),
    Column("HANDOVERS", drop=2),
    Column("RATE/MIN", drop=3),
    Column("SINCE", drop=1),
)


def _rows(ordered: list[Finding], incident_of: dict[str, int] | None) -> list[list[Cell]]:
    """Return the table's cells, whole, with shorter forms for a narrow terminal.

    The shorter forms: the object without its API group, the writers by manager only. An INCIDENT column only where some
    incident has several findings.
    """
    rows: list[list[Cell]] = []
    for number, f in enumerate(ordered, 1):
        rows.append(
            [
                str(number),
                str(incident_of[f.id]) if incident_of is not None else "",
                f.type.label,
                f.state.value,
                (f.object.display(), replace(f.object, api_group="").display()),
                (
                    ", ".join(c.writer.display() for c in f.writers),
                    ", ".join(dict.fromkeys(c.writer.manager or "(unattributed)" for c in f.writers)),
                ),
                ", ".join(f.fields) or "-",
                str(f.handovers) if f.type is FindingType.FIGHT else "-",
                f"{f.writes_per_minute:g}",
                format_time(f.first_seen),
            ]
        )
    return rows if incident_of is not None else [row[:1] + row[2:] for row in rows]


def _by_incident(incidents: list[Incident], findings: Iterable[Finding]) -> tuple[list[Finding], dict[str, int]]:
    """Order the findings by their incidents, and number each one's incident.

    Most severe first; each incident's consequences after its own findings.
    """
    by_id = {f.id: f for f in findings}
    ordered: list[Finding] = []
    numbers: dict[str, int] = {}
    for number, incident in enumerate(incidents, 1):
        for finding_id in incident.members:
            ordered.append(by_id[finding_id])
            numbers[finding_id] = number
    return ordered, numbers


def _wrap(text: str, width: int, *, indent: str, first: str = "") -> str:
    return textwrap.fill(
        text, width=max(width, 20), initial_indent=first, subsequent_indent=indent, break_on_hyphens=False
    )
