"""Where each part of a finding's timeline goes.

A finding and the time now in, drawing primitives out: lanes, marks, groups, bins, connectors, ticks, in a fixed
viewBox. Pure, so it is tested without a browser; the SVG is written by the page's template from these primitives and
nothing else.

Readable for three writes and for five thousand: marks of one lane closer than `MIN_GAP` would overlap, so they
are drawn as one group (a box with their count) instead. Every mark is drawn once, alone or counted in exactly one
group, and every bin once; so the drawing stays a few hundred elements however many writes a timeline holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from watcher.model import CONFLICT, HANDOVER, Bin, Finding, Mark, Timeline
from watcher.rendering.timeline.axis import BREAK, Scale, Tick, clock, clock_span, date_caption, scale, ticks
from watcher.rendering.timeline.shapes import CONFLICT_PATH, lane_colour, lane_shape, shape_path
from watcher.rendering.timeline.words import attempts, describe, folded, users_by_manager

WIDTH: Final = 960.0  # the viewBox width; everything else is in these units
LEFT: Final = 16.0
RIGHT: Final = WIDTH - 16.0
ROW: Final = 16.0  # a row of annotations above the lanes
LANE: Final = 42.0  # a lane: its label, then its band of marks
LABEL: Final = 13.0  # the label's baseline below the lane's top
BAND: Final = 28.0  # the band's centre below the lane's top
AXIS: Final = 30.0  # the axis and its tick labels
MIN_GAP: Final = 5.0  # marks closer than this overlap: drawn as a group
MAX_GROUP: Final = 64.0  # a group spans at most this, so a long dense stretch reads as counts along it
PAD: Final = 4.0  # room around a group's marks in its box
MIN_BOX: Final = 12.0  # a group's box is at least this wide: room for a digit
CHAR: Final = 6.6  # the width of a character of 12-unit text, about, to tell whether a label fits
WIDE_CHAR: Final = 10.6  # ... of the larger text a phone shows (the page's style), for labels that must not overlap
RADIUS: Final = {"write": 5.0, "handover": 6.5}

_Run = Sequence[tuple[float, Mark]]  # marks of one lane too close to draw apart, each with its x


@dataclass(frozen=True, slots=True)
class MarkView:
    x: float
    kind: str  # write, handover, conflict
    path: str  # its shape, centred on (x, the lane's band)
    title: str


@dataclass(frozen=True, slots=True)
class Group:
    """Marks too close to draw one by one: a box over their span with their count."""

    x: float
    width: float
    count: int
    handovers: int
    conflicts: int
    kind: str  # the most telling kind among them: conflict, else handover, else write
    label: str  # the count, where it fits
    title: str


@dataclass(frozen=True, slots=True)
class BinView:
    """Earlier writes folded into a count over `[start, end]` (`model.Bin`)."""

    x: float
    width: float
    y: float
    height: float
    count: int
    handovers: int
    conflicts: int
    label: str  # what fits of the count's words
    label_y: float  # its baseline: in a band of marks, clear of the lanes' labels
    title: str


@dataclass(frozen=True, slots=True)
class Lane:
    index: int
    writer: str  # writer.display()
    users: str  # the users seen writing as its manager, where audit events told
    shape: str
    colour: int
    top: float
    label_y: float  # the baseline of its label
    y: float  # the centre of its band of marks
    icon: str  # its shape, for the key beside its label
    marks: tuple[MarkView, ...]
    groups: tuple[Group, ...]
    bins: tuple[BinView, ...]
    writes: int  # every write it made on the record, marks and bins (rejected ones apart)
    handovers: int
    conflicts: int


@dataclass(frozen=True, slots=True)
class Connector:
    """A handover from the lane of the previous one to this one's, at its time."""

    x: float
    y1: float
    y2: float
    colour: int  # the taker's


@dataclass(frozen=True, slots=True)
class Annotation:
    """A labelled vertical line (`detected`) or region (`quiet`), its label in one of the rows above the lanes."""

    x: float
    width: float
    label: str
    label_x: float
    label_y: float
    anchor: str  # text-anchor: start or end


@dataclass(frozen=True, slots=True)
class Layout:
    width: float
    height: float
    left: float  # the axis runs from here to `right`
    right: float
    top: float  # of the first lane
    lane_height: float
    bottom: float  # of the last lane: the axis is drawn there
    lanes: tuple[Lane, ...]
    spanning: tuple[BinView, ...]  # bins of every lane (`Bin.lane` -1)
    connectors: tuple[Connector, ...]
    ticks: tuple[Tick, ...]
    end_label: str  # the time at the end of a broken axis ("" when not broken)
    breaks: tuple[tuple[float, float], ...]  # where the axis is broken (x, width), at most once
    detected: Annotation
    quiet: Annotation
    caption: str  # the date, said once
    description: str  # the drawing in a sentence, for screen readers
    partial: bool
    shown: frozenset[str]  # what the legend explains: kinds of marks (write, handover, conflict), group, bin


