"""Replicate a recording in time and over lanes of object names: the moves both watch and audit replicas make.

A copy of a recording is the recording shifted on by whole seconds: every RFC 3339 time in an event's text (the
event's own times, managedFields times, times in bodies) moved by the same seconds, and every resourceVersion moved
on by `RV_STRIDE` per copy, so that an object's versions keep growing from copy to copy. A lane is a set of object
names of its own: namespaced objects get the namespace `<namespace>-<lane>`, cluster-scoped ones the name
`<name>-<lane>`. Copies of a recording follow each other in a lane; the lanes run side by side.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable

from watcher.model import parse_time

RV_STRIDE = 10_000_000  # resourceVersions a copy moves on by: more than any recording's own
_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?=[.Z])")
_RV = re.compile(rb'"resourceVersion":"(\d+)"')


class Shift:
    """Move the times and resourceVersions in an event's text on by one copy's seconds and versions."""

    def __init__(self, seconds: int, copy: int) -> None:
        self.seconds = seconds
        self.versions = copy * RV_STRIDE
        self._moved: dict[bytes, bytes] = {}

    def _time(self, match: re.Match[bytes]) -> bytes:
        text = match.group(0)
        moved = self._moved.get(text)
        if moved is None:
            then = calendar.timegm(time.strptime(text.decode(), "%Y-%m-%dT%H:%M:%S")) + self.seconds
            moved = self._moved[text] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(then)).encode()
        return moved

    def _version(self, match: re.Match[bytes]) -> bytes:
        return b'"resourceVersion":"%d"' % (int(match.group(1)) + self.versions)

    def __call__(self, text: bytes) -> bytes:
        if self.seconds:
            text = _TIME.sub(self._time, text)
        if self.versions:
            text = _RV.sub(self._version, text)
        return text


def span_seconds(times: Iterable[str]) -> int:
    """The whole seconds a copy of a recording with these times takes: its span, rounded up, and one more."""
    seconds = [parse_time(t) for t in times]
    return int(max(seconds) - min(seconds)) + 2


def lane_name(namespace: str | None, name: str, lane: int) -> tuple[str | None, str]:
    """Name an object in `lane`: its namespace suffixed when it has one, else its name."""
    if namespace:
        return f"{namespace}-{lane}", name
    return namespace, f"{name}-{lane}"


def merged(lines: list[tuple[float, int, bytes]]) -> bytes:
    """Join the lines of every copy in order of time (ties in the order they were made)."""
    lines.sort(key=lambda line: (line[0], line[1]))
    return b"".join(text + b"\n" for _, _, text in lines)
