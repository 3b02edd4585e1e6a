"""What a timeline says in words.

The sentence a screen reader reads for the drawing, the tooltips of groups and bins, the users behind each writer.
Counted as the model counts them: a bin's writes take in the rejected ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from watcher.model import CONFLICT, HANDOVER, Bin, Finding, Mark, Timeline
from watcher.rendering.timeline.axis import clock, date


def folded(fold: Bin, detected: float) -> str:
    """`31 writes before detection` (a hot loop's streak), `60 writes earlier` (folded to keep the record small)."""
    when = "before detection" if fold.end <= detected else "earlier"
    return f"{fold.writes:,} writes {when}"


def users_by_manager(finding: Finding) -> dict[str | None, str]:
    """Return the users behind each field manager, as audit events named them.

    Writers first, then the clients of requests.
    """
    users: dict[str | None, list[str]] = {}
    for count in finding.writers:
        users.setdefault(count.writer.manager, []).extend(count.users)
    for client in finding.clients:
        if client.user:
            users.setdefault(client.manager, []).append(client.user)
    return {manager: ", ".join(dict.fromkeys(names)) for manager, names in users.items() if names}


def describe(timeline: Timeline, marks: Sequence[Mark], first: float, last: float) -> str:
    """`2 writers, 14 writes, 5 handovers between 10:01:02 and 10:05:09 UTC`."""
    conflicts = sum(m.kind & CONFLICT != 0 for m in marks) + sum(b.conflicts for b in timeline.bins)
    handovers = sum(m.kind & HANDOVER != 0 for m in marks) + sum(b.handovers for b in timeline.bins)
    count = len(marks) + sum(b.writes for b in timeline.bins)
    writers = len(timeline.lanes)
    when = (
        f"between {clock(first)} and {clock(last)} UTC"
        if date(first) == date(last)
        else f"between {date(first)} {clock(first)} and {date(last)} {clock(last)} UTC"
    )
    return f"{_counted(writers, 'writer')}, {tally(count, handovers, conflicts)} {when}"


def tally(count: int, handovers: int, conflicts: int) -> str:
    """`14 writes, 5 handovers` (and `, 2 conflicts`): `count` takes in the rejected writes, told apart here."""
    text = f"{_counted(count - conflicts, 'write')}, {_counted(handovers, 'handover')}"
    return text + (f", {_counted(conflicts, 'conflict')}" if conflicts else "")


def attempts(count: int, handovers: int, conflicts: int) -> str:
    """`14 writes, 5 handovers, 3 of them rejected (409)`: a group's or a bin's count first, as drawn."""
    text = _counted(count, "write")
    text += f", {_counted(handovers, 'handover')}" if handovers else ""
    return text + (f", {conflicts:,} of them rejected (409 Conflict)" if conflicts else "")


def _counted(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'s' * (number != 1)}"
