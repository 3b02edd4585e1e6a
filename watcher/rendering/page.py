"""The findings drawn for people, in HTML: the report file and the live page.

The self-contained report file (`replay --html`) and the watcher's live page (`serving.endpoints` serves it). One
rendering for both, so a report attached to a ticket shows what the page showed.

Every string in a finding comes from the cluster (object names, field managers, users) and is escaped: the
templates autoescape and never mark data safe. The page keeps to itself under a Content-Security-Policy that
admits only its own nonce'd style and script: no inline `style` attributes or event handlers, no fetches but the
live page's own, nothing loaded from elsewhere (a report opened offline looks the same).
"""

from __future__ import annotations

import math
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Final

from watcher.detection.incidents import group
from watcher.model import MARK_END, Finding, FindingState, Incident, Timeline, format_time, moment, undated
from watcher.rendering.output import severity_order
from watcher.rendering.timeline.axis import clock, date
from watcher.rendering.timeline.layout import Lane, Layout, layout
from watcher.rendering.timeline.shapes import svg_number

if TYPE_CHECKING:
    from jinja2 import Environment

MANAGERS_SHOWN: Final = 8  # of the writes by manager in the summary; the rest behind a disclosure


@dataclass(frozen=True, slots=True)
class Summary:
    """What was analysed: the report's header section."""

    sources: tuple[str, ...]  # file names analysed; the live page: ()
    events: int
    objects: int  # objects written
    first: float | None  # epoch seconds of the earliest and latest event; None: no event read told its time
    last: float | None
    writes_by_manager: tuple[tuple[str, int], ...]  # most first; "(unattributed)" possible
    note: str = ""  # e.g. "3 invalid events skipped"


@dataclass(frozen=True, slots=True)
class LivePage:
    """The live page's behaviour.

    It fetches `fragment_url` (relative) with the bearer token it was given and shows it, every `refresh_seconds`;
    `signed_in`: the request that got the page was authenticated already (the findings came inline).
    """

    fragment_url: str
    refresh_seconds: float = 30.0
    signed_in: bool = False


@dataclass(frozen=True, slots=True)
class _Card:
    """One finding as its card shows it."""

    finding: Finding
    number: int  # for ids inside the card that must be unique on the page
    timeline: Layout | None
    lanes: dict[str, Lane]  # by writer.display(): the lane of a writer, for its marker beside its name
    incident: Incident | None = None  # the incident it is part of, when that has other findings too
    no_timeline: str = "No timeline recorded."  # said in its place, when there is none to draw


@cache
def _templates() -> Environment:
    """Load the page's templates, on the first page rendered.

    Jinja2 costs 9 MiB where no page is served.
    """
    from jinja2 import Environment, PackageLoader, StrictUndefined  # noqa: PLC0415

    templates = Environment(
        loader=PackageLoader("watcher", "rendering/templates"), autoescape=True, undefined=StrictUndefined
    )
    templates.filters.update(
        utc=utc,
        iso=format_time,
        duration=duration,
        time_range=time_range,
        rate=rate,
        clock=clock,
        day=date,
        n=svg_number,
        number="{:,}".format,
    )
    templates.tests["dated"] = lambda seconds: moment(seconds) is not None
    return templates


def render_findings(findings: Sequence[Finding], *, now: float, summary: Summary | None = None) -> str:
    """Render the findings part (an HTML fragment, no script).

    What was analysed (given a summary), the incidents of several findings (`detection.incidents`), then one card per
    finding, most severe first (`report.severity_order`: active ones first), each with its timeline and its incident.
    """
    ordered = severity_order(findings)
    shared = [i for i in group(ordered) if len(i.members) > 1]
    incident_of = {finding_id: i for i in shared for finding_id in i.members}
    return (
        _templates()
        .get_template("findings.html.j2")
        .render(
            cards=[replace(_card(f, n, now), incident=incident_of.get(f.id)) for n, f in enumerate(ordered, 1)],
            incidents=shared,
            summary=summary,
            managers_shown=MANAGERS_SHOWN,
            overview=_overview(ordered),
        )
    )


def render_page(
    fragment: str | None, *, title: str, nonce: str, live: LivePage | None = None, meta_policy: bool = False
) -> str:
    """Render the whole document.

    One nonce'd style and one nonce'd script (filters; and given `live`, sign-in and polling), the filter bar, and
    `fragment` in <main id="findings"> (None: empty, to be fetched). `meta_policy`: state the Content-Security-Policy in
    the document too (a file has no headers).
    """
    policy = content_security_policy(nonce, live=live is not None, meta=True) if meta_policy else None
    return (
        _templates()
        .get_template("page.html.j2")
        .render(fragment=fragment, title=title, nonce=nonce, live=live, policy=policy)
    )


