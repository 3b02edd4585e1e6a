"""What findings say.

The immutable snapshot of an open finding (`state.OpenFinding`) that sinks get, with its summary sentence and (through
`hints`) the advice that goes with it; and how a fight's record grows.
"""

from __future__ import annotations

from typing import Final

from watcher.detection import diagnosis, hints
from watcher.detection.handovers import Handover, cut
from watcher.detection.state import ObjectState, OpenFinding
from watcher.model import Finding, FindingState, FindingType, Traits, Writer, WriterCount


def snapshot(finding: OpenFinding, state: ObjectState, status: FindingState, resolved_at: float | None) -> Finding:
    """Return the immutable view of a finding that sinks get.

    Its writers come most writes first (a hot loop's: what drives it before the writers that react, each with the fields
    it changed; a fight's: only those that took part in the alternation, what drives it before what restores). Its
    summary and hint are told from it (`diagnosis.describe`).
    """
    hot = finding.type is FindingType.HOT_LOOP
    counts = []
    for w, n in finding.writer_writes.items():
        if not hot and not took_part(finding, w):
            continue  # (a writer that held the field once took no part in the alternation)
        mine = finding.writer_fields.get(w, _NONE)
        counts.append(WriterCount(w, n, fields=tuple(sorted(mine)), reacts=hot and reports_status(w, mine)))
    counts.sort(key=lambda c: (c.reacts, -c.writes, _sort_key(c.writer)))
    writers = tuple(counts)
    if hot:  # (what drives the loop first, then what its writers react with)
        fields = tuple(dict.fromkeys([*(f for c in writers for f in c.fields), *sorted(finding.fields)]))
    else:
        fields = tuple(sorted(finding.fields))
    writes = state.seq - finding.first_seq + 1
    span = max(finding.last_seen - finding.first_seen, 1.0)
    rate = writes * 60.0 / span
    cause = finding.cause
    period = flip_period(finding)
    what = ""
    if cause is not None:  # a cascade: see `engine.Engine._cause`
        if cause.key == finding.key:
            where = "the same object"
        elif cause.key == finding.owner:
            where = f"its controller {cause.ref.display()}"
        elif cause.owner == finding.key:
            where = f"{cause.ref.display()}, which it controls"
        else:  # (an object its spec names: the Deployment an autoscaler scales)
            where = f"{cause.ref.display()}, which it refers to"
        what = f"the {cause.type.label} on {where}"
    traits = Traits(
        by_ownership=finding.by_ownership,
        timestamp_values=finding.timestamp_values and not finding.plain_values,
        status_writes=finding.status_writes,
        evidence=finding.evidence,
        controller=finding.controller,
        controller_writer=finding.controller_writer,
        cause=what,
        ignored=finding.ignored,
    )
    made = Finding(
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
        flip_period=period,
        summary="",
        hint="",
        related=None if cause is None else cause.id,
        timeline=finding.record.timeline(period) if finding.record is not None else None,
        traits=traits,
    )
    return diagnosis.describe(made)


def absorb(finding: OpenFinding, handovers: list[Handover]) -> None:
    """Add handovers (grouped by write) to a fight, and what each writer's part in them was.

    A writer takes part in the alternation when it took a field back (to an owner or value it had before), took it
    twice, or lost it twice (`took_part`); one that wrote it once, and lost it, did not.
    """
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
        _note_part(finding, h)


def _note_part(finding: OpenFinding, h: Handover) -> None:
    owners, values = finding.seen.setdefault(h.path, (set(), set()))
    now = cut(h.now) if h.now is not None else None
    back = (h.after is not None and h.after in owners) or (now is not None and now in values)
    part = finding.parts.setdefault(h.by, [0, 0, 0])  # takes, backs, losses
    part[0] += 1
    part[1] += back
    if h.before is not None:
        owners.add(h.before)
        finding.parts.setdefault(h.before, [0, 0, 0])[2] += 1
    if h.was is not None:
        values.add(cut(h.was))


def took_part(finding: OpenFinding, writer: Writer) -> bool:
    """Whether a writer took part in a fight's alternation (see `absorb`)."""
    takes, backs, losses = finding.parts.get(writer, _NO_PART)
    return backs > 0 or takes > 1 or losses > 1


_NO_PART: Final = (0, 0, 0)


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


def request_summary(e: hints.RequestEvidence, count: int, span: float) -> str:
    """Return the sentence of a finding over API requests: who, how many, in what time."""
    when = diagnosis.duration(span)
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
