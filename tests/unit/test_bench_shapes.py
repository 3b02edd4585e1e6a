"""The shapes of data the benchmarks measure (`harness/bench/shapes/`), on small sizes: each stream reads without
an invalid event and has the character it promises (writes per object, bytes per event, share of conflicts, of
reads, of bodies), the replicated recordings give the recordings' own findings, and the turn a benchmark runs in a
build's interpreter reports its floor and analysis."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from harness import REPO_ROOT
from harness.bench import shapes
from harness.bench.shapes import audit, watch
from harness.bench.shapes.report import markdown
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.request_engine import RequestEngine
from watcher.sources.audit import AuditStats, read_audit_log
from watcher.sources.capture import ReadStats, read_capture


def replayed(path: Path) -> tuple[Engine, ReadStats]:
    engine = Engine(Config().detection)
    stats = ReadStats()
    for event in read_capture(str(path), engine.decode, stats=stats):
        engine.process(event)
    return engine, stats


def analysed(path: Path) -> tuple[RequestEngine, AuditStats]:
    engine = RequestEngine(Config().detection)
    stats = AuditStats()
    for request in read_audit_log(str(path), stats=stats):
        engine.process(request)
    return engine, stats


def unlaned(namespace: str | None, name: str) -> tuple[str | None, str]:
    """An object's name as its recording has it (`replicate.lane_name` undone)."""
    if namespace:
        return namespace.rsplit("-", 1)[0], name
    return namespace, name.rsplit("-", 1)[0]


def found(engine: Engine | RequestEngine, *, laned: bool) -> set[tuple[str, str | None, str]]:
    out = set()
    for f in engine.active() + engine.resolved():
        namespace, name = unlaned(f.object.namespace, f.object.name) if laned else (f.object.namespace, f.object.name)
        out.add((f.type.value, namespace, name))
    return out


def test_the_replicated_recordings_find_what_the_recordings_find_once_per_copy(tmp_path: Path) -> None:
    expected: set[tuple[str, str | None, str]] = set()
    count = 0
    for recording in watch.scenario_recordings():
        single = tmp_path / "single.jsonl"
        single.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in watch.metadata_events(recording)))
        engine = replayed(single)[0]
        expected |= found(engine, laned=False)
        count += len(engine.active() + engine.resolved())
    path = tmp_path / "scenarios.jsonl"
    make_up = watch.write_scenarios(path, events=12_000)
    assert make_up["copies"] == 2
    engine, stats = replayed(path)
    assert stats.skipped_invalid == 0
    assert found(engine, laned=True) == expected
    assert len(engine.active() + engine.resolved()) == count * make_up["copies"] * make_up["lanes"]


