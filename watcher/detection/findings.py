"""What findings say.

The immutable snapshot of an open finding (`state.OpenFinding`) that sinks get, with its summary sentence and (through
`hints`) the advice that goes with it; and how a fight's record grows.
"""

from __future__ import annotations

from watcher.detection import hints
from watcher.detection.handovers import Handover
from watcher.detection.state import ObjectState, OpenFinding
from watcher.model import Finding, FindingState, FindingType, Writer, WriterCount


def snapshot(finding: OpenFinding, state: ObjectState, status: FindingState, resolved_at: float | None) -> Finding:
    """Return the immutable view of a finding that sinks get.

    Its writers come most writes first (a hot loop's: what drives it before the writers that react, each with the fields
    it changed).
    """
    hot = finding.type is FindingType.HOT_LOOP
    counts = []
    for w, n in finding.writer_writes.items():
        mine = finding.writer_fields.get(w, _NONE)
        counts.append(WriterCount(w, n, fields=tuple(sorted(mine)), reacts=hot and reports_status(w, mine)))
    counts.sort(key=lambda c: (c.reacts, -c.writes, _sort_key(c.writer)))
    writers = tuple(counts)
    reactors = [c for c in writers if c.reacts]
    drivers = [c for c in writers if not c.reacts] if reactors else []
    evidence = hints.Evidence(
        type=finding.type,
        writers=frozenset(finding.writer_writes),
        fields=frozenset(finding.fields),
        by_ownership=finding.by_ownership,
        timestamp_values=finding.timestamp_values,
        status_writes=finding.status_writes,
        evidence=finding.evidence,
        drivers=tuple(c.writer.display() for c in drivers),
        driver_fields=tuple(dict.fromkeys(f for c in drivers for f in c.fields)),
        reactors=tuple(c.writer.display() for c in reactors),
    )
    if hot:  # (what drives the loop first, then what its writers react with)
        fields = tuple(dict.fromkeys([*(f for c in writers for f in c.fields), *sorted(finding.fields)]))
    else:
        fields = tuple(sorted(finding.fields))
    writes = state.seq - finding.first_seq + 1
    span = max(finding.last_seen - finding.first_seen, 1.0)
    rate = writes * 60.0 / span
    summary = _summary(finding, writers, fields, writes, rate)
    hint = hints.hint(evidence)
    cause = finding.cause
    if cause is not None:  # a cascade: see `engine.Engine._cause`
        if cause.key == finding.key:
            where = "the same object"
        elif cause.key == finding.owner:
            where = f"its controller {cause.ref.display()}"
        else:  # (an object its spec names: the Deployment an autoscaler scales)
            where = f"{cause.ref.display()}, which it refers to"
        what = f"the {cause.type.label} on {where}"
        summary += f"; it follows from {what} (finding {cause.id})"
        hint = f"This follows from {what}: stop that {cause.type.label} and this stops with it. {hint}"
    return Finding(
        id=finding.id,
        type=finding.type,
        state=status,
        object=finding.ref,
        writers=writers,
        fields=fields,
        handovers=finding.handovers,
        writes=writes,
        writes_per_minute=round(rate, 2),
        first_seen=finding.first_seen,
        detected_at=finding.detected_at,
        last_seen=finding.last_seen,
        resolved_at=resolved_at,
        flip_period=flip_period(finding),
        summary=summary,
        hint=hint,
        related=None if cause is None else cause.id,
        timeline=finding.record.timeline(flip_period(finding)) if finding.record is not None else None,
    )


def absorb(finding: OpenFinding, handovers: list[Handover]) -> None:
    """Add handovers (grouped by write) to a fight."""
    seqs = {h.seq for h in handovers}
    finding.handovers += len(seqs)
    counted: set[tuple[int, Writer]] = set()
    for h in handovers:
        finding.fields.add(h.path)
        finding.writer_fields.setdefault(h.by, set()).add(h.path)
        if h.after is not None:
            finding.by_ownership = True
        if h.before is not None:
            finding.writer_writes.setdefault(h.before, 0)
        if (h.seq, h.by) not in counted:
            counted.add((h.seq, h.by))
            finding.writer_writes[h.by] = finding.writer_writes.get(h.by, 0) + 1


def _sort_key(writer: Writer) -> tuple[str, str, str]:
    return (writer.manager or "", writer.operation, writer.subresource)