def layout(finding: Finding, timeline: Timeline, *, now: float) -> Layout:
    """Lay out one finding's timeline, as of `now` (which an active finding's axis runs to)."""
    marks = timeline.marks()
    first, last = _extent(finding, marks, timeline.bins)
    resolved = finding.resolved_at
    axis_end = max(resolved if resolved is not None else max(now, finding.last_seen), last)
    axis = scale(first, max(last, finding.detected_at, finding.last_seen), axis_end, left=LEFT, right=RIGHT)
    caption = date_caption(first, axis.axis_end)
    detected, quiet, rows = _annotations(finding, timeline, axis, caption=caption)
    top = rows * ROW + 6
    by_lane: list[list[Mark]] = [[] for _ in timeline.lanes]
    for mark in marks:
        by_lane[_lane_of(mark.lane, len(timeline.lanes))].append(mark)
    grouped = [_grouped(lane_marks, axis) for lane_marks in by_lane]
    users = users_by_manager(finding)
    lanes = tuple(
        _lane(index, timeline, by_lane[index], grouped[index], axis, top=top, users=users, detected=finding.detected_at)
        for index in range(len(timeline.lanes))
    )
    bottom = top + max(len(lanes), 1) * LANE
    alone = {mark for singles, _ in grouped for mark in singles}
    return Layout(
        width=WIDTH,
        height=bottom + AXIS,
        left=LEFT,
        right=RIGHT,
        top=top,
        lane_height=LANE,
        bottom=bottom,
        lanes=lanes,
        spanning=tuple(_spanning(b, axis, top=top, bottom=bottom) for b in timeline.bins if b.lane < 0),
        connectors=tuple(_connectors(marks, alone, lanes, axis)),
        ticks=tuple(ticks(axis)),
        end_label=clock(axis.axis_end) if axis.broken else "",
        breaks=((axis.middle, BREAK),) if axis.broken else (),
        detected=detected,
        quiet=quiet,
        caption=caption,
        description=describe(timeline, marks, first, last),
        partial=timeline.partial,
        shown=frozenset(
            {kind_name(m.kind) for m in marks}
            | ({"group"} if any(lane.groups for lane in lanes) else set())
            | ({"bin"} if timeline.bins else set())
        ),
    )


def _extent(finding: Finding, marks: Sequence[Mark], bins: Sequence[Bin]) -> tuple[float, float]:
    """Return the first and last time the record shows.

    The finding's first sighting where it shows nothing earlier.
    """
    times = [finding.first_seen] + [m.at for m in marks] + [t for b in bins for t in (b.start, b.end)]
    return min(times), max(times)


def kind_name(kind: int) -> str:
    """Name a mark's kind as the page does: a rejected write is a conflict, whatever else it was."""
    return "conflict" if kind & CONFLICT else "handover" if kind & HANDOVER else "write"


def _lane(
    index: int,
    timeline: Timeline,
    marks: Sequence[Mark],
    grouped: tuple[list[Mark], list[Group]],
    axis: Scale,
    *,
    top: float,
    users: dict[str | None, str],
    detected: float,
) -> Lane:
    lane_top = top + index * LANE
    bins = [b for b in timeline.bins if b.lane >= 0 and _lane_of(b.lane, len(timeline.lanes)) == index]
    singles, groups = grouped
    shape = lane_shape(index)
    conflicts = sum(m.kind & CONFLICT != 0 for m in marks) + sum(b.conflicts for b in bins)
    writer = timeline.lanes[index]
    return Lane(
        index=index,
        writer=writer.display(),
        users=users.get(writer.manager, ""),
        shape=shape,
        colour=lane_colour(index),
        top=lane_top,
        label_y=lane_top + LABEL,
        y=lane_top + BAND,
        icon=shape_path(shape, 4.5),
        marks=tuple(_mark(m, axis, shape) for m in singles),
        groups=tuple(groups),
        bins=tuple(
            _bin(b, axis, y=lane_top + BAND - 10, height=20, label_y=lane_top + BAND + 4, words=folded(b, detected))
            for b in bins
        ),
        writes=len(marks) + sum(b.writes for b in bins) - conflicts,
        handovers=sum(m.kind & HANDOVER != 0 for m in marks) + sum(b.handovers for b in bins),
        conflicts=conflicts,
    )


def _lane_of(lane: int, lanes: int) -> int:
    """Return a mark's lane, within the lanes there are.

    A record shares its last lane beyond `MAX_LANES` writers.
    """
    return min(lane, lanes - 1)


def _mark(mark: Mark, axis: Scale, shape: str) -> MarkView:
    kind = kind_name(mark.kind)
    path = CONFLICT_PATH if kind == "conflict" else shape_path(shape, RADIUS[kind])
    what = "write rejected with 409 Conflict" if kind == "conflict" else kind
    return MarkView(axis.x(mark.at), kind, path, f"{what} at {clock(mark.at, precise=True)} UTC")


