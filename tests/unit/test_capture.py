"""Reading captures: kubectl's pretty-printed watch output and JSON Lines, plain or gzip, and bad input (with the
decoder of either attribution implementation)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from tests.unit.captures import IMPLEMENTATIONS, capture
from watcher.detection.attribution import Decoder
from watcher.detection.events import ObjectEvent, event_object
from watcher.detection.native import implementation
from watcher.model import format_observed, parse_time
from watcher.sources.capture import CaptureError, ReadStats, read_capture, read_captures

SCENARIO = "fight-update-vs-update-label"


@pytest.fixture(params=IMPLEMENTATIONS)
def decode(request: pytest.FixtureRequest) -> Decoder:
    """The decoder of an attribution implementation (what `Engine.decode` is)."""
    return implementation(request.param).decode


def _docs(name: str = SCENARIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in capture(name).read_bytes().splitlines()]


def kubectl_style(docs: list[dict[str, object]], *, observed: bool = False) -> str:
    """What `kubectl get -w --output-watch-events -o json` prints: 4-space pretty JSON objects, one after another."""
    kept = docs if observed else [{k: v for k, v in d.items() if k != "observedAt"} for d in docs]
    return "".join(json.dumps(doc, indent=4) + "\n" for doc in kept)


def _read(path: Path | str, decode: Decoder, *, skip_invalid: bool = False) -> list[ObjectEvent]:
    return list(read_capture(str(path), decode, stats=ReadStats(), skip_invalid=skip_invalid))


def _view(event: ObjectEvent) -> tuple[Any, ...]:
    """What an event says (decoded events of two texts of the same event do not compare equal themselves)."""
    return (event.type, event.uid, event.resource_version, event.observed_at, event.time, event_object(event))


def _views(events: list[ObjectEvent]) -> list[tuple[Any, ...]]:
    return [_view(e) for e in events]


def test_json_lines_and_kubectl_output_give_the_same_events(tmp_path: Path, decode: Decoder) -> None:
    pretty = tmp_path / "kubectl.json"
    pretty.write_text(kubectl_style(_docs(), observed=True))
    assert _views(_read(pretty, decode)) == _views(_read(capture(SCENARIO), decode))


def test_gzip_is_detected_by_content(tmp_path: Path, decode: Decoder) -> None:
    packed = tmp_path / "capture.bin"
    packed.write_bytes(gzip.compress(capture(SCENARIO).read_bytes()))
    assert _views(_read(packed, decode)) == _views(_read(capture(SCENARIO), decode))


def test_observed_at_is_the_event_time_when_present(decode: Decoder) -> None:
    events = _read(capture(SCENARIO), decode)
    assert all(e.observed_at is not None for e in events)
    assert all(e.time == e.observed_at for e in events)
    assert events[0].type == "ADDED"


def test_bookmarks_and_errors_are_skipped_and_counted(tmp_path: Path, decode: Decoder) -> None:
    docs = _docs()
    bookmark = {
        "type": "BOOKMARK",
        "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "999"}},
    }
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(d) for d in [docs[0], bookmark, gone, *docs[1:]]))
    stats = ReadStats()
    assert len(list(read_capture(str(path), decode, stats=stats))) == len(docs)
    assert stats.skipped_other == 2
    assert stats.events == len(docs)
    assert stats.lines == len(docs) + 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"type": "MODIFIED", "object": {', "invalid JSON"),
        (b'["not", "an", "object"]', "expected a JSON object"),
        (b'{"type": "CHANGED", "object": {}}', "unknown watch event type 'CHANGED'"),
        (
            b'{"type": "MODIFIED", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}}}',
            "no metadata.uid",
        ),
        (
            b'{"type": "MODIFIED", "object": {"kind": "ConfigMap", "metadata": {"name": "x", "uid": "u"}}}',
            "has no kind or apiVersion",
        ),
        (b'{"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {}, "items": []}', "this is a List"),
        (b'{"hello": "world"}', "not a watch event"),
    ],
)
def test_a_malformed_event_names_file_and_line(tmp_path: Path, line: bytes, message: str, decode: Decoder) -> None:
    good = capture(SCENARIO).read_bytes().splitlines()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join([*good[:3], line, *good[3:]]))
    with pytest.raises(CaptureError) as caught:
        _read(path, decode)
    assert str(caught.value).startswith(f"{path}:4: ")
    assert message in str(caught.value)


def test_bad_observed_at_is_reported(tmp_path: Path, decode: Decoder) -> None:
    doc = _docs()[0] | {"observedAt": "yesterday"}
    path = tmp_path / "bad.jsonl"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(CaptureError, match="observedAt 'yesterday' is not an RFC 3339 time"):
        _read(path, decode)


def test_truncated_kubectl_output_names_the_line_where_the_event_starts(tmp_path: Path, decode: Decoder) -> None:
    text = kubectl_style(_docs())
    cut = text[: text.rindex('"metadata"')]
    path = tmp_path / "cut.json"
    path.write_text(cut)
    start = cut.count("\n", 0, cut.rindex("\n{")) + 2
    with pytest.raises(CaptureError, match=rf"cut\.json:{start}: the capture ends inside this event"):
        _read(path, decode)


def test_skip_invalid_counts_and_keeps_going(tmp_path: Path, decode: Decoder) -> None:
    good = capture(SCENARIO).read_bytes().splitlines()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join([good[0], b"{oops", good[1], b"[]", *good[2:]]))
    stats = ReadStats()
    events = list(read_capture(str(path), decode, stats=stats, skip_invalid=True))
    assert len(events) == len(good)
    assert stats.skipped_invalid == 2
    assert stats.problems[0].startswith(f"{path}:2: invalid JSON")


def test_missing_file_is_a_capture_error(tmp_path: Path, decode: Decoder) -> None:
    with pytest.raises(CaptureError, match="cannot open"):
        _read(tmp_path / "nope.json", decode)


def test_several_files_are_merged_by_event_time(decode: Decoder) -> None:
    a, b = capture("fight-update-vs-update-label"), capture("fight-shared-manager")
    merged = list(read_captures([str(a), str(b)], decode, stats=ReadStats()))
    times = [cast(float, e.observed_at) for e in merged]  # (every event of a capture has its observedAt)
    assert times == sorted(times)
    assert len(merged) == len(_read(a, decode)) + len(_read(b, decode))


# ------------------------------------------------------------------------------------- files that break off

BIG = "hot-loop-timestamp"  # (large enough that a cut gzip stream still holds whole events)


def _read_until_broken(path: Path, decode: Decoder) -> tuple[list[ObjectEvent], CaptureError, ReadStats]:
    """The events yielded before the read broke off, and the error it broke off with."""
    read: list[ObjectEvent] = []
    stats = ReadStats()
    with pytest.raises(CaptureError) as caught:
        read.extend(read_capture(str(path), decode, stats=stats))
    return read, caught.value, stats


def _lines_read(error: CaptureError) -> int:
    """N of the message's "read up to line N"."""
    return int(str(error).rsplit("read up to line ", 1)[1].replace(",", ""))