def test_the_replicated_recordings_are_metadata_only_each_object_added_once(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.jsonl"
    make_up = watch.write_scenarios(path, events=12_000)
    present: set[tuple[str, str, str]] = set()
    writes: Counter[tuple[str, str, str]] = Counter()
    times = []
    for line in path.read_bytes().splitlines():
        event = orjson.loads(line)
        obj = event["object"]
        assert set(obj) == {"kind", "apiVersion", "metadata"}
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert event["type"] != "ADDED" or key not in present, key
        (present.discard if event["type"] == "DELETED" else present.add)(key)
        writes[key] += 1
        times.append(event["observedAt"])
    assert times == sorted(times)
    assert len(writes) == make_up["objects"] > 300
    assert sum(writes.values()) / len(writes) >= 10  # many writes each, on average
    statuses = [line for line in path.read_bytes().splitlines() if b'"subresource":"status"' in line]
    assert len(statuses) > 100  # controllers' status writes among them


def test_large_objects_are_tens_of_kb_and_their_one_fight_is_found(tmp_path: Path) -> None:
    path = tmp_path / "large.jsonl"
    make_up = watch.write_large_objects(path, events=600)
    assert path.stat().st_size / 600 > 20_000
    assert make_up["mean_bytes"] > 20_000
    configmap, deployment = (orjson.loads(line)["object"] for line in path.read_bytes().splitlines()[:2])
    assert len(configmap["metadata"]["annotations"][watch.LAST_APPLIED]) > 10_000
    assert len(orjson.dumps(configmap["data"])) > 10_000
    assert len(orjson.dumps(deployment["metadata"]["managedFields"])) > 10_000
    engine, stats = replayed(path)
    assert stats.skipped_invalid == 0
    assert found(engine, laned=False) == {("fight", "team-0", "settings-0")}


def test_the_synthetic_shapes_write_full_objects_and_metadata_only(tmp_path: Path) -> None:
    full, metadata = (shapes.shape(shapes.REPLAY, name) for name in ("synthetic", "synthetic-metadata"))
    for one, keys in ((full, {"data"}), (metadata, set())):
        path = tmp_path / f"{one.name}.jsonl"
        one.write(path, 2_000)
        objects = [orjson.loads(line)["object"] for line in path.read_bytes().splitlines()]
        assert len(objects) >= 2_000
        extra = {k for obj in objects for k in obj} - {"kind", "apiVersion", "metadata"}
        assert keys <= extra if keys else not extra
        assert replayed(path)[1].skipped_invalid == 0


def shares(path: Path) -> dict[str, float]:
    counted: Counter[str] = Counter()
    lines = path.read_bytes().splitlines()
    ids = set()
    for line in lines:
        event = orjson.loads(line)
        ids.add(event["auditID"])
        counted["conflicts"] += event["responseStatus"]["code"] == 409
        counted["reads"] += event["verb"] in audit.READS
        counted["with_bodies"] += "requestObject" in event or "responseObject" in event
    assert len(ids) == len(lines)  # an auditID of its own each
    return {k: v / len(lines) for k, v in counted.items()}


@pytest.mark.parametrize(
    ("writer", "character", "findings"),
    [
        (
            audit.write_conflicts,
            lambda s: s["conflicts"] >= 0.35 and s["reads"] == 0,
            {"conflict_storm", "apply_conflict"},
        ),
        (audit.write_reads, lambda s: 0.85 <= s["reads"] <= 0.9, {"conflict_storm", "apply_conflict", "noop_writes"}),
        (
            audit.write_request_response,
            lambda s: s["with_bodies"] > 0.5,
            {"conflict_storm", "apply_conflict", "noop_writes"},
        ),
    ],
)
def test_the_audit_shapes_read_whole_and_have_their_character(tmp_path: Path, writer, character, findings) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "audit.jsonl"
    make_up = writer(path, events=5_000)
    measured = shares(path)
    assert character(measured), measured
    assert measured["conflicts"] == pytest.approx(make_up["share_conflicts"], abs=0.01)
    engine, stats = analysed(path)
    assert stats.read.skipped_invalid == 0
    assert stats.events == len(path.read_bytes().splitlines())
    assert not stats.backwards
    assert {f.type.value for f in engine.active() + engine.resolved()} == findings


def test_a_conflict_storm_replicated_is_found_in_every_lane_and_copy(tmp_path: Path) -> None:
    path = tmp_path / "conflicts.jsonl"
    make_up = audit.write_conflicts(path, events=5_000)
    engine, _ = analysed(path)
    storms = Counter(
        unlaned(f.object.namespace, f.object.name)
        for f in engine.active() + engine.resolved()
        if f.type.value == "conflict_storm"
    )
    per = make_up["lanes"] * make_up["copies"]
    assert storms == {
        ("rmw-fight", "settings"): per,
        ("storm-fields", "app"): per,
        ("cascade", "app-rendered"): per,
        ("replicaset-scale", "web-5997c7558c"): per,
    }


def test_a_stream_is_written_once_and_reused(tmp_path: Path) -> None:
    written: list[int] = []

    def write(path: Path, events: int) -> dict[str, int]:
        written.append(events)
        path.write_bytes(b"{}\n" * events)
        return {"events": events}

    one = shapes.Shape("tiny", shapes.REPLAY, 100, write, "a test's")
    first = shapes.obtain(one, tmp_path, 0.5)
    assert shapes.obtain(one, tmp_path, 0.5) == first == (tmp_path / "replay-tiny-50.jsonl", {"events": 50})
    assert written == [50]
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["replay-tiny-50.json", "replay-tiny-50.jsonl"]


def test_a_turn_reports_its_floor_and_analysis_in_json(tmp_path: Path) -> None:
    path = tmp_path / "large.jsonl"
    watch.write_large_objects(path, events=100)
    script = REPO_ROOT / "scripts" / "bench_shape_turn.py"
    done = subprocess.run(
        [sys.executable, str(script), "replay", str(path), "--engine", "python"], capture_output=True, check=True
    )
    result = json.loads(done.stdout)
    assert result["lines"] == result["events"] == 100
    assert result["floor_s"] > 0
    assert result["analysis_s"] > 0


def test_the_report_sets_each_audit_shape_beside_the_replay_of_the_scenarios() -> None:
    def figures(rate: float) -> dict[str, float]:
        return {
            "analysis_events_per_s": rate,
            "floor_events_per_s": 2 * rate,
            "ratio_of_bests": 0.5,
            "ratio_median": 0.5,
        }

    def result(name: str, kind: str, rates: tuple[float, float]) -> dict[str, object]:
        return {
            "shape": name,
            "kind": kind,
            "about": "x",
            "events": 10,
            "bytes": 10_000,
            "bytes_per_event": 1_000,
            "make_up": {"share_conflicts": 0.4},
            "builds": {"before": figures(rates[0]), "after": figures(rates[1])},
        }

    report = {
        "kind": shapes.AUDIT,
        "cpu": 0,
        "runs": 1,
        "engine": "native",
        "machine": {"cores": 2, "cpu": "a CPU"},
        "builds": {"before": "/b", "after": "/a"},
        "shapes": [
            result("conflicts", shapes.AUDIT, (100.0, 300.0)),
            result("scenarios", shapes.REPLAY, (200.0, 200.0)),
        ],
    }
    rows = [re.split(r"\s*\|\s*", line.strip("| ")) for line in markdown(report).splitlines() if line.startswith("| c")]
    assert [(r[1], r[9], r[10]) for r in rows] == [("before", "1.00x", "0.50x"), ("after", "3.00x", "1.50x")]