_NONE: frozenset[str] = frozenset()


def reports_status(writer: Writer, fields: set[str] | frozenset[str]) -> bool:
    """Tell whether a writer reports its object's state rather than setting what it wants.

    It does when it writes through the status subresource, or (servers before 1.22, which do not say) when everything it
    changed is status (its metadata too, as the deployment controller's revision annotation).
    """
    if writer.subresource:
        return writer.subresource == "status"
    return any(_is_status(p) for p in fields) and all(_is_status(p) or p.startswith("metadata.") for p in fields)


def _is_status(path: str) -> bool:
    return path == "status" or path.startswith(("status.", "status["))


def notable(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Report an update when fields or writers were added, or a count reached the next power of two."""
    return before[0] != after[0] or before[1] != after[1] or before[2].bit_length() != after[2].bit_length()


def flip_period(finding: OpenFinding) -> float | None:
    if finding.type is not FindingType.FIGHT or finding.handovers < 2:
        return None
    return max(finding.last_seen - finding.first_seen, 0.0) / (finding.handovers - 1)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _summary(
    finding: OpenFinding, writers: tuple[WriterCount, ...], fields: tuple[str, ...], writes: int, rate: float
) -> str:
    names = [c.writer.display() for c in writers]
    who = hints.listed(names)
    what = ", ".join(fields[:3]) + (f" (+{len(fields) - 3} more)" if len(fields) > 3 else "")
    span = _duration(max(finding.last_seen - finding.first_seen, 0.0))
    if finding.type is FindingType.FIGHT:
        period = flip_period(finding)
        every = f", one every {_duration(period)}" if period else ""
        if len(names) == 1:
            action = f"Writers all recorded as {who} keep flipping {what} back and forth"
        else:
            action = f"{who} keep {'taking' if finding.by_ownership else 'flipping'} {what} from each other"
        return f"{action}: {finding.handovers} handovers in {span}{every}"
    reactors = [c for c in writers if c.reacts]
    drivers = [c for c in writers if not c.reacts]
    if reactors and drivers:
        driving = hints.listed([c.writer.display() for c in drivers])
        changes = _some(list(dict.fromkeys(f for c in drivers for f in c.fields))) or "the object"
        reacting = hints.listed([c.writer.display() for c in reactors])
        return (
            f"{driving} {'keeps' if len(drivers) == 1 else 'keep'} changing {changes} and {reacting} "
            f"{'reacts' if len(reactors) == 1 else 'react'} every time, rewriting the status: {rate:.0f} writes/min, "
            f"{writes} writes in {span}"
        )
    target = f" ({what})" if what else ""
    verb = "rewrites" if len(names) == 1 else "rewrite"
    return f"{who} {verb} the object{target} at {rate:.0f} writes/min: {writes} writes in {span}"


def _some(fields: list[str]) -> str:
    return ", ".join(fields[:3]) + (f" (+{len(fields) - 3} more)" if len(fields) > 3 else "")


def request_summary(e: hints.RequestEvidence, count: int, span: float) -> str:
    """Return the sentence of a finding over API requests: who, how many, in what time."""
    when = _duration(span)
    rate = count * 60.0 / max(span, 1.0)
    if e.type is FindingType.CONFLICT_STORM:
        losers = [c for c in e.clients if c.conflicts]
        won = [c for c in e.clients if c.writes and not c.conflicts]
        winners = f"; meanwhile {hints.clients_text(won)} wrote it {sum(c.writes for c in won)} times" if won else ""
        verb = "keeps" if len(losers) == 1 else "keep"
        return (
            f"{hints.clients_text(losers)} {verb} failing to write it with 409 Conflict: {count} conflicts in {when} "
            f"({rate:.0f}/min){winners}"
        )
    if e.type is FindingType.APPLY_CONFLICT:
        against = f", conflicting with {', '.join(repr(o) for o in e.owners)}" if e.owners else ""
        over = f" over {', '.join(e.fields[:3])}" if e.fields and e.owners else ""
        who = hints.clients_text(e.clients)
        return f"{who} keeps failing to apply it: {count} applies rejected in {when}{against}{over}"
    return (
        f"{hints.clients_text(e.clients)} keeps writing it without changing anything: {count} no-op writes in {when} "
        f"({rate:.0f}/min)"
    )