def _grouped(marks: Sequence[Mark], axis: Scale) -> tuple[list[Mark], list[Group]]:
    """Group the marks of one lane (in time order) that would overlap.

    Return the marks that stand alone, and the groups: a mark joins the group before it when it is closer than `MIN_GAP`
    to its last mark and the group is not full.
    """
    runs: list[list[tuple[float, Mark]]] = []
    for mark in marks:
        x = axis.x(mark.at)
        run = runs[-1] if runs else None
        if run is not None and x - run[-1][0] < MIN_GAP and x - run[0][0] < MAX_GROUP:
            run.append((x, mark))
        else:
            runs.append([(x, mark)])
    singles = [run[0][1] for run in runs if len(run) == 1]
    groups = [
        _group(run, _box(run, runs[n - 1] if n else None, runs[n + 1] if n + 1 < len(runs) else None))
        for n, run in enumerate(runs)
        if len(run) > 1
    ]
    return singles, groups


def _box(run: _Run, before: _Run | None, after: _Run | None) -> tuple[float, float]:
    """Return the span of a group's box: its marks and a little room, up to halfway to its neighbours.

    A dense stretch cut into groups reads as boxes side by side, not overlapping.
    """
    low, high = run[0][0] - PAD, run[-1][0] + PAD
    if before is not None:
        low = max(low, (before[-1][0] + run[0][0]) / 2 + 0.75)
    if after is not None:
        high = min(high, (run[-1][0] + after[0][0]) / 2 - 0.75)
    middle = (low + high) / 2
    return (low, high) if high - low >= MIN_BOX else (middle - MIN_BOX / 2, middle + MIN_BOX / 2)


def _group(run: _Run, box: tuple[float, float]) -> Group:
    count = len(run)
    handovers = sum(m.kind & HANDOVER != 0 for _, m in run)
    conflicts = sum(m.kind & CONFLICT != 0 for _, m in run)
    kind = "conflict" if conflicts else "handover" if handovers else "write"
    low, high = box
    label = str(count) if len(str(count)) * CHAR + 4 <= high - low else ""
    title = f"{attempts(count, handovers, conflicts)}, {clock_span(run[0][1].at, run[-1][1].at, precise=True)}"
    return Group(low, high - low, count, handovers, conflicts, kind, label, title)


def _spanning(fold: Bin, axis: Scale, *, top: float, bottom: float) -> BinView:
    """Draw a bin of every lane: writes not told apart by writer, before detection.

    Such as a conflict storm's conflicts. Its label goes in the first lane's band, where no lane label is.
    """
    noun = "conflicts" if fold.conflicts == fold.writes else "writes"
    words = f"{fold.writes:,} {noun} before detection"
    return _bin(fold, axis, y=top + 2, height=bottom - top - 4, label_y=top + BAND + 4, words=words)


def _bin(fold: Bin, axis: Scale, *, y: float, height: float, label_y: float, words: str) -> BinView:
    x = axis.x(fold.start)
    width = max(axis.x(fold.end) - x, 3.0)
    label = next((t for t in (words, f"{fold.writes:,}") if len(t) * CHAR + 8 <= width), "")
    title = f"{attempts(fold.writes, fold.handovers, fold.conflicts)}, {clock_span(fold.start, fold.end)}"
    return BinView(x, width, y, height, fold.writes, fold.handovers, fold.conflicts, label, label_y, title)


def _connectors(marks: Sequence[Mark], alone: set[Mark], lanes: Sequence[Lane], axis: Scale) -> list[Connector]:
    """Join each handover drawn alone to the lane of the handover before it.

    The contested field passes from one writer to the next. Inside a group its count says it; so they are bounded by the
    marks drawn alone.
    """
    made: list[Connector] = []
    previous: int | None = None
    for mark in marks:
        if kind_name(mark.kind) != "handover":
            continue
        lane = _lane_of(mark.lane, len(lanes))
        if previous is not None and previous != lane and mark in alone:
            made.append(Connector(axis.x(mark.at), lanes[previous].y, lanes[lane].y, lanes[lane].colour))
        previous = lane
    return made


def _annotations(
    finding: Finding, timeline: Timeline, axis: Scale, *, caption: str
) -> tuple[Annotation, Annotation, int]:
    """Place the detection line and the quiet period, their labels in the rows above the lanes.

    The date and the quiet period's label go in the first row, the detection's beside them where it fits, else in a
    second. Return them, and how many rows.
    """
    end = axis.axis_end
    quiet_x = axis.x(finding.last_seen)
    if finding.resolved_at is not None:
        text = "quiet → resolved"
    else:
        text = f"resolves if quiet until {clock(finding.last_seen + timeline.quiet)}"
    quiet_end = axis.x(min(finding.last_seen + timeline.quiet, end))
    quiet = Annotation(quiet_x, max(quiet_end - quiet_x, 0.0), text, RIGHT, ROW - 3, "end")
    x = axis.x(finding.detected_at)
    width = len("detected") * WIDE_CHAR
    anchor, left = ("start", x + 4) if x + 4 + width <= RIGHT else ("end", x - 4 - width)
    free = LEFT + len(caption) * WIDE_CHAR + 8 <= left and left + width <= RIGHT - len(text) * WIDE_CHAR - 8
    row = 1 if free else 2
    label_x = left if anchor == "start" else left + width
    return Annotation(x, 0.0, "detected", label_x, row * ROW - 3, anchor), quiet, row
