"""The detection rules: a write's handovers in, a fight opened or grown out; its writers in, a hot loop.

- **Fight**: a field changed hands >= `min_handovers` times within the window and came *back* to an earlier owner
  or value at least `min_handovers - 1` times (A->B->A->B): a single correction (A->B->A) or an ownership
  migration (A->B->C) is not a fight. When one field manager alone flips the values (no other writer is named),
  two writers must be shown to stand behind it: by the audit events (two users write as that manager: `shared`),
  or by twice the flips (a value back `2 x (min_handovers - 1)` times) from a writer that does not report its
  object's status. A controller's own bookkeeping (its conditions toggling as its state changes, written through
  the status subresource) is not a fight without the audit's evidence.
- **Hot loop**: a writer's exponentially decaying write rate on one object stays at or above
  `min_writes_per_minute` for at least `min_writes` writes in a row (no gap longer than two time constants). Its
  writers are the hot ones and those writing the object along with them (two writes or more in their current
  streak): a client that changes the object's spec every few seconds (`kubectl rollout restart` in a loop) is named
  with its fields as what drives the loop, before the controller that reacts by rewriting the status.

Each rule is handed the object's state, the write and the event it came from, and returns the change of the
finding it opened or updated (None when nothing notable happened). Resolution is the engine's (see `engine.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from watcher.config import DetectionSettings, ResolveSettings, TimelineSettings
from watcher.detection import hints, values
from watcher.detection.attribution import Attribution, Write
from watcher.detection.events import ObjectEvent, event_object, object_ref
from watcher.detection.findings import absorb, notable, snapshot
from watcher.detection.handovers import Handover, Log
from watcher.detection.ignore import CONFIG, DEFAULT, NO_RULES, ObjectRules
from watcher.detection.state import ObjectState, OpenFinding, WriterRate, rate_of
from watcher.detection.timeline import Record, new_record
from watcher.model import HANDOVER, ChangeKind, FindingChange, FindingState, FindingType, Writer

CHURN = "churn"  # a contested path one writer churns, which a default ignore rule leaves out


class _Contest:
    """What came back often enough in one write.

    The contested paths, with the evidence of the first that needed some, and those the ignore rules leave out (path ->
    ignore.DEFAULT, ignore.CONFIG or CHURN).
    """

    __slots__ = ("evidence", "left_out", "paths")

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.evidence = ""
        self.left_out: dict[str, str] = {}


class FightRule:
    """Log each object's handovers and call a fight when a field keeps coming back (see the module docstring)."""

    def __init__(self, settings: DetectionSettings, new_log: Callable[[], Log]) -> None:
        self._new_log = new_log  # an empty handover log of the engine's attribution (`Attribution.new_log`)
        self._window = settings.fight.window
        self._backs = settings.fight.min_handovers - 1
        self._limit = settings.history
        self._timeline, self._resolve = settings.timeline, settings.resolve

    def observe(
        self,
        state: ObjectState,
        handovers: list[Handover],
        write: Write,
        event: ObjectEvent,
        *,
        shared: frozenset[tuple[str, str]] = frozenset(),
        rules: ObjectRules = NO_RULES,
    ) -> FindingChange | None:
        """Log the handovers of one write and open or grow the fight.

        `shared`: the writers (manager, subresource) the audit events show more than one user writing the object as.
        `rules`: the object's ignore rules. A fight over what they leave out is still found: over what only default
        rules leave out, between distinct writers, it is reported, marked with the rule's reason (`ignored`); over what
        the user's rules leave out (or one writer's churn a default rule leaves out), it is tracked silently
        (`silenced`), counted by the engine, never reported (see ignore.py).
        """
        history = state.history
        if history is None:
            history = state.history = self._new_log()
        # A field becomes contested only by coming back to an earlier owner or value: the log tells cheaply which may.
        candidates = history.record(handovers, horizon=write.at - self._window, limit=self._limit)
        contest = self._contest(history, candidates, handovers, shared, rules)
        finding = state.fight
        if finding is None:
            return self._opened(state, history, contest, write, event=event, rules=rules)
        if contest.paths and (finding.silenced or finding.ignored):  # (a fight no rule leaves out joins it)
            finding.ignored = ""
            if finding.silenced:  # (told from now on, as opened: it was never told)
                finding.silenced = ""
                finding.fields.clear()
                absorb(finding, [h for h in handovers if h.path in contest.paths])
                finding.evidence = contest.evidence
                return FindingChange(ChangeKind.OPENED, snapshot(finding, state, FindingState.ACTIVE, None))
        relevant = [h for h in handovers if h.path in contest.paths or h.path in finding.fields]
        if not relevant:
            return None
        before = (len(finding.fields), len(finding.writer_writes), finding.handovers)
        absorb(finding, relevant)
        finding.last_seen = write.at
        if not notable(before, (len(finding.fields), len(finding.writer_writes), finding.handovers)):
            return None
        return FindingChange(ChangeKind.UPDATED, snapshot(finding, state, FindingState.ACTIVE, None))

    def _contest(
        self,
        history: Log,
        candidates: list[str],
        handovers: list[Handover],
        shared: frozenset[tuple[str, str]],
        rules: ObjectRules,
    ) -> _Contest:
        """Tell which of the paths that may have come back are contested, and which of those the rules leave out."""
        contest = _Contest()
        for path in candidates:
            backs = history.backs(path)
            if backs < self._backs:
                continue
            found = self._evidence(history.single_writer(path), backs, shared)
            if found is None:
                continue
            origin = "" if rules.empty else _origin(rules, path, handovers)
            if origin == DEFAULT and found:  # (one writer's churn, which a default rule is there for: silent)
                contest.left_out[path] = CHURN
            elif origin:
                contest.left_out[path] = origin
            else:
                contest.paths.add(path)
                contest.evidence = contest.evidence or found
        return contest

    def _opened(
        self,
        state: ObjectState,
        history: Log,
        contest: _Contest,
        write: Write,
        *,
        event: ObjectEvent,
        rules: ObjectRules,
    ) -> FindingChange | None:
        """Open a fight over the contested paths, else over those the rules leave out (marked, or silent)."""
        if not contest.paths and not contest.left_out:
            return None
        marked = {p for p, origin in contest.left_out.items() if origin == DEFAULT}
        paths = contest.paths or marked or set(contest.left_out)
        involved = history.of(paths)
        finding = state.fight = OpenFinding(
            FindingType.FIGHT,
            object_ref(event),
            first_seen=involved[0].at,
            at=write.at,
            seq=involved[0].seq,
            version=write.version,
        )
        absorb(finding, involved)
        finding.evidence = contest.evidence
        finding.record = _fight_record(self._timeline, self._resolve, involved, write.seq)
        if not contest.paths and marked:
            finding.ignored = rules.reason(min(marked))
        elif not contest.paths:
            finding.silenced = CONFIG if CONFIG in contest.left_out.values() else CHURN
        return FindingChange(ChangeKind.OPENED, snapshot(finding, state, FindingState.ACTIVE, None))

    def _evidence(self, single: Writer | None, backs: int, shared: frozenset[tuple[str, str]]) -> str | None:
        """Tell why a field that came back often enough is contested.

        "" (distinct writers are named), `audit` (one manager that the audit events show several users behind), `flips`
        (one manager, twice the flips, not through the status subresource); None: one writer's own changes, not a fight
        (see the module docstring).
        """
        if single is None:
            return ""
        if single.manager is not None and (single.manager, single.subresource) in shared:
            return "audit"
        if single.subresource != "status" and backs >= 2 * self._backs:
            return "flips"
        return None


