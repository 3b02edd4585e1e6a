"""The HTTP endpoints on findings of recorded captures: filters, status codes, the replay JSON schema."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.unit.captures import analyse
from watcher.model import Finding
from watcher.sinks.http import Sources, make_app
from watcher.sinks.metrics import Metrics, exposition, new_registry
from watcher.sinks.report import finding_json


def _findings() -> list[Finding]:
    found: list[Finding] = []
    for name in ("fight-data", "fight-apply-vs-update-replicas", "hot-loop-timestamp", "fight-cabundle"):
        found += analyse(name)[0]
    return found


class State:
    ready = False
    alive = True


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    findings = _findings()
    registry = new_registry()
    Metrics(registry).read_at_scrape(lambda: {"fightwatch_ready": [((), float(State.ready))]})
    sources = Sources(
        findings=lambda: findings,
        readiness=lambda: {"ready": State.ready, "resources": {"configmaps": {"state": "listing"}}},
        liveness=lambda: {"alive": State.alive},
        metrics=lambda accept: exposition(registry, accept),
    )
    async with TestClient(TestServer(make_app(sources))) as test_client:
        yield test_client


async def _findings_of(client: TestClient[Any, Any], query: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/findings{query}")
    assert response.status == 200
    body = await response.json()
    return list(body["findings"])


async def test_findings_are_served_in_the_replay_json_schema_most_severe_first(client: TestClient[Any, Any]) -> None:
    served = await _findings_of(client, "")
    expected = sorted(_findings(), key=lambda f: (-f.writes_per_minute, -f.handovers, f.object.display()))
    assert served == [finding_json(f) for f in expected]


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("?type=hot_loop", {"reconcile-state"}),
        ("?type=fight&kind=deployment", {"web"}),
        ("?namespace=fight-data", {"service-endpoints"}),
        ("?namespace=fight-data,hot-loop-timestamp", {"service-endpoints", "reconcile-state"}),
        ("?namespace=fight-data&namespace=hot-loop-timestamp", {"service-endpoints", "reconcile-state"}),
        ("?namespace=", {"fightwatch-test-validate"}),  # cluster-scoped objects have no namespace
        ("?state=resolved", set()),
        ("?state=active&kind=ValidatingWebhookConfiguration", {"fightwatch-test-validate"}),
    ],
)
async def test_findings_filters(client: TestClient[Any, Any], query: str, names: set[str]) -> None:
    assert {f["object"]["name"] for f in await _findings_of(client, query)} == names


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "?type=fights",
            "type: unknown value ['fights'] (one of apply_conflict, conflict_storm, fight, hot_loop, noop_writes)",
        ),
        ("?state=open", "state: unknown value ['open']"),
        ("?name=web", "unknown query parameter 'name'"),
    ],
)
async def test_bad_filters_are_a_400_that_says_why(client: TestClient[Any, Any], query: str, message: str) -> None:
    response = await client.get(f"/api/v1/findings{query}")
    assert response.status == 400
    assert message in (await response.json())["error"]


async def test_readyz_healthz_and_metrics(client: TestClient[Any, Any]) -> None:
    State.ready, State.alive = False, True
    response = await client.get("/readyz")
    assert response.status == 503
    assert (await response.json())["resources"]["configmaps"]["state"] == "listing"
    State.ready = True
    assert (await client.get("/readyz")).status == 200
    assert (await client.get("/healthz")).status == 200
    State.alive = False
    assert (await client.get("/healthz")).status == 503
    State.alive = True
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    text = await response.text()
    assert "fightwatch_ready 1.0" in text
    assert "# TYPE fightwatch_events_total counter" in text
    assert "process_cpu_seconds_total" in text
    response = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.content_type == "application/openmetrics-text"
    assert (await response.text()).endswith("# EOF\n")
