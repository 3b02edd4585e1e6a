#!/usr/bin/env python3
"""What fightwatch says of each real fight and benign pattern (tests/fixtures/real), as a Markdown table.

Per fight, from the watch alone (metadata only, as `fightwatch run` watches) and with the audit log joined: found,
the writers named in the table and in the JSON, whether the writer that drives it is named first (where one side
maintains the object), whether the hint holds the fix the project documents (`tests.expectations.REAL_FIGHTS`), and
how soon it is told: the writes to the object from the fight's first handover to the finding, and the seconds.
Per benign pattern: what is flagged (nothing from the watch; the audit log's own findings where listed).

  .venv/bin/python scripts/real_fights_table.py
"""

from __future__ import annotations

import io

import orjson

from tests.expectations import REAL_BENIGN, REAL_FIGHTS, RealFight
from tests.unit.test_real_fights import analyse, fights_of, party, watch_events
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.model import Finding
from watcher.rendering.output import finding_json, write_table

MODES = {"watch": "metadata", "audit": "audit"}


def writes_until(scenario: str, finding: Finding) -> int:
    """The writes to the finding's object from its first handover to the moment it was found."""
    return sum(
        1
        for event in watch_events(scenario, Engine(Config().detection))
        if event.type != "DELETED"
        and event.uid == finding.object.uid
        and finding.first_seen <= (event.time or 0.0) <= finding.detected_at
    )


def named(finding: Finding) -> tuple[str, bool]:
    """The writers as the table names them, and whether the table and the JSON name the same ones."""
    out = io.StringIO()
    write_table([finding], out, totals="", empty="", width=10_000)
    names = [c.writer.display() for c in finding.writers]
    json = orjson.loads(orjson.dumps(finding_json(finding)))
    in_json = {w["manager"] or "(unattributed)" for w in json["writers"]}
    same = all(n in out.getvalue() for n in names) and in_json == {
        c.writer.manager or "(unattributed)" for c in finding.writers
    }
    return ", ".join(names), same


def row(scenario: str, expected: RealFight) -> str:
    cells: dict[str, list[str]] = {"found": [], "writers": [], "direction": [], "hint": [], "detection": []}
    for label, mode in MODES.items():
        findings, _ = analyse(scenario, mode, "native")
        fights = fights_of(findings, expected)
        cells["found"].append(f"{label}: {len(fights)}/{expected.findings}")
        wanted = expected.audited if mode == "audit" else expected.watch
        for fight in fights:
            names, same = named(fight)
            right = {party(c.writer) for c in fight.writers} == wanted
            cells["writers"].append(f"{label}: {names}{'' if right and same else ' ✗'}")
            if expected.drives is not None:
                first = party(fight.writers[0].writer) == expected.drives
                restorer = [party(c.writer) for c in fight.writers if c.restores] == [expected.restores]
                cells["direction"].append(f"{label}: {'✓' if first and restorer else '✗'}")
            hint = expected.hint in fight.hint and not any(p in fight.hint for p in expected.never)
            cells["hint"].append(f"{label}: {'✓' if hint else '✗'}")
            seconds = fight.detected_at - fight.first_seen
            cells["detection"].append(f"{label}: {writes_until(scenario, fight)} writes, {seconds:.0f} s")
    direction = "<br>".join(cells["direction"]) or "no side maintains it (either may yield)"
    return (
        f"| `{scenario}` | {'<br>'.join(cells['found'])} | {'<br>'.join(cells['writers'])} | {direction} | "
        f"{'<br>'.join(cells['hint'])} (“{expected.hint}”) | {'<br>'.join(cells['detection'])} |"
    )


def main() -> None:
    print("| fight | found | writers named (table = JSON) | driver first, restorer last | hint | detected after |")
    print("|---|---|---|---|---|---|")
    for scenario, expected in sorted(REAL_FIGHTS.items()):
        print(row(scenario, expected))
    print()
    print("| benign pattern | flagged from the watch | with the audit log | listed |")
    print("|---|---|---|---|")
    for scenario, listed in sorted(REAL_BENIGN.items()):
        said = []
        for mode in MODES.values():
            findings, _ = analyse(scenario, mode, "native")
            said.append(", ".join(f.type.value for f in findings) or "nothing")
        print(f"| `{scenario}` | {said[0]} | {said[1]} | {', '.join(t.value for t in listed) or 'nothing'} |")


if __name__ == "__main__":
    main()
