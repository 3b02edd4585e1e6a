"""A finding's record of writes to its object, kept while it is open, for the page and the report to draw
(`model.Timeline`): the writers (lanes), and the writes one by one (marks), the recent ones, with the earlier ones
folded into counts over time (bins).

Bounded: at most `timeline.marks` marks, 8 bytes each in one `array` (time in microseconds, lane, kind: see
`model.mark_word`); when a mark more would not fit, the oldest quarter is folded into one bin per writer, and at
most `timeline.bins` folds are kept, neighbours merged in pairs beyond it. So a finding's record stays under
`8 * marks` bytes plus its bins (about 100 bytes each per writer), however long it lasts; the first writes of a
finding that lasts for days are counts over the hours they spanned, its last hundreds of writes are marks.

What is known before a finding was detected: a fight's contested handovers (from the object's handover log), so
its record starts with the writes that handed a contested field over, not every write (`partial`); a hot loop's
streak, as one bin per hot writer; a finding over requests, the conflicts or no-op writes of its streak as one bin.
"""

from __future__ import annotations

import bisect
from array import array
from collections import deque
from dataclasses import replace

from watcher.config import ResolveSettings, TimelineSettings
from watcher.model import CONFLICT, HANDOVER, MAX_LANES, Bin, Finding, Timeline, Writer, mark_word

_Counts = dict[int, list[int]]  # lane -> [writes, handovers, conflicts]


class Fold:
    """Writes folded into counts per lane over a span of time."""

    __slots__ = ("counts", "end", "start")

    def __init__(self, start: float, end: float, counts: _Counts) -> None:
        self.start = start
        self.end = end
        self.counts = counts

    def merged(self, later: Fold) -> Fold:
        counts = {lane: list(c) for lane, c in self.counts.items()}
        for lane, (writes, handovers, conflicts) in later.counts.items():
            mine = counts.setdefault(lane, [0, 0, 0])
            mine[0] += writes
            mine[1] += handovers
            mine[2] += conflicts
        return Fold(min(self.start, later.start), max(self.end, later.end), counts)


class Record:
    """The write record of one open finding (see the module docstring)."""

    __slots__ = ("folds", "lanes", "last", "limit", "max_folds", "partial", "resolve", "words")

    def __init__(self, settings: TimelineSettings, resolve: ResolveSettings) -> None:
        self.limit = settings.marks
        self.max_folds = settings.bins
        self.resolve = resolve
        self.lanes: list[Writer] = []
        self.words = array("Q")
        self.folds: list[Fold] = []
        self.last = -1  # the last write recorded (the object's write counter, or the request's number)
        self.partial = False

    def lane(self, writer: Writer) -> int:
        """The lane of a writer (a new one at the end; beyond `MAX_LANES` writers, the last lane is shared)."""
        lanes = self.lanes
        for index, known in enumerate(lanes):
            if known == writer:
                return index
        if len(lanes) < MAX_LANES:
            lanes.append(writer)
        return len(lanes) - 1

    def manager_lane(self, manager: str) -> int:
        """The lane of a field manager, as API requests name a writer: the first lane of that manager, whatever its
        operation and subresource, else a new one."""
        for index, known in enumerate(self.lanes):
            if known.manager == manager:
                return index
        return self.lane(Writer(manager))

    def add(self, at: float, lane: int, kind: int) -> None:
        """Record one write (in time order: a late one, e.g. a conflict from an audit batch, goes where its time
        says); fold the oldest quarter when full."""
        word = mark_word(at, lane, kind)
        words = self.words
        if not words or word >= words[-1]:
            words.append(word)
        else:
            words.insert(bisect.bisect_right(words, word), word)
        if len(words) > self.limit:
            self._fold_oldest(max(self.limit // 4, 1))

    def fold(self, start: float, end: float, lane: int, *, writes: int, handovers: int = 0, conflicts: int = 0) -> None:
        """Record writes known only as a count over a span of time (before the finding was detected)."""
        if writes > 0:
            self._keep(Fold(start, end, {lane: [writes, handovers, conflicts]}))

    def timeline(self, flip_period: float | None = None) -> Timeline:
        """The snapshot sinks draw; `flip_period`: a fight's, which sets how long it must be quiet to resolve."""
        bins = tuple(
            Bin(f.start, f.end, lane, *counts) for f in self.folds for lane, counts in sorted(f.counts.items())
        )
        quiet = quiet_period(self.resolve, flip_period)
        return Timeline(tuple(self.lanes), self.words.tobytes(), bins, quiet, self.partial)

    def _fold_oldest(self, count: int) -> None:
        words = self.words
        counts: _Counts = {}
        for word in words[:count]:
            c = counts.setdefault((word >> 4) & 0xFF, [0, 0, 0])
            c[0] += 1
            c[1] += (word & HANDOVER) != 0
            c[2] += (word & CONFLICT) != 0
        start, end = (words[0] >> 12) / 1_000_000, (words[count - 1] >> 12) / 1_000_000
        del words[:count]
        self._keep(Fold(start, end, counts))

    def _keep(self, fold: Fold) -> None:
        folds = self.folds
        bisect.insort(folds, fold, key=_start)
        if len(folds) > self.max_folds:
            self.folds = [
                folds[i].merged(folds[i + 1]) if i + 1 < len(folds) else folds[i] for i in range(0, len(folds), 2)
            ]


def _start(fold: Fold) -> float:
    return fold.start


def new_record(settings: TimelineSettings, resolve: ResolveSettings) -> Record | None:
    """A record for a finding just opened, or None when timelines are off (`timeline.marks: 0`)."""
    return Record(settings, resolve) if settings.marks else None


def keep_resolved(resolved: deque[Finding], finding: Finding, keep: int) -> None:
    """Add a resolved finding to the engine's `resolved`; the one that falls out of the `keep` most recent there
    gives up its timeline (`timeline.resolved`: what a page shows of past findings is their numbers)."""
    resolved.append(finding)
    index = len(resolved) - keep - 1
    if index >= 0 and (old := resolved[index]).timeline is not None:
        resolved[index] = replace(old, timeline=None)


def quiet_period(resolve: ResolveSettings, flip_period: float | None) -> float:
    """How long a finding must go without a write to resolve: `resolve.after`, or for a fight `flip_periods` of its
    flip period when that is longer."""
    return max(resolve.after, resolve.flip_periods * flip_period) if flip_period else resolve.after


__all__ = ["Fold", "Record", "keep_resolved", "new_record", "quiet_period"]