def test_a_truncated_gzip_capture_yields_what_it_holds_then_says_where_it_broke_off(
    tmp_path: Path, decode: Decoder
) -> None:
    whole = capture(BIG).read_bytes()
    packed = gzip.compress(whole, mtime=0)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    read, error, stats = _read_until_broken(path, decode)
    assert error.source == str(path)
    assert error.line is None  # (no event of its own is at fault)
    assert str(error).startswith(f"{path}: the compressed stream ends early (truncated file?); read up to line ")
    every = _read(capture(BIG), decode)
    assert 0 < len(read) < len(every)
    assert _views(read) == _views(every[: len(read)])  # the events before the break, as they are
    assert _lines_read(error) == len(read) == stats.events  # (JSON Lines: a line an event)


def test_a_gzip_capture_cut_in_its_header_reads_nothing(tmp_path: Path, decode: Decoder) -> None:
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(capture(SCENARIO).read_bytes(), mtime=0)[:12])
    read, error, _ = _read_until_broken(path, decode)
    assert read == []
    assert str(error) == f"{path}: the compressed stream ends early (truncated file?); read up to line 0"


def _corrupt_after(head: bytes, tail: bytes) -> bytes:
    """`head` as a sound gzip member, then a member whose deflate data is broken (block type 3 is reserved)."""
    return gzip.compress(head, mtime=0) + gzip.compress(tail, mtime=0)[:10] + b"\x07" + bytes(16)


