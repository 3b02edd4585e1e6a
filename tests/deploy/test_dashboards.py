"""The Grafana dashboards: generated from scripts/dashboards.py and checked for the conventions every panel must
follow. (That each query returns data from a real Prometheus scraping a live watcher is tested end to end.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.generated import assert_up_to_date

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
RATE = re.compile(r"\b(rate|increase|irate)\([^\[]*\[([^\]]+)\]")


def load(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def queries(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


def by_title(board: dict[str, Any]) -> dict[str, Any]:
    return {p["title"]: p for p in board["panels"]}


def variables(board: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v for v in board["templating"]["list"]}


OVERVIEW = REPO / "dashboards" / "fightwatch-overview.json"
OBJECT = REPO / "dashboards" / "fightwatch-object.json"
REPLICAS_MERGED_OVER_SHARDS = re.compile(r"^sum by \([^)]*\bincident\b[^)]*\) \(max without \(instance, pod\) \(")


def test_dashboards_are_generated_and_up_to_date() -> None:
    assert len(DASHBOARDS) == 2
    assert_up_to_date("dashboards.py")


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
    from watcher.metrics.families import FAMILIES  # noqa: PLC0415 - the metrics table, one place for names

    exposed = set()
    for family in FAMILIES:
        exposed.add(family.exposed_name)
        if family.type == "histogram":
            exposed |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
    for path in DASHBOARDS:
        for expr in queries(load(path)):
            for name in re.findall(r"\b(fightwatch_[a-z_]+)", expr):
                assert name in exposed, f"{path.name}: {name}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_layout_fits_the_grid_without_overlaps(path: Path) -> None:
    boxes = [(p["title"], p["gridPos"]) for p in load(path)["panels"]]
    for title, g in boxes:
        assert min(g["w"], g["h"]) > 0, title
        assert 0 <= g["x"] <= g["x"] + g["w"] <= 24, title
    for i, (a, ga) in enumerate(boxes):
        for b, gb in boxes[i + 1 :]:
            apart = (
                ga["x"] + ga["w"] <= gb["x"]
                or gb["x"] + gb["w"] <= ga["x"]
                or ga["y"] + ga["h"] <= gb["y"]
                or gb["y"] + gb["h"] <= ga["y"]
            )
            assert apart, (a, b)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_variable_used_is_defined(path: Path) -> None:
    board = load(path)
    defined = set(variables(board)) | {"__rate_interval"}
    used = [*queries(board), *(v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query")]
    for expr in used:
        assert set(re.findall(r"\$(\w+)", expr)) <= defined, expr


def test_overview_opens_with_the_incidents() -> None:
    board = load(OVERVIEW)
    panels = by_title(board)
    count, omitted, table = panels["Active incidents"], panels["Incidents without series"], panels["Incidents"]
    # Near the top: right below the first row of stats, above the findings of which they are made.
    for item in (count, omitted, table):
        assert item["gridPos"]["y"] < panels["Active findings"]["gridPos"]["y"]
        assert not any(t["expr"].startswith("sum(") and "fightwatch_leader" in t["expr"] for t in item["targets"])
        assert "Needs the audit webhook" not in item.get("description", "")  # (data whenever an incident is active)
    [distinct] = count["targets"]
    assert re.match(r"^count\(count by \(incident\) \(fightwatch_incident_info\{", distinct["expr"])
    assert "fightwatch_incident_series_omitted" in omitted["targets"][0]["expr"]
    info, objects, rate = table["targets"]
    assert "fightwatch_incident_info{" in info["expr"]
    # A shard counts only its objects (summed), the replicas of one shard the same ones (merged first).
    assert REPLICAS_MERGED_OVER_SHARDS.match(objects["expr"]), objects["expr"]
    assert "fightwatch_incident_objects{" in objects["expr"]
    assert REPLICAS_MERGED_OVER_SHARDS.match(rate["expr"]), rate["expr"]
    assert "fightwatch_incident_writes_per_minute{" in rate["expr"]
    assert all(t.get("instant") and t["format"] == "table" for t in table["targets"])
    organize = next(t for t in table["transformations"] if t["id"] == "organize")["options"]
    assert organize["renameByName"][f"Value #{objects['refId']}"] == "objects"
    assert table["options"]["sortBy"] == [{"displayName": "objects", "desc": True}]
    for column in ("type", "writers", "fields", "incident"):
        assert column in organize["indexByName"], column


def test_findings_name_their_incident_and_incidents_link_to_their_objects() -> None:
    panels = by_title(load(OVERVIEW))
    object_uid = load(OBJECT)["uid"]
    for title in ("Active findings", "Incidents"):
        options = next(t for t in panels[title]["transformations"] if t["id"] == "organize")["options"]
        assert "incident" in options["indexByName"], title
        assert "incident" not in options["excludeByName"], title
        [link] = [
            link
            for o in panels[title]["fieldConfig"]["overrides"]
            if o["matcher"] == {"id": "byName", "options": "incident"}
            for prop in o["properties"]
            if prop["id"] == "links"
            for link in prop["value"]
        ]
        assert link["url"].startswith(f"/d/{object_uid}?"), title
        assert "var-incident=${__value.raw}" in link["url"], title
        assert "${cluster:queryparam}" in link["url"], title


def test_object_dashboard_shows_the_objects_of_one_incident() -> None:
    board = load(OBJECT)
    found = variables(board)
    incident = found["incident"]
    assert incident["query"]["query"] == 'label_values(fightwatch_finding_info{cluster=~"$cluster"}, incident)'
    assert incident["current"]["value"] == ["$__all"]
    assert incident["allValue"] == ".*"
    names = [v["name"] for v in board["templating"]["list"]]
    for name in ("namespace", "kind", "name"):  # (offer only the chosen incident's objects)
        assert names.index("incident") < names.index(name)
        assert 'incident=~"$incident"' in found[name]["query"]["query"], name
    per_object = [p for p in board["panels"] if any("fightwatch_finding_" in t["expr"] for t in p["targets"])]
    assert {p["title"] for p in per_object} == {
        "Findings on this object",
        "Handovers",
        "Writes per minute to the object",
    }
    for item in per_object:
        for t in item["targets"]:
            # Only fightwatch_finding_info carries `incident`: the other per-object series are joined to it.
            assert "fightwatch_finding_info{" in t["expr"], item["title"]
            assert 'incident=~"$incident"' in t["expr"], item["title"]
