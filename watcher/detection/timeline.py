"""A finding's record of writes to its object, for the page and the report to draw.

It is kept while the finding is open. The record (`model.Timeline`) holds the writers (lanes), and the writes one by one
(marks), the recent ones, with the earlier ones folded into counts over time (bins).

Bounded: at most `timeline.marks` marks, 8 bytes each in one `array` (time in microseconds, lane, kind: see
`model.mark_word`); when a mark more would not fit, the oldest quarter is folded into counts per writer over the
span it covered (a fold: a row of six numbers per writer, 48 bytes, in a second `array`), and at most
`timeline.bins` folds are kept, neighbours merged in pairs beyond it. So a finding's record stays under
`8 * marks` bytes plus `48 * bins` per writer, however long it lasts; the first writes of a finding that lasts for
days are counts over the hours they spanned, its last hundreds of writes are marks.

What is known before a finding was detected: a fight's contested handovers (from the object's handover log), so
its record starts with the writes that handed a contested field over, not every write (`partial`); a hot loop's
streak, as one bin per hot writer; a finding over requests, the conflicts or no-op writes of its streak as one bin.
"""

from __future__ import annotations

import bisect
from array import array
from collections import deque

from watcher.config import ResolveSettings, TimelineSettings
from watcher.model import CONFLICT, HANDOVER, MAX_LANES, Bin, Finding, Timeline, Writer, mark_word

_Counts = dict[int, list[float]]  # lane -> [writes, handovers, conflicts]
_ROW = 6  # a fold's row per lane: start, end, lane, writes, handovers, conflicts


def _rows(start: float, end: float, counts: _Counts) -> array[float]:
    rows = array("d")
    for lane in sorted(counts):
        rows.extend((start, end, float(lane), *counts[lane]))
    return rows


def _merged_pairs(folds: array[float]) -> array[float]:
    """Merge the folds (runs of rows with one span) with their neighbour in pairs: half as many."""
    spans: list[tuple[float, float, _Counts]] = []
    for i in range(0, len(folds), _ROW):
        start, end, lane, writes, handovers, conflicts = folds[i : i + _ROW]
        if not spans or spans[-1][:2] != (start, end):
            spans.append((start, end, {}))
        spans[-1][2][int(lane)] = [writes, handovers, conflicts]
    merged = array("d")
    for i in range(0, len(spans), 2):
        start, end, counts = spans[i]
        if i + 1 < len(spans):
            later_start, later_end, later = spans[i + 1]
            start, end = min(start, later_start), max(end, later_end)
            for index, added in later.items():
                mine = counts.setdefault(index, [0.0, 0.0, 0.0])
                for k in range(3):
                    mine[k] += added[k]
        merged.extend(_rows(start, end, counts))
    return merged


class Record:
    """The write record of one open finding (see the module docstring)."""

    __slots__ = ("fold_count", "folds", "lanes", "last", "limit", "max_folds", "partial", "resolve", "words")

    def __init__(self, settings: TimelineSettings, resolve: ResolveSettings) -> None:
        self.limit = settings.marks
        self.max_folds = settings.bins
        self.resolve = resolve
        self.lanes: list[Writer] = []
        self.words = array("Q")
        self.folds = array("d")  # rows of `_ROW` numbers, one per lane of each fold, in time order
        self.fold_count = 0
        self.last = -1  # the last write recorded (the object's write counter, or the request's number)
        self.partial = False

    def lane(self, writer: Writer) -> int:
        """Return the lane of a writer (a new one at the end).

        Beyond `MAX_LANES` writers, the last lane is shared.
        """
        lanes = self.lanes
        for index, known in enumerate(lanes):
            if known == writer:
                return index
        if len(lanes) < MAX_LANES:
            lanes.append(writer)
        return len(lanes) - 1

    def manager_lane(self, manager: str) -> int:
        """Return the lane of a field manager, as API requests name a writer.

        The first lane of that manager, whatever its operation and subresource, else a new one.
        """
        for index, known in enumerate(self.lanes):
            if known.manager == manager:
                return index
        return self.lane(Writer(manager))

    def add(self, at: float, lane: int, kind: int) -> None:
        """Record one write; fold the oldest quarter when full.

        Writes come in time order: a late one, e.g. a conflict from an audit batch, goes where its time says.
        """
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
            self._keep(_rows(start, end, {lane: [writes, handovers, conflicts]}))

    def timeline(self, flip_period: float | None = None) -> Timeline:
        """Return the snapshot sinks draw.

        `flip_period`: a fight's, which sets how long it must be quiet to resolve.
        """
        folds = self.folds
        bins = tuple(
            Bin(folds[i], folds[i + 1], int(folds[i + 2]), int(folds[i + 3]), int(folds[i + 4]), int(folds[i + 5]))
            for i in range(0, len(folds), _ROW)
        )
        quiet = quiet_period(self.resolve, flip_period)
        return Timeline(tuple(self.lanes), self.words.tobytes(), bins, quiet, self.partial)

    def _fold_oldest(self, count: int) -> None:
        words = self.words
        counts: _Counts = {}
        for word in words[:count]:
            c = counts.setdefault((word >> 4) & 0xFF, [0.0, 0.0, 0.0])
            c[0] += 1
            c[1] += (word & HANDOVER) != 0
            c[2] += (word & CONFLICT) != 0
        start, end = (words[0] >> 12) / 1_000_000, (words[count - 1] >> 12) / 1_000_000
        del words[:count]
        self._keep(_rows(start, end, counts))

    def _keep(self, rows: array[float]) -> None:
        """Add a fold (after the others: folds are made oldest first); merge neighbours in pairs beyond the limit."""
        self.folds.extend(rows)
        self.fold_count += 1
        if self.fold_count > self.max_folds:
            self.folds = _merged_pairs(self.folds)
            self.fold_count = (self.fold_count + 1) // 2


def new_record(settings: TimelineSettings, resolve: ResolveSettings) -> Record | None:
    """Make a record for a finding just opened, or None when timelines are off (`timeline.marks: 0`)."""
    return Record(settings, resolve) if settings.marks else None


def keep_resolved(resolved: deque[Finding], finding: Finding, keep: int) -> None:
    """Add a resolved finding to the engine's `resolved`.

    The one that falls out of the `keep` most recent there gives up its timeline (`timeline.resolved`: what a page shows
    of past findings is their numbers).
    """
    resolved.append(finding)
    index = len(resolved) - keep - 1
    if index >= 0 and (old := resolved[index]).timeline is not None:
        resolved[index] = old.untimed()


def quiet_period(resolve: ResolveSettings, flip_period: float | None) -> float:
    """Return how long a finding must go without a write to resolve.

    `resolve.after`, or for a fight `flip_periods` of its flip period when that is longer.
    """
    return max(resolve.after, resolve.flip_periods * flip_period) if flip_period else resolve.after


__all__ = ["Record", "keep_resolved", "new_record", "quiet_period"]
