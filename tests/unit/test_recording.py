"""`--record`: JSON Lines that replay reads back to exactly the events and times the watcher analysed."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from tests.unit.captures import events
from watcher.model import WatchEvent, format_observed, observed_time, parse_time
from watcher.sinks.recording import Recording
from watcher.sources.capture import ReadStats, read_capture, read_captures


def _stamped(name: str) -> list[WatchEvent]:
    start = observed_time(time.time())
    return [WatchEvent(e.type, e.object, observed_time(start + n * 0.0137)) for n, e in enumerate(events(name))]


def test_a_recording_replays_to_the_same_events_and_times(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    originals = _stamped("fight-data")
    recording = Recording(path, max_bytes=2**30, keep=1)
    for event in originals:
        recording.write(event)
    recording.close()
    replayed = list(read_capture(str(path), stats=ReadStats()))
    assert replayed == originals  # types, objects and float times, exactly
    assert recording.events == len(originals)
    assert recording.bytes_written == path.stat().st_size


def test_observed_times_survive_the_text_round_trip_exactly() -> None:
    for n in range(10_000):
        t = observed_time(1_790_000_000 + n * 12.345678901)
        text = format_observed(t)
        assert parse_time(text) == t
        assert text.endswith("Z")
        assert len(text) == 27


def test_rotation_by_size_keeps_the_newest_parts_and_replays_in_order(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    originals = _stamped("hot-loop-timestamp")
    recording = Recording(path, max_bytes=8_000, keep=2)
    for event in originals:
        recording.write(event)
    recording.close()
    parts = sorted(p.name for p in tmp_path.iterdir())
    assert parts == ["rec.jsonl", "rec.jsonl.1", "rec.jsonl.2"]
    assert recording.rotations > 2  # older parts were dropped
    for part in ("rec.jsonl.1", "rec.jsonl.2"):
        assert (tmp_path / part).stat().st_size >= 8_000
    files = [str(tmp_path / p) for p in ("rec.jsonl.2", "rec.jsonl.1", "rec.jsonl")]
    replayed = list(read_captures(files, stats=ReadStats()))
    assert replayed == originals[-len(replayed) :]


def test_a_recording_continues_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    originals = _stamped("fight-data")
    for half in (originals[:3], originals[3:]):
        recording = Recording(path, max_bytes=2**30, keep=1)
        for event in half:
            recording.write(event)
        recording.close()
    assert [orjson.loads(line)["type"] for line in path.read_bytes().splitlines()] == [e.type for e in originals]


def test_a_failing_disk_stops_the_recording_not_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    recording = Recording(path, max_bytes=100, keep=1)
    tmp_path.chmod(0o500)  # rotation cannot rename in a read-only directory
    try:
        for event in _stamped("fight-data"):
            recording.write(event)
    finally:
        tmp_path.chmod(0o700)
    recording.close()
    if recording.error is not None:  # (root ignores directory permissions: nothing fails then)
        assert str(path) in recording.error
