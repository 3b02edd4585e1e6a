"""The HTML the report and the live page show (`rendering.page`, `rendering.timeline.layout`): every write drawn exactly
once however many there are, one lane per writer, an axis that reads, everything from the cluster escaped, and
nothing in the report that could load or send anything. On the findings of the bundled demo capture, and on
synthetic timelines for the edge cases (thousands of writes, all at one instant, bins of every lane)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import watcher
from watcher.config import Config
from watcher.model import (
    CONFLICT,
    HANDOVER,
    WRITE,
    Bin,
    Finding,
    FindingState,
    FindingType,
    ObjectRef,
    Timeline,
    Writer,
    WriterCount,
    format_time,
    mark_word,
)
from watcher.offline import Analysis
from watcher.rendering import page
from watcher.rendering.output import severity_order
from watcher.rendering.timeline.layout import LEFT, RIGHT, Layout, layout

DEMO = Path(watcher.__file__).parent / "data" / "demo-capture.jsonl.gz"
DEMO_AUDIT = DEMO.with_name("demo-audit.jsonl.gz")
T0 = 1_795_473_600.0  # 2026-11-23T22:40:00Z
HOSTILE = "<script>alert(1)</script>"


# ----------------------------------------------------------------------------------------------- building


def _demo() -> tuple[list[Finding], float]:
    """The demo's findings, as `fightwatch demo` makes them: its capture joined with its audit log."""
    analysis = Analysis(Config(), captures=[str(DEMO)], requests=[str(DEMO_AUDIT)])
    analysis.run(skip_invalid=False)
    assert analysis.pipeline.watch is not None
    return analysis.findings(), analysis.pipeline.watch.now


DEMO_FINDINGS, DEMO_NOW = _demo()


def _timeline(
    marks: Iterable[tuple[float, int, int]], *, lanes: Iterable[str] = ("a", "b"), bins: Iterable[Bin] = ()
) -> Timeline:
    words = array("Q", sorted(mark_word(at, lane, kind) for at, lane, kind in marks))
    return Timeline(tuple(Writer(name, "Update") for name in lanes), words.tobytes(), tuple(bins), quiet=900.0)


def _finding(
    timeline: Timeline | None,
    *,
    first: float = T0,
    last: float = T0 + 60,
    resolved: float | None = None,
    name: str = "web",
    kind: FindingType = FindingType.FIGHT,
    **changes: Any,
) -> Finding:
    made = Finding(
        id=f"id-{name}",
        type=kind,
        state=FindingState.ACTIVE if resolved is None else FindingState.RESOLVED,
        object=ObjectRef("apps/v1", "Deployment", "shop", name, "uid-1"),
        writers=(WriterCount(Writer("a", "Update"), 2), WriterCount(Writer("b", "Update"), 1)),
        fields=("spec.replicas",),
        handovers=2,
        writes=3,
        writes_per_minute=3.0,
        first_seen=first,
        detected_at=first + (last - first) / 2,
        last_seen=last,
        resolved_at=resolved,
        flip_period=20.0,
        summary="a and b keep taking spec.replicas from each other",
        hint="Decide which one owns it.",
        timeline=timeline,
    )
    return replace(made, **changes)


def _hot_loop(writes: int, seconds: float) -> Finding:
    """`writes` writes of one writer spread evenly over `seconds`, every tenth a handover, every 97th a conflict."""
    marks = [
        (T0 + n * seconds / writes, 0, CONFLICT if n % 97 == 0 else HANDOVER if n % 10 == 0 else WRITE)
        for n in range(writes)
    ]
    return _finding(_timeline(marks, lanes=["looper"]), last=T0 + seconds, kind=FindingType.HOT_LOOP)


# ----------------------------------------------------------------------------------------------- reading


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element] = field(default_factory=list)
    text: str = ""

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            yield from child.iter()

    def find(self, tag: str = "", cls: str = "") -> list[Element]:
        return [
            e for e in self.iter() if (not tag or e.tag == tag) and (not cls or cls in e.attrs.get("class", "").split())
        ]

    def all_text(self) -> str:
        return self.text + "".join(child.all_text() for child in self.children)