class HotLoopRule:
    """Feed each writer's decaying write rate and call a hot loop when it stays high (see the module docstring)."""

    def __init__(self, settings: DetectionSettings) -> None:
        hot = settings.hot_loop
        self._tau = hot.time_constant
        self._min_rate = hot.min_writes_per_minute
        self._min_writes = hot.min_writes
        self._timeline, self._resolve = settings.timeline, settings.resolve

    def observe(
        self, state: ObjectState, writers: list[Writer], write: Write, event: ObjectEvent, attribution: Attribution
    ) -> FindingChange | None:
        """Count a timed write of `writers` and open or grow the hot loop.

        Ignored writers are already left out. `attribution` tells which fields a writer owns (asked only when a hot loop
        needs it).
        """
        mine, hot = self._rates(state, writers, write)
        finding = state.hot
        if finding is None:
            if not hot:
                return None
            finding = state.hot = self._open(state.rates or (), hot, writers, write=write, event=event)
            before = None
        else:
            before = (len(finding.fields), len(finding.writer_writes), state.seq - finding.first_seq)
        for index, writer in enumerate(writers):  # (not `zip(..., strict=True)`: compiled, a call with keywords)
            rate = mine[index]
            count = finding.writer_writes.get(writer)
            if count is not None:
                finding.writer_writes[writer] = count + 1
            elif rate in hot or rate.streak >= 2:
                finding.writer_writes[writer] = rate.streak
        if hot:
            finding.last_seen = write.at
        _note_evidence(finding, state, write, event=event, attribution=attribution)
        if before is None:
            kind = ChangeKind.OPENED
        elif notable(before, (len(finding.fields), len(finding.writer_writes), state.seq - finding.first_seq)):
            kind = ChangeKind.UPDATED
        else:
            return None
        return FindingChange(kind, snapshot(finding, state, FindingState.ACTIVE, None))

    def _open(
        self,
        rates: tuple[WriterRate, ...],
        hot: list[WriterRate],
        writers: list[Writer],
        *,
        write: Write,
        event: ObjectEvent,
    ) -> OpenFinding:
        """Open a hot loop at this write, named after the write that began the streak.

        Not the one that crossed the threshold: the crossing depends on each replica's receive times, the streak's
        start, after a gap of two time constants, not. Its writers are the hot ones and those writing the object along
        with them (what drives the loop), each with the writes of its streak up to this write (which `observe` counts).
        """
        first = min(hot, key=lambda r: r.start_seq)
        finding = OpenFinding(
            FindingType.HOT_LOOP,
            object_ref(event),
            first_seen=first.start,
            at=write.at,
            seq=first.start_seq,
            version=first.start_version or write.version,
        )
        horizon = write.at - 2 * self._tau
        along = [r for r in rates if r not in hot and r.streak >= 2 and r.last >= horizon]
        finding.record = record = new_record(self._timeline, self._resolve)
        for rate in (*hot, *along):
            writer = rate.writer
            earlier = rate.streak - (writer in writers)
            finding.writer_writes[writer] = earlier
            if record is not None:  # the streaks up to this write (which the engine records, as every write)
                record.fold(rate.start, write.at, record.lane(writer), writes=earlier)
        if record is not None:
            record.last = write.seq - 1
        return finding

    def _rates(
        self, state: ObjectState, writers: list[Writer], write: Write
    ) -> tuple[list[WriterRate], list[WriterRate]]:
        """Feed each writer's decaying rate; return their rates (in the order of `writers`) and those hot now."""
        at = write.at
        rates = state.rates or ()
        mine: list[WriterRate] = []
        hot: list[WriterRate] = []
        for writer in writers:
            rate = rate_of(rates, writer)
            if rate is None:
                rate = WriterRate(writer)
                rates = (*rates, rate)
            if rate.add(at, self._tau):  # a new streak
                rate.start_seq, rate.start_version = state.seq, write.version
            mine.append(rate)
            if rate.rate >= self._min_rate and rate.streak >= self._min_writes:
                hot.append(rate)
        state.rates = rates
        return mine, hot