def write_report(path: Path, findings: Sequence[Finding], *, summary: Summary, now: float) -> None:
    """`report` written to `path` whole or not at all (a temporary file renamed into place). Raises OSError."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(report(findings, summary=summary, now=now), encoding="utf-8")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def report(findings: Sequence[Finding], *, summary: Summary, now: float) -> str:
    """Render the self-contained report file.

    Nothing in it is fetched, and its policy lets nothing leave it.
    """
    names = ", ".join(summary.sources) or "standard input"
    return render_page(
        render_findings(findings, now=now, summary=summary),
        title=f"fightwatch report: {names}",
        nonce=secrets.token_urlsafe(16),
        meta_policy=True,
    )


def content_security_policy(nonce: str, *, live: bool, meta: bool = False) -> str:
    """Return the page's policy.

    Its own nonce'd style and script, images only as data; the live page may fetch from its own origin. `meta`: the
    directives a <meta> element may state; frame-ancestors only works as a header.
    """
    directives = [
        "default-src 'none'",
        f"style-src 'nonce-{nonce}'",
        f"script-src 'nonce-{nonce}'",
        "img-src data:",
        *(["connect-src 'self'"] if live else []),
        "base-uri 'none'",
        "form-action 'none'",
        *([] if meta else ["frame-ancestors 'none'"]),
    ]
    return "; ".join(directives)


def _card(finding: Finding, number: int, now: float) -> _Card:
    timeline = finding.timeline
    if timeline is None:
        return _Card(finding, number, None, {})
    if not _drawable(finding, timeline):
        return _Card(finding, number, None, {}, no_timeline=UNDRAWN)
    drawn = layout(finding, timeline, now=now if 0 <= now < MARK_END else finding.last_seen)
    return _Card(finding, number, drawn, {lane.writer: lane for lane in drawn.lanes})


UNDRAWN: Final = (
    "No timeline drawn: some of its times are unknown or outside the years 1970 to 2112, which a timeline holds."
)


def _drawable(finding: Finding, timeline: Timeline) -> bool:
    """Whether every time the timeline's axis runs over is one its marks can hold (`model.mark_word`: 1970 to 2112).

    A time the readers refused can still reach a finding through a bug, and a watch capture's times are not bounded: the
    card says so in words rather than draw marks held at an end of that range.
    """
    times = [finding.first_seen, finding.detected_at, finding.last_seen, timeline.quiet + finding.last_seen]
    if finding.resolved_at is not None:
        times.append(finding.resolved_at)
    times += [t for b in timeline.bins for t in (b.start, b.end)]
    return all(0 <= t < MARK_END for t in times)  # (NaN compares false)


def _overview(findings: Sequence[Finding]) -> str:
    """`12 findings: 10 fights, 2 hot loops; 11 active`."""
    if not findings:
        return "No controller fights or hot loops found."
    types = Counter(f.type for f in findings)
    active = sum(f.state is FindingState.ACTIVE for f in findings)
    kinds = ", ".join(kind.counted(number) for kind, number in types.most_common())
    return f"{len(findings)} finding{'s' * (len(findings) != 1)}: {kinds}; {active} active"


def utc(seconds: float) -> str:
    """`2026-11-23 22:40:42 UTC`: a time for people (the page shows UTC only, as the cluster's logs do).

    A time no date shows (`model.moment`): what `model.undated` says of it.
    """
    when = moment(seconds)
    if when is None:
        return undated(seconds)
    return when.isoformat(sep=" ", timespec="seconds").removesuffix("+00:00") + " UTC"


def time_range(first: float | None, last: float | None) -> tuple[float, float] | str:
    """Return the summary's time range: (earliest, latest), whichever order they came in.

    Where it cannot be shown as two dates, what there is to say of it instead: that no time is known, or what `utc`
    says of each end.
    """
    known = [t for t in (first, last) if t is not None]
    if not known:
        return "not known: no event read told its time"
    start, end = known[0], known[-1]
    if moment(start) is None or moment(end) is None:
        return f"{utc(start)} \N{EN DASH} {utc(end)}"
    return (start, end) if start <= end else (end, start)


def duration(seconds: float) -> str:
    """`40 ms`, `1.5 s`, `50 s`, `2 min 30 s`, `3 h 5 min`, `2 d 4 h`: as precise as a reader needs."""
    if not math.isfinite(seconds):
        return "an unknown time"
    if seconds < 0:
        return f"minus {duration(-seconds)}"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f}".removesuffix(".0") + " s"
    whole = round(seconds)
    index = next(i for i, (size, _) in enumerate(_UNITS) if whole >= size)
    size, unit = _UNITS[index]
    text = f"{whole // size} {unit}"
    if size > 1 and (rest := whole % size // _UNITS[index + 1][0]):
        text += f" {rest} {_UNITS[index + 1][1]}"
    return text


_UNITS: Final = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def rate(per_minute: float) -> str:
    """Three significant digits at most: `200`, `49.9`, `1.6`."""
    return f"{per_minute:.3g}" if per_minute < 1000 else f"{per_minute:,.0f}"
