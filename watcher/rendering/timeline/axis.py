"""The time axis of a finding's timeline: which time goes where across the drawing, and its ticks.

Linear over the writes. What follows them is a quiet wait (a resolved finding's quiet period, or the minutes
between an active finding's last write and now) that can be far longer than the fight itself: drawn to scale, it
would squeeze a six-second fight into a few pixels. When it is much longer than the writes, it is compressed into
the last part of the width after a visible break, so the writes keep the room and the wait is still shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from watcher.model import moment, undated

MIN_SPAN: Final = 1.0  # seconds: writes all at one instant still get an axis this long (no zero division)
TAIL_RATIO: Final = 0.25  # a wait longer than this share of the writes' span is compressed
TAIL_SHARE: Final = 0.2  # ... into this share of the width
BREAK: Final = 14.0  # the gap that shows the axis is broken (viewBox units)
TICK_SPACING: Final = 120.0  # at least this far apart (viewBox units), for their labels to fit
EDGE: Final = 30.0  # a tick label this close to an end of the axis is aligned to it
# Round steps, in seconds: sub-second, seconds, minutes, hours, days.
STEPS: Final = (
    *(0.1, 0.2, 0.5),
    *(1, 2, 5, 10, 15, 30),
    *(60, 120, 300, 600, 900, 1800),
    *(3600, 7200, 10800, 21600, 43200),
)
DAY: Final = 86400


@dataclass(frozen=True, slots=True)
class Scale:
    """Time (epoch seconds) -> x.

    `[start, end]` maps linearly onto `[left, middle]`; when the axis is broken (`tail_end > end`), `[end, tail_end]`
    maps onto the rest up to `right`, after a gap of `BREAK`.
    """

    start: float
    end: float
    tail_end: float
    left: float
    middle: float
    right: float

    @property
    def broken(self) -> bool:
        return self.tail_end > self.end

    @property
    def axis_end(self) -> float:
        return self.tail_end if self.broken else self.end

    def x(self, at: float) -> float:
        if at <= self.end or not self.broken:
            return self.left + (at - self.start) / (self.end - self.start) * (self.middle - self.left)
        tail_left = self.middle + BREAK
        return tail_left + (at - self.end) / (self.tail_end - self.end) * (self.right - tail_left)


def scale(first: float, last: float, axis_end: float, *, left: float, right: float) -> Scale:
    """Return the scale for writes over `[first, last]` on an axis that runs on to `axis_end`.

    `axis_end` is `last` at least.
    """
    if last - first < MIN_SPAN:
        first = (first + last - MIN_SPAN) / 2
        last = first + MIN_SPAN
    span = last - first
    if axis_end - last <= span * TAIL_RATIO:
        end = max(axis_end, last)
        return Scale(first, end, end, left, right, right)
    end = last + span * 0.02  # a little room after the last write, before the break
    middle = right - (right - left) * TAIL_SHARE - BREAK
    return Scale(first, end, max(axis_end, end + MIN_SPAN), left, middle, right)


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    at: float
    label: str
    anchor: str  # text-anchor of its label: middle, or start/end at the axis' ends (not to overflow)


def ticks(axis: Scale) -> list[Tick]:
    """Place round UTC times over the linear part of the axis.

    They are labelled as precisely as their step needs; a tick that starts a new day says the date.
    """
    step = tick_step(axis.end - axis.start, (axis.middle - axis.left) / TICK_SPACING)
    first, last = math.ceil(axis.start / step - 1e-9), math.floor(axis.end / step + 1e-9)
    made: list[Tick] = []
    day = _day(axis.start)
    for n in range(first, last + 1):
        at = n * step
        new_day = _day(at) != day
        day = _day(at)
        x = axis.x(at)
        anchor = "start" if x < axis.left + EDGE else "end" if x > axis.right - EDGE else "middle"
        made.append(Tick(x, at, tick_label(at, step, with_date=new_day), anchor))
    return made


def tick_step(span: float, count: float) -> float:
    """Return the smallest round step that puts at most `count` ticks over `span` seconds."""
    for step in STEPS:
        if span / step <= max(count, 1):
            return step
    return DAY * math.ceil(span / DAY / max(count, 1))


def tick_label(at: float, step: float, *, with_date: bool = False) -> str:
    when = moment(at)
    if when is None:
        return undated(at)
    if step >= DAY:
        return when.strftime("%b %d")
    text = when.strftime("%H:%M:%S") if step < 60 else when.strftime("%H:%M")
    if step < 1:
        text += f".{when.microsecond // 100_000}"
    return f"{when.strftime('%b %d')} {text}" if with_date else text


def clock(at: float, *, precise: bool = False) -> str:
    """`22:40:45` (or `22:40:45.916`): a time of day in UTC, as the drawing writes it.

    A time no date shows: what `model.undated` says of it.
    """
    when = moment(at)
    if when is None:
        return undated(at)
    if precise:
        return when.strftime("%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
    return when.strftime("%H:%M:%S")


def clock_span(start: float, end: float, *, precise: bool = False) -> str:
    """`22:40:47 to 22:40:50 UTC`, with an en dash between."""
    return f"{clock(start, precise=precise)}\N{EN DASH}{clock(end, precise=precise)} UTC"


def date(at: float) -> str:
    """`2026-11-23`: the day in UTC; a time no date shows, `undated`."""
    when = moment(at)
    return undated(at) if when is None else when.date().isoformat()  # (strftime writes year 1 as `1`)


def date_caption(start: float, end: float) -> str:
    """Return the date the axis is on, said once (`2026-11-23 UTC`), or the two it spans."""
    first, last = date(start), date(end)
    return f"{first} UTC" if first == last else f"{first} \N{EN DASH} {last} UTC"


def _day(at: float) -> int:
    return math.floor(at / DAY)