def _origin(rules: ObjectRules, path: str, handovers: list[Handover]) -> str:
    """Which rules leave a contested path out (ignore.py's `origin`), as this write's handovers of it show."""
    found = ""
    for h in handovers:
        if h.path == path:
            origin = rules.origin(path, h.by, h.before)
            if not origin:
                return ""
            found = CONFIG if CONFIG in (found, origin) else origin
    return found


def _fight_record(
    settings: TimelineSettings, resolve: ResolveSettings, involved: list[Handover], seq: int
) -> Record | None:
    """Return the record of a fight just opened.

    What its object's handover log holds of the contested fields, one mark per write that handed one over (the writes
    between are not known: `partial`).
    """
    record = new_record(settings, resolve)
    if record is None:
        return None
    record.partial = True
    marked: set[int] = set()
    for h in involved:
        if h.seq not in marked:
            marked.add(h.seq)
            record.add(h.at, record.lane(h.by), HANDOVER)
    record.last = seq
    return record


def _note_evidence(
    finding: OpenFinding, state: ObjectState, write: Write, *, event: ObjectEvent, attribution: Attribution
) -> None:
    """Note what each writer of the hot loop changes (`writer_fields`), for the summary and the hint.

    The fields the write changed, each to the writer that owns it (all of them to the one writer there is); at a
    writer's first write that changed nothing visible (a metadata-only watch), the fields it owns (the status as one
    `status`), whatever its visible writes named before. And whether the loop writes timestamps, and reports status.
    """
    new: list[str] = []
    changed = write.changed
    for writer in write.writers:
        if writer not in finding.writer_writes:
            continue
        fields = finding.writer_fields.setdefault(writer, set())
        if changed:
            owned = attribution.owned(state, event, writer) if len(write.writers) > 1 else None
            mine = [p for p in changed if owned is None or p in owned]
        elif writer not in finding.quiet_writers:
            finding.quiet_writers.add(writer)
            owned = attribution.owned(state, event, writer) or frozenset()
            mine = sorted(
                {p for p in owned if not _is_status(p)} | ({"status"} if any(map(_is_status, owned)) else _NONE)
            )
            if owned and _owns_only_status(owned):
                finding.status_writes = True
        else:
            continue
        new += [p for p in mine if p not in finding.fields]  # (each field's value is looked at once)
        fields.update(mine)
        finding.fields.update(mine)
        if writer.subresource == "status":
            finding.status_writes = True
    if new and not finding.plain_values:
        texts = _texts(event, new)
        for path in new:
            text = texts.get(path)
            if text and hints.looks_like_timestamp(text):
                finding.timestamp_values = True
            else:  # (a value that is no timestamp, or none the watch shows: not the evidence of one)
                finding.plain_values = True
    if not finding.status_writes and changed and all(_is_status(p) for p in changed):
        finding.status_writes = True


_NONE: frozenset[str] = frozenset()


def _is_status(path: str) -> bool:
    return path == "status" or path.startswith(("status.", "status["))


def _texts(event: ObjectEvent, changed: list[str]) -> dict[str, str]:
    """Return the string values a write wrote at these paths, by path.

    Labels and annotations straight from the event; other sections from its object, decoded only then.
    """
    texts = {}
    sections: dict[str, dict[str, str]] = {}
    for path in changed:
        if path.startswith("metadata."):
            text = event.meta_value(path)
        else:
            section = path.split(".", 1)[0].split("[", 1)[0]
            found = sections.get(section)
            if found is None:
                found = sections[section] = values.leaf_texts(event_object(event), section)
            text = found.get(path)
        if text:
            texts[path] = text
    return texts


def _owns_only_status(fields: frozenset[str] | None) -> bool:
    return (
        fields is not None
        and all(p.startswith(("status", "metadata")) for p in fields)
        and any(p.startswith("status") for p in fields)
    )
