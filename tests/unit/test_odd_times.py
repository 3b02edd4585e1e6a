"""Odd times through every output (`-o table|wide|json|yaml`, `--html`): the epoch, the year 1, the last second of
9999, no time at all, and a log out of time order.

What each gives:

- an audit event at 1970-01-01T00:00:00Z or at 9999-12-31T23:59:59Z is read and shown at that time; the findings of
  a log there too (a finding's timeline is drawn for 1970 to 2112 only, what its marks hold: past that its card says
  so, and its times are shown all the same);
- an audit event before 1970 (0001-01-01) or without a time is refused, naming the file and line (exit 2); with
  `--skip-invalid` it is skipped, and the report says no time is known;
- a watch capture's times are not bounded: the year 1 is shown as such (but a time the engine keeps packed, a
  handover's or a mark's, holds 1970 to 2112 only: a finding's first handover before 1970 reads as 1970);
- a log out of time order: the time range read runs from its earliest event to its latest.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson
import pytest
import yaml

from watcher import cli, offline
from watcher.exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from watcher.model import parse_time
from watcher.rendering.page import UNDRAWN

FIXTURES: Final = Path(__file__).parents[1] / "fixtures"
STORM: Final = FIXTURES / "audit" / "storm-fields.metadata.jsonl"  # an audit log with a conflict storm
FIGHT: Final = FIXTURES / "captures" / "fight-data.jsonl"  # a capture with a fight
T: Final = "2024-01-01T00:00:00Z"


def _review(stage: str | None, *, received: str | None = None) -> dict[str, Any]:
    """A SubjectAccessReview created: a request no engine analyses, only reads."""
    event: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": "a1",
        "stage": "ResponseComplete",
        "requestURI": "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        "verb": "create",
        "user": {"username": "alice"},
        "userAgent": "kubectl/v1.30",
        "objectRef": {"resource": "subjectaccessreviews", "apiGroup": "authorization.k8s.io", "apiVersion": "v1"},
        "responseStatus": {"code": 201},
    }
    if received is not None:
        event["requestReceivedTimestamp"] = received
    if stage is not None:
        event["stageTimestamp"] = stage
    return event


def _write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


def _shifted(source: Path, keys: tuple[str, ...], *, start: float | None = None, end: float | None = None) -> list[Any]:
    """The records of `source` with every time under `keys` moved alike, so the earliest of the first key's is
    `start` (or the latest `end`)."""
    records = [json.loads(line) for line in source.read_text().splitlines()]
    times = [parse_time(r[keys[0]]) for r in records]
    delta = start - min(times) if start is not None else (end or 0.0) - max(times)
    for record in records:
        for key in keys:
            if key in record:
                record[key] = _rfc3339(parse_time(record[key]) + delta)
    return records


class Ran:
    """One command run with each output: its exit statuses, standard output and error, and the report."""

    def __init__(self, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.status: dict[str, int] = {}
        self.out: dict[str, str] = {}
        self.err: dict[str, str] = {}
        report = tmp_path / "report.html"
        for output in ("table", "wide", "json", "yaml"):
            html = ["--html", str(report)] if output == "table" else []
            self.status[output] = cli.main([*command, "-o", output, "--fail-on-findings", *html])
            self.out[output], self.err[output] = capsys.readouterr()
            assert "Traceback" not in self.err[output]
        self.html = report.read_text() if report.exists() else ""
        self.json = [orjson.loads(line) for line in self.out["json"].splitlines()]
        assert list(yaml.safe_load_all(self.out["yaml"])) == self.json

    def statuses(self) -> set[int]:
        return set(self.status.values())

    def time_range(self) -> str:
        (found,) = re.findall(r"<dt>Time range</dt><dd[^>]*>(.*?)</dd>", self.html, re.DOTALL)
        return " ".join(re.sub(r"<[^>]+>", " ", found).split())

    def range_datetimes(self) -> list[str]:
        (found,) = re.findall(r"<dt>Time range</dt><dd[^>]*>(.*?)</dd>", self.html, re.DOTALL)
        return re.findall(r'datetime="([^"]+)"', found)


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(offline, "tune_gc", lambda: None)  # (the process's collector is pytest's too)
    return lambda *command: Ran(list(command), tmp_path, capsys)


def test_a_request_no_engine_analyses_still_dates_what_was_read(run: Any, tmp_path: Path) -> None:
    log = _write(tmp_path / "sar.jsonl", [_review("2024-01-01T00:00:00.001000Z", received=T)])
    ran = run("audit", log)
    assert ran.statuses() == {EXIT_OK}
    assert ran.range_datetimes() == ["2024-01-01T00:00:00.001Z"] * 2
    assert "2024-01-01 00:00:00 UTC" in ran.time_range()
    assert "2024-01-01T00:00:00.001Z" in ran.out["table"]  # "1 events from ... to ..."
    assert ran.json == []


@pytest.mark.parametrize(
    ("stage", "shown"),
    [("1970-01-01T00:00:00Z", "1970-01-01 00:00:00 UTC"), ("9999-12-31T23:59:59Z", "9999-12-31 23:59:59 UTC")],
    ids=["epoch", "year-9999"],
)
def test_an_event_at_either_end_of_the_years_read_is_shown_at_its_time(
    run: Any, tmp_path: Path, stage: str, shown: str
) -> None:
    ran = run("audit", _write(tmp_path / "at.jsonl", [_review(stage)]))
    assert ran.statuses() == {EXIT_OK}
    assert ran.range_datetimes() == [stage, stage]
    assert ran.time_range().startswith(shown)


def test_a_log_at_the_epoch_finds_and_shows_its_findings_there(run: Any, tmp_path: Path) -> None:
    records = _shifted(STORM, ("stageTimestamp", "requestReceivedTimestamp"), start=0.0)
    ran = run("audit", _write(tmp_path / "epoch.jsonl", records))
    assert ran.statuses() == {EXIT_FINDINGS}
    (storm,) = ran.json
    assert storm["first_seen"].startswith("1970-01-01T00:00:0")
    assert storm["first_seen"] in ran.out["wide"]  # its SINCE
    assert ran.range_datetimes()[0] == "1970-01-01T00:00:00Z"
    assert 'class="timeline"' in ran.html


def test_a_log_that_ends_in_the_year_9999_finds_its_findings_and_says_why_no_timeline(run: Any, tmp_path: Path) -> None:
    records = _shifted(STORM, ("stageTimestamp", "requestReceivedTimestamp"), end=parse_time("9999-12-31T23:59:59Z"))
    ran = run("audit", _write(tmp_path / "far.jsonl", records))
    assert ran.statuses() == {EXIT_FINDINGS}
    (storm,) = ran.json
    assert storm["first_seen"].startswith("9999-12-31T23:59:5")
    assert storm["first_seen"] in ran.out["wide"]
    assert ran.range_datetimes()[1] == "9999-12-31T23:59:59Z"
    assert 'class="timeline"' not in ran.html
    assert UNDRAWN in ran.html
    assert "9999-12-31 23:59:5" in ran.html  # its times, all the same


@pytest.mark.parametrize(
    ("event", "error"),
    [
        (_review("0001-01-01T00:00:00Z"), "stageTimestamp '0001-01-01T00:00:00Z' is out of range"),
        (_review(None), "no stageTimestamp"),
    ],
    ids=["year-1", "missing"],
)
def test_an_audit_event_without_a_time_it_can_read_is_refused_naming_the_file_and_line(
    run: Any, tmp_path: Path, event: dict[str, Any], error: str
) -> None:
    log = _write(tmp_path / "odd.jsonl", [event])
    ran = run("audit", log)
    assert ran.statuses() == {EXIT_ERROR}
    for output in ran.err:
        assert f"fightwatch: {log}:1: {error}" in ran.err[output]
    skipped = run("audit", log, "--skip-invalid")
    assert skipped.statuses() == {EXIT_OK}
    assert f"skipped {log}:1: {error}" in skipped.err["table"]
    assert skipped.time_range() == "not known: no event read told its time"


def test_a_log_out_of_time_order_shows_its_earliest_to_its_latest(run: Any, tmp_path: Path) -> None:
    log = _write(tmp_path / "backwards.jsonl", [_review("2024-01-01T00:01:00Z"), _review(T)])
    ran = run("audit", log)
    assert ran.statuses() == {EXIT_OK}
    assert ran.range_datetimes() == [T, "2024-01-01T00:01:00Z"]
    assert ran.time_range().endswith("(1 min)")
    reversed_storm = [json.loads(line) for line in reversed(STORM.read_text().splitlines())]
    ran = run("audit", _write(tmp_path / "storm-backwards.jsonl", reversed_storm))
    assert ran.statuses() <= {EXIT_OK, EXIT_FINDINGS}
    first, last = ran.range_datetimes()
    assert parse_time(first) < parse_time(last)


def test_a_capture_in_the_year_1_is_shown_in_the_year_1(run: Any, tmp_path: Path) -> None:
    records = _shifted(FIGHT, ("observedAt",), start=parse_time("0001-01-01T00:00:00Z"))
    ran = run("replay", _write(tmp_path / "year-1.jsonl", records))
    assert ran.statuses() == {EXIT_FINDINGS}
    assert ran.json
    # (its first handover's time is held at 1970 by the handover log, which holds 1970 to 2112: not asserted here)
    assert all(f["detected_at"].startswith("0001-01-01T") for f in ran.json)
    assert all(f["last_seen"].startswith("0001-01-01T") for f in ran.json)
    assert ran.range_datetimes()[0] == "0001-01-01T00:00:00Z"
    assert UNDRAWN in ran.html


def test_a_capture_that_tells_no_time_says_so(run: Any, tmp_path: Path) -> None:
    records = [json.loads(line) for line in FIGHT.read_text().splitlines()]
    for record in records:
        record.pop("observedAt", None)
        for entry in record["object"]["metadata"].get("managedFields") or []:
            entry.pop("time", None)
    ran = run("replay", _write(tmp_path / "untimed.jsonl", records))
    assert ran.statuses() <= {EXIT_OK, EXIT_FINDINGS}
    assert ran.time_range() == "not known: no event read told its time"
    assert "neither observedAt nor a managedFields time" in ran.out["table"]
