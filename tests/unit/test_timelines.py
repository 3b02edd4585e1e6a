"""The write record each open finding keeps for its timeline (`detection.timeline`): bounded, every write counted
once (a mark or a fold), in time order; filled by the watch engine (fights, hot loops), by the request engine
(findings over audit events) and by their join (409s on a fight's timeline). On recorded captures and audit logs."""

from __future__ import annotations

import pytest

from tests.unit import audit_recordings
from tests.unit.captures import IMPLEMENTATIONS, analyse, events
from watcher.config import Config, ResolveSettings, TimelineSettings, parse_config
from watcher.detection.engine import Engine
from watcher.detection.timeline import Record
from watcher.model import CONFLICT, HANDOVER, WRITE, Finding, FindingType, Timeline, Writer


def _counted(timeline: Timeline) -> int:
    """Writes the timeline holds: its marks (rejected writes too) and the writes folded into its bins."""
    return len(timeline.marks()) + sum(b.writes for b in timeline.bins)


def _record(marks: int = 512, bins: int = 32) -> Record:
    return Record(TimelineSettings(marks=marks, bins=bins), ResolveSettings())


def test_a_long_finding_keeps_its_recent_writes_as_marks_and_folds_the_rest() -> None:
    record = _record()
    a, b = record.lane(Writer("a", "Update")), record.lane(Writer("b", "Apply"))
    for n in range(5000):
        record.add(1000.0 + n * 0.5, a if n % 2 else b, HANDOVER if n % 10 == 0 else WRITE)
    timeline = record.timeline()
    marks = timeline.marks()
    assert len(marks) <= 512
    assert len({(b.start, b.end) for b in timeline.bins}) <= 32
    assert _counted(timeline) == 5000
    assert sum(b.handovers for b in timeline.bins) + sum(m.kind == HANDOVER for m in marks) == 500
    assert marks[-1].at == 1000.0 + 4999 * 0.5  # the most recent are the ones kept one by one
    assert max(b.end for b in timeline.bins) <= marks[0].at
    assert [m.at for m in marks] == sorted(m.at for m in marks)
    assert len(timeline.words) == 8 * len(marks)


def test_a_late_write_goes_where_its_time_says() -> None:
    record = _record()
    lane = record.lane(Writer("a"))
    for at in (10.0, 20.0, 30.0):
        record.add(at, lane, WRITE)
    record.add(15.5, record.manager_lane("b"), CONFLICT)  # e.g. from an audit batch that arrived late
    assert [(m.at, m.kind) for m in record.timeline().marks()] == [
        (10.0, WRITE),
        (15.5, CONFLICT),
        (20.0, WRITE),
        (30.0, WRITE),
    ]
    assert record.lanes == [Writer("a"), Writer("b")]


def test_a_manager_named_by_a_request_joins_the_lane_of_that_manager() -> None:
    record = _record()
    record.lane(Writer("kubectl", "Update"))
    assert record.manager_lane("kubectl") == 0
    assert record.manager_lane("helm") == 1


def test_lanes_beyond_the_limit_share_the_last() -> None:
    record = _record()
    lanes = [record.lane(Writer(f"w{n}")) for n in range(300)]
    assert max(lanes) == 254
    assert len(record.lanes) == 255


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_fights_timeline_has_its_writers_and_marks_every_handover(implementation: str) -> None:
    (fight,), _ = analyse("fight-three-writers", engine=implementation)
    timeline = fight.timeline
    assert timeline is not None
    assert timeline.partial
    assert set(timeline.lanes) == {c.writer for c in fight.writers}
    marks = timeline.marks()
    assert sum(m.kind == HANDOVER for m in marks) == fight.handovers == 8
    assert len(marks) <= fight.writes
    assert timeline.quiet >= Config().detection.resolve.after


def _writes_by_time(capture: str, implementation: str) -> tuple[Finding, list[float]]:
    """The one finding of a capture, and the time of every write to its object (the engine's clock as it counts it)."""
    times: dict[str, list[float]] = {}
    engine = Engine(Config().detection, attribution=implementation)
    engine._on_write = lambda ref, _writers: times.setdefault(ref.uid, []).append(engine.now)
    for event in events(capture, engine.decode):
        engine.process(event)
    (finding,) = engine.active() + engine.resolved()
    return finding, times[finding.object.uid]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_every_write_after_a_fight_is_detected_is_on_its_timeline(implementation: str) -> None:
    fight, writes = _writes_by_time("fight-apply-vs-update-replicas", implementation)
    assert fight.timeline is not None
    after = [m.at for m in fight.timeline.marks() if m.at > fight.detected_at]
    assert after  # the capture goes on after detection
    assert after == [at for at in writes if at > fight.detected_at]  # the writes to other fields too
    assert len(fight.timeline.marks()) <= fight.writes


@pytest.mark.parametrize("capture", ["hot-loop-status", "hot-loop-timestamp"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_hot_loops_timeline_counts_its_streak_and_marks_every_write_after(capture: str, implementation: str) -> None:
    loop, writes = _writes_by_time(capture, implementation)
    timeline = loop.timeline
    assert timeline is not None
    assert not timeline.partial
    (before,) = timeline.bins  # the streak up to detection, one fold for the one hot writer
    assert before.start == loop.first_seen
    assert before.end <= loop.detected_at
    assert [m.at for m in timeline.marks()] == [at for at in writes if at >= loop.detected_at]
    assert before.writes == loop.writers[0].writes - len(timeline.marks())
    assert _counted(timeline) <= loop.writes


def test_timelines_off_and_resolved_findings_beyond_the_kept_ones_have_none() -> None:
    off = parse_config({"detection": {"timeline": {"marks": 0}}}, source="test").detection
    findings, _ = analyse("fight-three-writers", off)
    assert [f.timeline for f in findings] == [None]
    keep_one = parse_config({"detection": {"timeline": {"resolved": 1}}}, source="test").detection
    _, engine = analyse("fight-three-writers", keep_one)
    for capture in ("fight-data", "hot-loop-status"):
        _, other = analyse(capture, keep_one)
        assert other.active()
    engine.advance(engine.now + 86_400)
    (resolved,) = engine.resolved()
    assert resolved.timeline is not None  # the one most recent resolved finding keeps it


def test_the_conflicts_audit_events_show_are_marked_on_the_fights_timeline() -> None:
    findings = audit_recordings.findings(audit_recordings.joined("rmw-fight"))
    (fight,) = [f for f in findings if f.type is FindingType.FIGHT and f.object.namespace == "rmw-fight"]
    assert fight.timeline is not None
    conflicts = [m for m in fight.timeline.marks() if m.kind == CONFLICT]
    assert 0 < len(conflicts) <= fight.conflicts
    lanes = {fight.timeline.lanes[m.lane].manager for m in conflicts}
    assert lanes == {c.manager for c in fight.clients if c.conflicts}  # in the lane of the writer that failed
    (storm,) = [f for f in findings if f.type is FindingType.CONFLICT_STORM]
    assert storm.timeline is not None
    (before,) = [b for b in storm.timeline.bins if b.lane == -1]  # its streak, not told apart by client
    assert before.conflicts == before.writes > 0
    marks = storm.timeline.marks()
    assert sum(m.kind == CONFLICT for m in marks) + before.conflicts == storm.conflicts
