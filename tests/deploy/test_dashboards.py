"""The Grafana dashboards: generated from scripts/dashboards.py and checked for the conventions every panel must
follow. (That each query returns data from a real Prometheus scraping a live watcher is tested end to end.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
RATE = re.compile(r"\b(rate|increase|irate)\([^\[]*\[([^\]]+)\]")


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def queries(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


def test_dashboards_are_generated_and_up_to_date() -> None:
    assert len(DASHBOARDS) == 2
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "dashboards.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_conventions(path: Path) -> None:
    board = load(path)
    assert board["uid"].startswith("fightwatch-")
    assert "fightwatch" in board["tags"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["cluster"]["allValue"] == ".*"  # optional: matches series without a cluster label
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for item in board["panels"]:
        assert item["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, item["title"]
        for t in item["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", item["title"]
            assert 'cluster=~"$cluster"' in t["expr"], item["title"]
            for _, window in RATE.findall(t["expr"]):
                assert window == "$__rate_interval", item["title"]


def test_every_metric_queried_is_one_fightwatch_exposes() -> None:
    from watcher.sinks.metric_families import FAMILIES  # noqa: PLC0415 - the metrics table, one place for names

    exposed = set()
    for family in FAMILIES:
        exposed.add(family.exposed_name)
        if family.type == "histogram":
            exposed |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
    for path in DASHBOARDS:
        for expr in queries(load(path)):
            for name in re.findall(r"\b(fightwatch_[a-z_]+)", expr):
                assert name in exposed, f"{path.name}: {name}"