def test_a_corrupt_gzip_capture_yields_what_came_before_then_says_where_it_broke_off(
    tmp_path: Path, decode: Decoder
) -> None:
    lines = capture(SCENARIO).read_bytes().splitlines(keepends=True)
    head, tail = b"".join(lines[:5]), b"".join(lines[5:])
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(_corrupt_after(head, tail))
    read, error, _ = _read_until_broken(path, decode)
    assert error.source == str(path)
    assert error.line is None
    assert str(error).startswith(f"{path}: the compressed stream is corrupt (")
    assert "invalid block type" in str(error)
    assert str(error).endswith("; read up to line 5")
    assert _views(read) == _views(_read(capture(SCENARIO), decode)[:5])


def test_a_gzip_capture_with_a_wrong_checksum_is_corrupt_after_its_last_event(tmp_path: Path, decode: Decoder) -> None:
    whole = capture(SCENARIO).read_bytes()
    packed = bytearray(gzip.compress(whole, mtime=0))
    packed[-8] ^= 0xFF  # the CRC-32 of the trailer
    path = tmp_path / "crc.jsonl.gz"
    path.write_bytes(bytes(packed))
    read, error, _ = _read_until_broken(path, decode)
    lines = len(whole.splitlines())
    assert len(read) == lines
    assert str(error).startswith(f"{path}: the compressed stream is corrupt (CRC check failed")
    assert str(error).endswith(f"; read up to line {lines}")


def test_a_broken_gzip_capture_is_an_error_even_when_skipping_invalid_events(tmp_path: Path, decode: Decoder) -> None:
    """`skip_invalid` skips bad events; a file that breaks off is no event to skip."""
    lines = capture(SCENARIO).read_bytes().splitlines(keepends=True)
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(_corrupt_after(b"".join(lines[:5]), b"".join(lines[5:])))
    stats = ReadStats()
    read: list[ObjectEvent] = []
    with pytest.raises(CaptureError, match="the compressed stream is corrupt"):
        read.extend(read_capture(str(path), decode, stats=stats, skip_invalid=True))
    assert len(read) == 5
    assert stats.skipped_invalid == 0


def test_a_broken_file_among_several_names_that_file(tmp_path: Path, decode: Decoder) -> None:
    """Merged by time: the events of every file up to the break, then the error naming the file that broke off."""
    earlier = tmp_path / "earlier.jsonl"  # (the day before: read to its end before the other file breaks off)
    docs = [d | {"observedAt": format_observed(parse_time(str(d["observedAt"])) - 86400)} for d in _docs()]
    earlier.write_bytes(b"\n".join(orjson.dumps(d) for d in docs))
    packed = gzip.compress(capture(BIG).read_bytes(), mtime=0)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    read: list[ObjectEvent] = []
    with pytest.raises(CaptureError) as caught:
        read.extend(read_captures([str(cut), str(earlier)], decode, stats=ReadStats()))
    assert caught.value.source == str(cut)
    assert "the compressed stream ends early (truncated file?)" in str(caught.value)
    assert len(read) == len(docs) + _lines_read(caught.value)
    assert [e.time for e in read] == sorted(e.time or 0 for e in read)