class _TreeBuilder(HTMLParser):
    VOID = frozenset({"meta", "link", "br", "hr", "img", "input", "source", "wbr", "area", "base", "col"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while len(self.stack) > 1:
            if self.stack.pop().tag == tag:
                break

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(Element("#text", {}, text=data))


def parse(html: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


def _svg(finding: Finding, now: float | None = None) -> Element:
    doc = parse(page.render_findings([finding], now=now if now is not None else finding.last_seen))
    (svg,) = doc.find("svg", "timeline")
    return svg


def _layout(finding: Finding, now: float) -> Layout:
    assert finding.timeline is not None
    return layout(finding, finding.timeline, now=now)


def _elements(svg: Element) -> int:
    return sum(not e.tag.startswith("#") for e in svg.iter())


def _drawn(svg: Element) -> int:
    """Marks drawn alone plus marks counted in groups."""
    return len(svg.find(cls="mark")) + sum(int(g.attrs["data-count"]) for g in svg.find(cls="mark-group"))


# ----------------------------------------------------------------------------------------------- the timeline


@pytest.mark.parametrize(
    ("finding", "now", "bounded"),
    [
        pytest.param(
            _finding(_timeline([(T0, 0, HANDOVER), (T0 + 20, 1, HANDOVER), (T0 + 40, 0, 1)])), T0, 100, id="3"
        ),
        pytest.param(_hot_loop(5000, 600), T0 + 600, 1000, id="5000-in-10-minutes"),
        pytest.param(_hot_loop(5000, 600), T0 + 7200, 1000, id="5000-then-quiet"),
        pytest.param(_hot_loop(5000, 0.001), T0, 100, id="5000-in-one-millisecond"),
        *(pytest.param(f, DEMO_NOW, 1000, id=f.object.name) for f in DEMO_FINDINGS),
    ],
)
def test_every_mark_is_drawn_once_alone_or_counted_in_one_group(finding: Finding, now: float, bounded: int) -> None:
    assert finding.timeline is not None
    svg = _svg(finding, now)
    marks = finding.timeline.marks()
    assert _drawn(svg) == len(marks)
    for kind, flag in (("handovers", HANDOVER), ("conflicts", CONFLICT)):
        alone = sum(e.attrs["data-kind"] == kind[:-1] for e in svg.find(cls="mark"))
        grouped = sum(int(g.attrs[f"data-{kind}"]) for g in svg.find(cls="mark-group"))
        assert alone + grouped == sum(m.kind & flag != 0 for m in marks)
    bins = svg.find(cls="bin")
    assert len(bins) == len(finding.timeline.bins)
    assert sum(int(b.attrs["data-count"]) for b in bins) == sum(b.writes for b in finding.timeline.bins)
    assert _elements(svg) < bounded


def test_the_5000_write_loop_is_a_few_hundred_elements_with_its_counts_readable() -> None:
    svg = _svg(_hot_loop(5000, 600))
    groups = svg.find(cls="mark-group")
    assert 10 <= len(groups) <= 40  # a dense stretch: boxes side by side, each with its count
    assert all(
        g.find("title") and g.find("title")[0].all_text().startswith(f"{g.attrs['data-count']} ") for g in groups
    )
    assert all(g.find("text") for g in groups if int(g.attrs["data-count"]) > 1)
    assert [g.attrs["data-kind"] for g in groups].count("conflict") >= 1


def test_there_is_one_lane_per_writer_with_its_own_shape() -> None:
    names = [f"w{n}" for n in range(10)]
    marks = [(T0 + n * 10, n, HANDOVER) for n in range(10)]
    finding = _finding(_timeline(marks, lanes=names), last=T0 + 90)
    svg = _svg(finding)
    lanes = svg.find("g", "lane")
    assert [lane.attrs["data-writer"] for lane in lanes] == [f"{n} (Update)" for n in names]
    shapes = [lane.attrs["data-shape"] for lane in lanes]
    assert len(set(shapes[:8])) == 8  # distinct, then cycling
    assert shapes[8] == shapes[0]
    assert all(len(lane.find(cls="mark")) == 1 for lane in lanes)
    assert len(svg.find(cls="connector")) == 9  # each handover from the lane of the one before


def test_the_demo_fight_reads_as_its_writers_and_handovers() -> None:
    """Helm 3 against the cainjector over a webhook's caBundle: Helm's lane is named from the audit events (its writes
    only remove the field: no managedFields entry names them), one handover a write."""
    finding = next(f for f in DEMO_FINDINGS if f.object.name == "cainjector-helm3-validate")
    svg = _svg(finding, DEMO_NOW)
    assert [lane.attrs["data-writer"] for lane in svg.find("g", "lane")] == [
        "helm (Update)",
        "cert-manager-cainjector (Apply)",
    ]
    desc = svg.find("desc")[0]
    assert desc.all_text().startswith(f"2 writers, {finding.writes} writes, {finding.handovers} handovers between ")
    assert svg.attrs["aria-labelledby"] == f"{svg.find('title')[0].attrs['id']} {desc.attrs['id']}"
    assert svg.attrs["role"] == "img"
    assert svg.find(cls="detected")
    assert svg.find(cls="quiet")


def test_writes_all_at_one_instant_get_an_axis() -> None:
    finding = _finding(_timeline([(T0, 0, HANDOVER)] * 3 + [(T0, 1, WRITE)]), last=T0)
    finding = replace(finding, detected_at=T0)
    drawn = _layout(finding, T0)
    xs = [m.x for lane in drawn.lanes for m in lane.marks] + [g.x for lane in drawn.lanes for g in lane.groups]
    assert all(math.isfinite(x) and LEFT - 10 <= x <= RIGHT for x in xs)
    assert _drawn(_svg(finding)) == 4
    assert drawn.ticks


@pytest.mark.parametrize(
    ("span", "label"),
    [(0.0, "22:40:00.0"), (4.0, "22:40:01"), (600.0, "22:42"), (5 * 3600.0, "23:00"), (3 * 86400.0, "Nov 24 ")],
)
def test_ticks_are_round_times_in_order_within_the_axis(span: float, label: str) -> None:
    finding = _finding(_timeline([(T0, 0, WRITE), (T0 + span, 1, WRITE)]), last=T0 + span)
    ticks = _layout(finding, T0 + span).ticks
    xs = [t.x for t in ticks]
    assert xs == sorted(set(xs))
    assert all(LEFT <= x <= RIGHT for x in xs)
    assert 2 <= len(ticks) <= 10
    assert any(t.label.startswith(label) for t in ticks)


def test_a_bin_of_every_lane_spans_them_all() -> None:
    storm = Bin(T0, T0 + 30, -1, writes=40, handovers=0, conflicts=40)
    timeline = _timeline([(T0 + 31 + n, n % 2, CONFLICT) for n in range(6)], bins=[storm])
    finding = _finding(timeline, last=T0 + 37, kind=FindingType.CONFLICT_STORM, detected_at=T0 + 30)
    svg = _svg(finding)
    (spanning,) = svg.find(cls="spanning")
    assert spanning.attrs["data-count"] == "40"
    assert "40 conflicts before detection" in spanning.all_text()
    lanes = svg.find("g", "lane")
    (rect,) = spanning.find("rect")
    assert float(rect.attrs["y"]) <= min(float(line.attrs["y1"]) for lane in lanes for line in lane.find("line"))
    assert [m.attrs["data-kind"] for m in svg.find(cls="mark")] == ["conflict"] * 6


def test_a_bin_spans_all_lanes_even_before_any_writer_is_known() -> None:
    storm = Bin(T0, T0 + 30, -1, writes=40, handovers=0, conflicts=40)
    finding = _finding(_timeline([], lanes=[], bins=[storm]), last=T0 + 30, kind=FindingType.CONFLICT_STORM)
    assert _svg(finding).find(cls="spanning")[0].attrs["data-count"] == "40"


@pytest.mark.parametrize(
    ("resolved", "label"),
    [(None, "resolves if quiet until 22:56:00"), (T0 + 960, "quiet → resolved")],
)
def test_the_quiet_period_runs_from_the_last_write(resolved: float | None, label: str) -> None:
    finding = _finding(_timeline([(T0, 0, HANDOVER), (T0 + 60, 1, HANDOVER)]), resolved=resolved)
    drawn = _layout(finding, T0 + 70)
    assert drawn.quiet.label == label
    assert drawn.quiet.x + drawn.quiet.width == pytest.approx(RIGHT)  # to the axis end: now, or resolved
    assert drawn.quiet.width > 0
    last_mark = max(m.x for lane in drawn.lanes for m in lane.marks)
    assert drawn.quiet.x == pytest.approx(last_mark)
    assert bool(drawn.breaks) == (resolved is not None)  # 15 quiet minutes after a minute: the axis is broken


# ----------------------------------------------------------------------------------------------- the cards


def test_cards_come_most_severe_first_with_what_filters_read() -> None:
    doc = parse(page.render_findings(DEMO_FINDINGS, now=DEMO_NOW))
    assert not doc.find("script")
    assert not doc.find("style")
    cards = doc.find("article", "finding")
    assert [c.attrs["id"] for c in cards] == [f"finding-{f.id}" for f in severity_order(DEMO_FINDINGS)]
    for card, finding in zip(cards, severity_order(DEMO_FINDINGS), strict=True):
        assert card.attrs["data-type"] == finding.type.value
        assert card.attrs["data-namespace"] == (finding.object.namespace or "")
        assert card.attrs["data-kind"] == finding.object.kind
        assert card.attrs["data-state"] == finding.state.value
        times = {t.attrs["datetime"] for t in card.find("time")}
        assert {format_time(finding.first_seen), format_time(finding.last_seen)} <= times
        assert len(card.find("svg", "timeline")) == 1
        assert card.find("details", "writes")


def test_a_finding_without_a_timeline_still_shows_the_rest() -> None:
    finding = _finding(None, related="id-other", resolved=T0 + 960)
    (card,) = parse(page.render_findings([finding], now=T0)).find("article", "finding")
    assert "No timeline recorded" in card.all_text()
    assert "a and b keep taking spec.replicas" in card.all_text()
    assert [a.attrs["href"] for a in card.find("a")] == ["#finding-id-other"]
    assert card.attrs["data-state"] == "resolved"


def test_the_writes_table_says_each_writer_s_marker_and_counts() -> None:
    finding = _finding(
        _timeline([(T0, 0, HANDOVER), (T0 + 5, 1, HANDOVER), (T0 + 6, 1, CONFLICT), (T0 + 7, 0, WRITE)]),
        writers=(WriterCount(Writer("a", "Update"), 2, users=("system:serviceaccount:ns:a",)),),
    )
    (table,) = parse(page.render_findings([finding], now=T0 + 60)).find("details", "writes")[0].find("table")
    rows = [[cell.all_text().strip() for cell in row.children if cell.tag in {"th", "td"}] for row in table.find("tr")]
    assert rows == [
        ["Writer", "Users", "Marker", "Writes", "Handovers", "Conflicts"],
        ["a (Update)", "system:serviceaccount:ns:a", "circle", "2", "1", "0"],
        ["b (Update)", "—", "square", "1", "1", "1"],
    ]


def test_names_from_the_cluster_are_text_never_markup() -> None:
    timeline = Timeline((Writer(HOSTILE, "Update"),), array("Q", [mark_word(T0, 0, WRITE)]).tobytes(), (), 900.0)
    finding = _finding(
        timeline,
        name='x"><img src=x>',
        writers=(WriterCount(Writer(HOSTILE, "Update"), 1, users=(HOSTILE,)),),
        fields=(HOSTILE,),
        summary=HOSTILE,
        hint=HOSTILE,
    )
    summary = page.Summary((HOSTILE,), 1, 1, T0, T0, ((HOSTILE, 1),), note=HOSTILE)
    html = page.report([finding], summary=summary, now=T0)
    doc = parse(html)
    assert "<script>alert" not in html
    assert "<img" not in html
    assert len(doc.find("script")) == 1
    assert not doc.find("img")
    (lane,) = doc.find("g", "lane")
    assert lane.attrs["data-writer"] == f"{HOSTILE} (Update)"
    assert HOSTILE in lane.find("text")[0].all_text()
    assert doc.find("article", "finding")[0].attrs["id"] == 'finding-id-x"><img src=x>'


def test_the_report_loads_nothing_and_lets_nothing_out() -> None:
    summary = page.Summary(("demo.jsonl",), 541, 23, T0, T0 + 200, (("reconciler", 149),))
    html = page.report(DEMO_FINDINGS, summary=summary, now=DEMO_NOW)
    doc = parse(html)
    (style,) = doc.find("style")
    (script,) = doc.find("script")
    nonce = style.attrs["nonce"]
    assert script.attrs["nonce"] == nonce
    assert len(nonce) >= 16
    (meta,) = [m for m in doc.find("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert meta.attrs["content"].startswith(
        f"default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; img-src data:"
    )
    for element in doc.iter():
        for name, value in element.attrs.items():
            assert name not in {"style", "src", "srcset", "action"}, (element.tag, name)
            assert not name.startswith("on"), (element.tag, name)
            if name in {"href", "xlink:href"}:
                assert value.startswith("#"), value
    assert nonce != parse(page.report(DEMO_FINDINGS, summary=summary, now=DEMO_NOW)).find("style")[0].attrs["nonce"]


@pytest.mark.parametrize(
    ("live", "expected"),
    [
        (
            False,
            "default-src 'none'; style-src 'nonce-N'; script-src 'nonce-N'; img-src data:; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'",
        ),
        (
            True,
            "default-src 'none'; style-src 'nonce-N'; script-src 'nonce-N'; img-src data:; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    ],
)
def test_the_policy_the_server_sends(live: bool, expected: str) -> None:
    assert page.content_security_policy("N", live=live) == expected


@pytest.mark.parametrize("signed_in", [False, True])
def test_the_live_page_tells_its_script_where_the_findings_are(signed_in: bool) -> None:
    live = page.LivePage("findings?fragment=1", refresh_seconds=15.0, signed_in=signed_in)
    fragment = page.render_findings(DEMO_FINDINGS, now=DEMO_NOW) if signed_in else None
    doc = parse(page.render_page(fragment, title="fightwatch", nonce="abc", live=live))
    (body,) = doc.find("body")
    assert body.attrs["data-fragment-url"] == "findings?fragment=1"
    assert body.attrs["data-refresh"] == "15.0"
    assert body.attrs["data-signed-in"] == str(signed_in).lower()
    (main,) = doc.find("main")
    assert main.attrs["id"] == "findings"
    assert len(main.find("article", "finding")) == (len(DEMO_FINDINGS) if signed_in else 0)
    assert doc.find("input")[0].attrs["type"] == "password"
    assert not [m for m in doc.find("meta") if m.attrs.get("http-equiv")]  # the server sends the policy


def test_the_summary_says_what_was_analysed() -> None:
    summary = page.Summary(("a.jsonl", "b.jsonl.gz"), 1234, 7, T0, T0 + 200, (("x", 10), ("y", 1)), note="3 skipped")
    doc = parse(page.render_findings([], now=T0, summary=summary))
    text = " ".join(doc.all_text().split())
    for said in ("a.jsonl, b.jsonl.gz", "1,234", "3 skipped", "3 min 20 s"):
        assert said in text
    assert "No controller fights or hot loops found." in text
    assert [r.find("th")[0].all_text() for r in doc.find("tbody")[0].find("tr")] == ["x", "y"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "40 ms"),
        (1.5, "1.5 s"),
        (2.0, "2 s"),
        (50.0, "50 s"),
        (150.0, "2 min 30 s"),
        (3600.0, "1 h"),
        (93784.0, "1 d 2 h"),
    ],
)
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert page.duration(seconds) == text
