"""What `fightwatch scan` shows while it runs, on standard error (standard output keeps the result).

On a terminal: one status line redrawn in place (time left, resources, events/s, objects, findings so far), with
lines printed above it: each finding as it opens, warnings. Off a terminal (piped, in CI): the same lines as plain
text with no control codes, and the status as a plain line every `PLAIN_STATUS_EVERY` seconds.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterable
from typing import TextIO

from watcher.model import Finding, FindingType

CLEAR_LINE = "\r\x1b[K"  # carriage return, erase to the end of the line
PLAIN_STATUS_EVERY = 30.0


class Console:
    """Lines above a status line (`live`: on a terminal), or plain lines.

    Also a text stream (`write`, `flush`, `isatty`) for the log, so that log lines go above the status line too.
    """

    def __init__(self, stream: TextIO, *, live: bool | None = None, plain_every: float = PLAIN_STATUS_EVERY) -> None:
        self._stream = stream
        self.live = stream.isatty() if live is None else live
        self._plain_every = plain_every
        self._status = ""
        self._shown = False  # the status line is on the screen
        self._plain_at: float | None = None  # when the last plain status line was written
        self._partial = ""  # what the log wrote without its newline yet

    def isatty(self) -> bool:
        return self.live

    def print(self, text: str) -> None:
        """Print a line above the status line."""
        out = self._stream
        if self._shown:
            out.write(CLEAR_LINE)
        out.write(text + "\n")
        self._shown = False
        if self.live and self._status:
            self._draw()
        out.flush()

    def status(self, text: str, *, now: float | None = None) -> None:
        """Show the status line: redrawn on a terminal.

        Off one, written as a line at most every `plain_every` s.
        """
        self._status = text
        if self.live:
            self._draw()
            self._stream.flush()
            return
        now = time.monotonic() if now is None else now
        if self._plain_at is None or now - self._plain_at >= self._plain_every:
            self._plain_at = now
            self._stream.write(text + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Erase the status line (the summary follows)."""
        if self._partial:
            self.print(self._partial)
            self._partial = ""
        if self._shown:
            self._stream.write(CLEAR_LINE)
            self._stream.flush()
            self._shown = False
        self._status = ""

    def write(self, text: str) -> int:
        """Log output: whole lines printed above the status line."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self.print(line)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((80, 24)).columns
        text = self._status if len(self._status) < width else self._status[: max(width - 2, 1)] + "…"
        self._stream.write(CLEAR_LINE + text)
        self._shown = True


def opened_line(finding: Finding) -> str:
    """Describe a finding as it opens, in the table's words.

    E.g. `fight  Deployment.apps shop/web  writers: a, b  fields: ...`.
    """
    writers = ", ".join(c.writer.display() for c in finding.writers) or "-"
    fields = ", ".join(finding.fields)
    parts = [f"found {finding.type.label}", finding.object.display(), f"writers: {writers}"]
    if fields:
        parts.append(f"fields: {fields}")
    if finding.type is FindingType.FIGHT:
        parts.append(f"handovers: {finding.handovers}")
    parts.append(f"rate/min: {finding.writes_per_minute:g}")
    return "  ".join(parts)


def status_line(
    *, left: float | None, resources: int, events_per_second: float, objects: int, findings: Iterable[Finding]
) -> str:
    """`3m05s left · 38 resources · 212 events/s · 2,031 objects · 1 fight, 1 hot loop`."""
    counts = Counter(f.type for f in findings)
    found = ", ".join(kind.counted(counts[kind]) for kind in FindingType if counts[kind]) or "nothing found yet"
    when = "until Ctrl-C" if left is None else f"{duration(left)} left"
    return (
        f"{when} · {resources} resource{'s' * (resources != 1)} · {events_per_second:,.0f} events/s · "
        f"{objects:,} objects · {found}"
    )


def duration(seconds: float) -> str:
    """`4m05s`, `59s`, `1h02m`."""
    total = max(int(seconds + 0.5), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
