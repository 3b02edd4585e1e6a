"""Fuzz tests of the renderers of findings (`rendering.output`: the table, JSON, YAML; `rendering.page`: the report file
and the live page) with hypothesis, on times anywhere in float range: 0, negative, far past and far future, NaN and
infinities, and missing (a summary without a time range, a finding never resolved), in any order.

The readers refuse most such times (an audit event outside 1970 to 9999); but a time is also computed from others
(a deadline, an axis' end), and a report must never end in a traceback. The properties: every renderer returns; a time
a date can show (years 1 to 9999, `model.moment`) is shown as RFC 3339 in the table and JSON, and as a date on the page;
any other is `null` in JSON and YAML, and said in words (`model.undated`) in the table and on the page; a summary's
time range is shown earliest first, or said to be unknown.

FIGHTWATCH_FUZZ_EXAMPLES sets the number of examples of each test (100 by default, a few seconds), as for the readers'
fuzz tests (tests/unit/test_audit_fuzz.py).
"""

from __future__ import annotations

import io
import math
import os
from array import array
from typing import Final

import orjson
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit.test_page import parse
from watcher.model import (
    MARK_END,
    TIME_END,
    TIME_START,
    Bin,
    Client,
    Finding,
    FindingState,
    FindingType,
    ObjectRef,
    Timeline,
    Writer,
    WriterCount,
    format_time,
    mark_word,
    moment,
    undated,
)
from watcher.rendering import page
from watcher.rendering.output import write_json, write_table, write_yaml

EXAMPLES: Final = int(os.environ.get("FIGHTWATCH_FUZZ_EXAMPLES", "100"))
FUZZ: Final = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

T0: Final = 1_795_473_600.0  # 2026-11-23T22:40:00Z
# Times at the edges: the epoch, the first and last moments a date shows, just past them, a moment a microsecond
# before the end that rounds past it, and values no date shows.
EDGES: Final = (
    0.0,
    -0.0,
    -1.0,
    0.5,
    T0,
    TIME_START,
    TIME_START - 1,
    TIME_END - 1,
    TIME_END - 1e-6,
    TIME_END,
    1e12,
    -1e12,
    1e300,
    -1e300,
    math.nan,
    math.inf,
    -math.inf,
)
TIMES: Final = st.one_of(
    st.sampled_from(EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=TIME_START - 10, max_value=TIME_END + 10),
    st.floats(min_value=T0 - 86_400, max_value=T0 + 86_400),
)
# A mark's time is packed (`model.mark_word`): whole microseconds from the epoch, in 52 bits, a time outside held at
# the nearest end. (A time to pack is a number: the readers' and the engines'.)
MARK_TIMES: Final = st.one_of(
    st.sampled_from((0.0, -1.0, T0, MARK_END, TIME_END - 1)),
    st.floats(min_value=0, max_value=MARK_END),
    st.floats(allow_nan=False, allow_infinity=False),
)
NAMES: Final = st.text(alphabet="ab-<>&\"'é", min_size=1, max_size=6)


@st.composite
def timelines(draw: st.DrawFn) -> Timeline:
    lanes = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    marks = draw(st.lists(st.tuples(MARK_TIMES, st.integers(0, len(lanes)), st.integers(0, 3)), max_size=12))
    words = array("Q", sorted(mark_word(at, lane, kind) for at, lane, kind in marks))
    bins = draw(
        st.lists(
            st.builds(
                Bin,
                TIMES,
                TIMES,
                st.integers(-1, len(lanes)),
                st.integers(0, 50),
                st.integers(0, 5),
                st.integers(0, 5),
            ),
            max_size=3,
        )
    )
    quiet = draw(st.one_of(st.sampled_from((0.0, 900.0)), st.floats(min_value=0, max_value=1e7)))
    return Timeline(tuple(Writer(n, "Update") for n in lanes), words.tobytes(), tuple(bins), quiet, draw(st.booleans()))


