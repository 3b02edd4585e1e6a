"""Findings for people (a table) and for programs (one JSON object per line, a stable interface).

The JSON form is shared with the live watcher's `/api/v1/findings`; its fields are documented in README.md.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterable
from typing import IO, Any

import orjson

from watcher.model import Finding, FindingState, FindingType, WriterCount, format_time


def severity_order(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first: active before resolved, then by write rate, then by handovers."""
    return sorted(
        findings,
        key=lambda f: (
            f.state is not FindingState.ACTIVE,
            -f.writes_per_minute,
            -f.handovers,
            f.object.display(),
        ),
    )


def finding_json(finding: Finding) -> dict[str, Any]:
    ref = finding.object
    return {
        "id": finding.id,
        "type": finding.type.value,
        "state": finding.state.value,
        "object": {
            "apiGroup": ref.group,
            "apiVersion": ref.api_version or None,
            "kind": ref.kind or None,
            "resource": ref.resource or None,
            "subresource": ref.subresource or None,
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid or None,
        },
        "writers": [_writer_json(c) for c in finding.writers],
        "clients": [
            {
                "user": c.user,
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


def _writer_json(count: WriterCount) -> dict[str, Any]:
    w = count.writer
    return {
        "manager": w.manager,
        "operation": w.operation or None,
        "subresource": w.subresource or None,
        "writes": count.writes,
        "users": list(count.users),
    }


def finding_page(base: str | None, finding: Finding) -> str | None:
    """Where a finding's card (with its timeline) is on the watcher's page, given the page's address as users reach
    it (`serve.external_url`); None without one."""
    return f"{base.rstrip('/')}/findings#finding-{finding.id}" if base else None


def write_json(findings: Iterable[Finding], out: IO[bytes]) -> None:
    for finding in severity_order(findings):
        out.write(orjson.dumps(finding_json(finding)) + b"\n")


def write_table(
    findings: Iterable[Finding], out: IO[str], *, totals: str, empty: str = "No controller fights or hot loops found."
) -> None:
    ordered = severity_order(findings)
    if not ordered:
        out.write(empty + "\n")
    else:
        width = shutil.get_terminal_size((160, 24)).columns
        rows = [("#", "TYPE", "STATE", "OBJECT", "WRITERS", "FIELDS", "HANDOVERS", "RATE/MIN", "SINCE")]
        for number, f in enumerate(ordered, 1):
            rows.append(
                (
                    str(number),
                    f.type.label,
                    f.state.value,
                    f.object.display(),
                    ", ".join(c.writer.display() for c in f.writers),
                    _shorten(", ".join(f.fields) or "-", 60),
                    str(f.handovers) if f.type is FindingType.FIGHT else "-",
                    f"{f.writes_per_minute:g}",
                    format_time(f.first_seen),
                )
            )
        sizes = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            out.write("  ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)).rstrip() + "\n")
        out.write("\n")
        for number, f in enumerate(ordered, 1):
            out.write(_wrap(f"{number}. {f.summary}.", width, indent="   ") + "\n")
            out.write(_wrap(f"Hint: {f.hint}", width, indent="   ", first="   ") + "\n")
    out.write(f"\n{totals}\n")


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wrap(text: str, width: int, *, indent: str, first: str = "") -> str:
    return textwrap.fill(
        text, width=max(width, 60), initial_indent=first, subsequent_indent=indent, break_on_hyphens=False
    )
