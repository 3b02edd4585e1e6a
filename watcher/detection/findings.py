"""Findings while they are open: the mutable record of a fight or hot loop, and its immutable snapshot.

Also the words: the summary sentence and (through `hints`) the advice that go with every snapshot.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from watcher.detection import hints
from watcher.detection.managed_fields import unpack_entries
from watcher.detection.values import value_text
from watcher.model import Finding, FindingState, FindingType, JSONObject, ObjectRef, Writer, WriterCount

if TYPE_CHECKING:
    from watcher.detection.attribution import ObjectState, Write
    from watcher.detection.handovers import Handover


class Rate:
    """One writer's write rate on one object: exponentially decaying, with the current streak of writes."""

    __slots__ = ("last", "rate", "start", "start_seq", "start_version", "streak")

    def __init__(self) -> None:
        self.rate = 0.0  # writes per minute, exponentially decaying
        self.last = -math.inf
        self.streak = 0  # writes without a gap longer than two time constants
        self.start = 0.0
        self.start_seq = 0
        self.start_version = ""  # resourceVersion of the streak's first write: names a hot loop it opens


class OpenFinding:
    """A finding while it is tracked (active), mutable; `snapshot` makes the immutable `Finding`."""

    __slots__ = (
        "by_ownership",
        "detected_at",
        "fields",
        "first_seen",
        "first_seq",
        "handovers",
        "id",
        "last_seen",
        "ref",
        "status_writes",
        "timestamp_values",
        "type",
        "writer_writes",
    )

    def __init__(
        self, kind: FindingType, ref: ObjectRef, *, first_seen: float, at: float, seq: int, version: str = ""
    ) -> None:
        self.type = kind
        self.ref = ref  # (the object's state keeps only a hash of its uid: names are read from events)
        self.id = finding_id(kind, ref, version=version, at=at)
        self.first_seen = first_seen
        self.detected_at = at
        self.last_seen = at
        self.first_seq = seq
        self.handovers = 0
        self.fields: set[str] = set()
        self.writer_writes: dict[Writer, int] = {}
        self.by_ownership = False
        self.timestamp_values = False
        self.status_writes = False


def finding_id(kind: FindingType, ref: ObjectRef, *, version: str, at: float) -> str:
    """Type, object and the resourceVersion of the write that opened the finding: the same on every replica and
    in every replay that saw that write (the receive time, used only when an object has no resourceVersion,
    is not)."""
    opened_by = version or repr(at)
    return hashlib.blake2b(f"{kind}/{ref.uid}/{opened_by}".encode(), digest_size=8).hexdigest()


def snapshot(finding: OpenFinding, state: ObjectState, status: FindingState, resolved_at: float | None) -> Finding:
    """The immutable view of a finding that sinks get."""
    writers = tuple(
        WriterCount(w, n) for w, n in sorted(finding.writer_writes.items(), key=lambda kv: (-kv[1], _sort_key(kv[0])))
    )
    evidence = hints.Evidence(
        type=finding.type,
        writers=frozenset(finding.writer_writes),
        fields=frozenset(finding.fields),
        by_ownership=finding.by_ownership,
        timestamp_values=finding.timestamp_values,
        status_writes=finding.status_writes,
    )
    fields = tuple(sorted(finding.fields))
    writes = state.seq - finding.first_seq + 1
    span = max(finding.last_seen - finding.first_seen, 1.0)
    rate = writes * 60.0 / span
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
        summary=_summary(finding, writers, fields, writes, rate),
        hint=hints.hint(evidence),
    )


def note_hot_evidence(
    finding: OpenFinding,
    obj: Callable[[], JSONObject],
    owned: Callable[[Writer], frozenset[str] | None],
    write: Write,
    hot: list[Writer],
) -> None:
    """What the hot writes change, for the summary and the hint. `obj` gives the object written, `owned` the
    fields a writer owns in it (both asked only when needed)."""
    finding.fields.update(write.changed)
    if not finding.timestamp_values and write.changed:
        written = obj()
        finding.timestamp_values = any(
            hints.looks_like_timestamp(text) for p in write.changed if (text := value_text(written, p))
        )
    if not finding.status_writes:
        finding.status_writes = any(w.subresource == "status" or _owns_only_status(owned(w)) for w in hot)


def owned_fields(state: ObjectState, writer: Writer) -> frozenset[str] | None:
    """The fields `writer` owns in the object's last version, as the Python engine keeps it."""
    entry = unpack_entries(state.entries).get(writer)
    return entry.fields if entry is not None else None


def _owns_only_status(fields: frozenset[str] | None) -> bool:
    return (
        fields is not None
        and all(p.startswith(("status", "metadata")) for p in fields)
        and any(p.startswith("status") for p in fields)
    )


def absorb(finding: OpenFinding, handovers: list[Handover]) -> None:
    """Add handovers (grouped by write) to a fight."""
    seqs = {h.seq for h in handovers}
    finding.handovers += len(seqs)
    counted: set[tuple[int, Writer]] = set()
    for h in handovers:
        finding.fields.add(h.path)
        if h.after is not None:
            finding.by_ownership = True
        if h.before is not None:
            finding.writer_writes.setdefault(h.before, 0)
        if (h.seq, h.by) not in counted:
            counted.add((h.seq, h.by))
            finding.writer_writes[h.by] = finding.writer_writes.get(h.by, 0) + 1


def _sort_key(writer: Writer) -> tuple[str, str, str]:
    return (writer.manager or "", writer.operation, writer.subresource)


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
    who = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else (names[0] if names else "?")
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
    target = f" ({what})" if what else ""
    verb = "rewrites" if len(names) == 1 else "rewrite"
    return f"{who} {verb} the object{target} at {rate:.0f} writes/min: {writes} writes in {span}"
