"""The scale benchmark's pure parts (scripts/bench_scale.py): the informer's progress line, the load's writes, the
medians, the limits verdict and the table. The benchmark itself runs on a control plane, outside the suite."""

from __future__ import annotations

import pytest

from harness.bench.scale import configmaps, load_write, parse_progress
from harness.bench.scale_report import (
    FIGHTWATCH,
    INFORMER,
    NO_WATCHER,
    limits,
    markdown,
    medians,
    ratio,
    turn_order,
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("events 0 synced ", (0, [0])),  # before its first list: an empty version
        ("events 18001 synced 123456", (18001, [123456])),
        ("events 5 synced 10 ", (5, [10, 0])),  # two informers, the second not listed yet
    ],
)
def test_progress_line(line: str, expected: tuple[int, list[int]]) -> None:
    assert parse_progress(line) == expected


@pytest.mark.parametrize("line", ["ready", "seen bench-marker-1", "events x synced 1", "events 3"])
def test_not_a_progress_line(line: str) -> None:
    with pytest.raises(ValueError, match="progress"):
        parse_progress(line)


def test_load_spreads_over_every_object_by_both_managers() -> None:
    writes = [load_write(k, 1000, 4, stamp=7) for k in range(1000)]
    assert len({w.path for w in writes}) == 1000  # STRIDE is prime to the count: each object once
    assert {w.manager for w in writes} == {"writer-a", "writer-b"}
    first = writes[1]
    assert first.patch == {"data": {first.manager: "7-1"}}
    assert first.path == "/api/v1/namespaces/bench-3/configmaps/cm-000919"


def test_configmaps_are_spread_over_namespaces() -> None:
    made = list(configmaps(6, 4))
    assert [path for path, _ in made].count("/api/v1/namespaces/bench-1/configmaps") == 2
    body = made[5][1]
    assert body["metadata"] == {"name": "cm-000005", "labels": {"app": "app-5", "tier": "bench"}}
    assert len(body["data"]["payload"]) == 1000


def test_medians_by_watcher_of_the_figures_each_has() -> None:
    turns = [
        {"watcher": FIGHTWATCH, "ready_s": 10.0, "start_peak_mib": 300.0},
        {"watcher": INFORMER, "ready_s": 4.0},
        {"watcher": FIGHTWATCH, "ready_s": 14.0, "start_peak_mib": 200.0},
        {"watcher": FIGHTWATCH, "ready_s": 30.0, "start_peak_mib": 250.0},
        {"watcher": NO_WATCHER, "apiserver_load_cpu_s": 20.0, "unknown": 1.0},
    ]
    assert medians(turns) == {
        FIGHTWATCH: {"ready_s": 14.0, "start_peak_mib": 250.0},
        INFORMER: {"ready_s": 4.0},
        NO_WATCHER: {"apiserver_load_cpu_s": 20.0},
    }


def test_ratio_of_missing_or_zero_is_none() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(3.0, 0.0) is None


def test_limits_take_the_highest_peak_and_the_cores_under_load() -> None:
    figures = {
        "start_peak_mib": 700.0,
        "relist_peak_mib": 1100.0,
        "load_peak_mib": 400.0,
        "load_cores": 0.4,
        "ready_s": 10.0,
        "start_cpu_s": 12.0,
    }
    limit = limits(figures)
    assert limit["peak_mib"] == 1100.0
    assert (limit["memory_within"], limit["cpu_within"]) == (False, True)
    assert limit["cores"] == {"load": 0.4, "start": 1.2, "relist": 0.0}


def test_table_rows_of_measured_figures_with_ratio_and_baseline() -> None:
    median = {
        FIGHTWATCH: {"ready_s": 12.0, "load_cpu_ms_per_event": 0.05, "apiserver_load_cpu_s": 2000.0},
        INFORMER: {"ready_s": 4.0, "load_cpu_ms_per_event": 0.1, "apiserver_load_cpu_s": 1000.0},
        NO_WATCHER: {"apiserver_load_cpu_s": 900.0},
    }
    lines = markdown(median, runs=3).splitlines()
    assert lines[0] == "| figure (median of 3) | fightwatch | informer | ratio | no watcher |"
    assert lines[2] == "| time to ready, s | 12.00 | 4.00 | 3.00 | - |"
    assert lines[3] == "| CPU per event under load, ms | 0.05 | 0.1 | 0.5 | - |"
    assert lines[4] == "| API server CPU in load, s | 2,000 | 1,000 | 2.00 | 900 |"
    assert len(lines) == 5


def test_turns_alternate_which_watcher_goes_first() -> None:
    assert turn_order(3) == [
        (0, FIGHTWATCH),
        (0, INFORMER),
        (1, INFORMER),
        (1, FIGHTWATCH),
        (2, FIGHTWATCH),
        (2, INFORMER),
    ]