@st.composite
def findings(draw: st.DrawFn) -> Finding:
    name = draw(NAMES)
    resolved = draw(st.none() | TIMES)
    managers = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    return Finding(
        id=f"id-{draw(st.integers(0, 10**6))}",
        type=draw(st.sampled_from(FindingType)),
        state=FindingState.ACTIVE if resolved is None else FindingState.RESOLVED,
        object=ObjectRef("apps/v1", "Deployment", draw(st.none() | NAMES), name, "uid"),
        writers=tuple(WriterCount(Writer(m, "Update"), draw(st.integers(0, 9)), users=(m,)) for m in managers),
        fields=tuple(draw(st.lists(NAMES, max_size=2))),
        handovers=draw(st.integers(0, 9)),
        writes=draw(st.integers(0, 99)),
        writes_per_minute=draw(st.floats(allow_nan=True, allow_infinity=True)),
        first_seen=draw(TIMES),
        detected_at=draw(TIMES),
        last_seen=draw(TIMES),
        resolved_at=resolved,
        flip_period=draw(st.none() | st.floats(allow_nan=True, allow_infinity=True)),
        summary=f"{name} is fought over",
        hint="Decide which one owns it.",
        clients=(Client(managers[0], "agent", managers[0], writes=1),),
        timeline=draw(st.none() | timelines()),
    )


def _shown(seconds: float) -> str:
    """A time as the table and JSON show it: RFC 3339, or in words."""
    return format_time(seconds) if moment(seconds) is not None else undated(seconds)


def _times(finding: Finding) -> dict[str, float | None]:
    return {
        "first_seen": finding.first_seen,
        "detected_at": finding.detected_at,
        "last_seen": finding.last_seen,
        "resolved_at": finding.resolved_at,
    }


@FUZZ
@given(st.lists(findings(), max_size=4, unique_by=lambda f: f.id))
@example([])
def test_the_table_json_and_yaml_show_every_time_they_can_and_say_the_others(found: list[Finding]) -> None:
    for width in (None, 60):
        table = io.StringIO()
        write_table(found, table, totals="1 events.", width=width)
        if width is None:  # (whole cells: every first sighting is in its SINCE cell)
            for finding in found:
                assert _shown(finding.first_seen) in table.getvalue()
    for incidents in (False, True):
        written = io.BytesIO()
        write_json(found, written, incidents=incidents)
        documents = [orjson.loads(line) for line in written.getvalue().splitlines()]
        stream = io.StringIO()
        write_yaml(found, stream, incidents=incidents)
        assert list(yaml.safe_load_all(stream.getvalue())) == documents
        if incidents:
            continue
        by_id = {f.id: f for f in found}
        for document in documents:
            for key, seconds in _times(by_id[document["id"]]).items():
                if seconds is None:
                    assert document[key] is None
                else:
                    assert document[key] == (format_time(seconds) if moment(seconds) is not None else None), key


@FUZZ
@given(
    found=st.lists(findings(), max_size=3, unique_by=lambda f: f.id),
    first=st.none() | TIMES,
    last=st.none() | TIMES,
    now=TIMES,
)
@example(found=[], first=None, last=None, now=math.nan)
@example(found=[], first=T0 + 60, last=T0, now=T0)  # out of time order
def test_the_report_and_the_live_page_render_any_time(
    found: list[Finding], first: float | None, last: float | None, now: float
) -> None:
    summary = page.Summary(("audit.log",), 3, 1, first, last, (("a", 2),))
    doc = parse(page.report(found, summary=summary, now=now))
    (facts,) = doc.find("dl", "stats")
    shown = facts.all_text()
    known = [t for t in (first, last) if t is not None]
    if not known:
        assert "not known" in shown
    elif all(moment(t) is not None for t in known):
        start, end = min(known), max(known)
        times = [t.attrs["datetime"] for t in facts.find("time")]
        assert times == [format_time(start), format_time(end)]  # earliest first, whatever the order given
        assert page.utc(start) in shown
    else:
        assert any(page.utc(t) in shown for t in known if moment(t) is None)
    cards = {card.attrs["id"]: card for card in doc.find("article", "finding")}
    assert len(cards) == len(found)
    for finding in found:
        card = cards[f"finding-{finding.id}"]
        text = card.all_text()
        for seconds in _times(finding).values():
            if seconds is not None:
                assert page.utc(seconds) in text
        dated = {t.attrs["datetime"] for t in card.find("time")}
        assert dated == {format_time(t) for t in _times(finding).values() if t is not None and moment(t) is not None}
        if finding.timeline is not None and not card.find("svg", "timeline"):
            assert page.UNDRAWN in text
    live = page.render_page(
        page.render_findings(found, now=now), title="fightwatch", nonce="n", live=page.LivePage("findings")
    )
    assert len(parse(live).find("article", "finding")) == len(found)
