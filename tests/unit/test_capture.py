"""Reading captures: kubectl's pretty-printed watch output and JSON Lines, plain or gzip, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest

from tests.unit.captures import capture
from watcher.model import EventType
from watcher.sources.capture import CaptureError, ReadStats, read_capture, read_captures

SCENARIO = "fight-update-vs-update-label"


def _docs(name: str = SCENARIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in capture(name).read_bytes().splitlines()]


def kubectl_style(docs: list[dict[str, object]], *, observed: bool = False) -> str:
    """What `kubectl get -w --output-watch-events -o json` prints: 4-space pretty JSON objects, one after another."""
    kept = docs if observed else [{k: v for k, v in d.items() if k != "observedAt"} for d in docs]
    return "".join(json.dumps(doc, indent=4) + "\n" for doc in kept)


def _read(path: Path | str, **kwargs: bool) -> list:
    return list(read_capture(str(path), stats=ReadStats(), **kwargs))


def test_json_lines_and_kubectl_output_give_the_same_events(tmp_path: Path) -> None:
    pretty = tmp_path / "kubectl.json"
    pretty.write_text(kubectl_style(_docs(), observed=True))
    assert _read(pretty) == _read(capture(SCENARIO))


def test_gzip_is_detected_by_content(tmp_path: Path) -> None:
    packed = tmp_path / "capture.bin"
    packed.write_bytes(gzip.compress(capture(SCENARIO).read_bytes()))
    assert _read(packed) == _read(capture(SCENARIO))


def test_observed_at_is_the_event_time_when_present() -> None:
    events = _read(capture(SCENARIO))
    assert all(e.observed_at is not None for e in events)
    assert events[0].type is EventType.ADDED


def test_bookmarks_and_errors_are_skipped_and_counted(tmp_path: Path) -> None:
    docs = _docs()
    bookmark = {
        "type": "BOOKMARK",
        "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "999"}},
    }
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(d) for d in [docs[0], bookmark, gone, *docs[1:]]))
    stats = ReadStats()
    assert len(list(read_capture(str(path), stats=stats))) == len(docs)
    assert stats.skipped_other == 2


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
def test_a_malformed_event_names_file_and_line(tmp_path: Path, line: bytes, message: str) -> None:
    good = capture(SCENARIO).read_bytes().splitlines()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join([*good[:3], line, *good[3:]]))
    with pytest.raises(CaptureError) as caught:
        _read(path)
    assert str(caught.value).startswith(f"{path}:4: ")
    assert message in str(caught.value)


def test_bad_observed_at_is_reported(tmp_path: Path) -> None:
    doc = _docs()[0] | {"observedAt": "yesterday"}
    path = tmp_path / "bad.jsonl"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(CaptureError, match="observedAt 'yesterday' is not an RFC 3339 time"):
        _read(path)


def test_truncated_kubectl_output_names_the_line_where_the_event_starts(tmp_path: Path) -> None:
    text = kubectl_style(_docs())
    cut = text[: text.rindex('"metadata"')]
    path = tmp_path / "cut.json"
    path.write_text(cut)
    start = cut.count("\n", 0, cut.rindex("\n{")) + 2
    with pytest.raises(CaptureError, match=rf"cut\.json:{start}: the capture ends inside this event"):
        _read(path)


def test_skip_invalid_counts_and_keeps_going(tmp_path: Path) -> None:
    good = capture(SCENARIO).read_bytes().splitlines()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join([good[0], b"{oops", good[1], b"[]", *good[2:]]))
    stats = ReadStats()
    events = list(read_capture(str(path), stats=stats, skip_invalid=True))
    assert len(events) == len(good)
    assert stats.skipped_invalid == 2
    assert stats.problems[0].startswith(f"{path}:2: invalid JSON")


def test_missing_file_is_a_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="cannot open"):
        _read(tmp_path / "nope.json")


def test_several_files_are_merged_by_event_time(tmp_path: Path) -> None:
    a, b = capture("fight-update-vs-update-label"), capture("fight-shared-manager")
    merged = list(read_captures([str(a), str(b)], stats=ReadStats()))
    times = [e.observed_at for e in merged]
    assert times == sorted(times)
    assert len(merged) == len(_read(a)) + len(_read(b))
