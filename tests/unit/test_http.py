"""The HTTP endpoints on findings of recorded captures: filters, status codes, the replay JSON schema, and who sees
what (the guard's answers are a table here; tests/integration/test_secure_serving.py asks a real API server)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.unit.captures import analyse
from watcher.detection.incidents import group
from watcher.detection.join import guessed_resource
from watcher.metrics.exporter import Metrics, exposition, new_registry
from watcher.model import Finding
from watcher.rendering.output import finding_json
from watcher.serving.access import AccessUnavailableError, Caller, Resource
from watcher.serving.endpoints import ServedRequests, StateReaders, make_app
from watcher.serving.guard import bearer_token


def _findings() -> list[Finding]:
    found: list[Finding] = []
    for name in ("fight-data", "fight-apply-vs-update-replicas", "hot-loop-timestamp", "fight-cabundle"):
        found += analyse(name)[0]
    return found


class State:
    ready = False
    alive = True


ADMIN = Caller("admin", groups=("system:authenticated",))
TENANT = Caller("tenant", groups=("system:authenticated",))
READER = Caller("cluster-reader", groups=("system:authenticated",))
NOBODY = Caller("nobody", groups=("system:authenticated",))


class TableGuard:
    """Tokens and permissions from a table: `allowed_to` holds (user, Resource) pairs; "admin" may do anything."""

    secure = True

    def __init__(self) -> None:
        self.tokens = {"admin-token": ADMIN, "tenant-token": TENANT, "reader-token": READER, "nobody-token": NOBODY}
        self.allowed_to = {
            ("tenant", Resource("list", resource="configmaps", namespace="fight-data")),
            ("tenant", Resource("list", resource="deployments", group="apps", namespace="hot-loop-timestamp")),
            ("tenant", Resource("list", resource="configmaps", namespace="hot-loop-timestamp")),
            ("cluster-reader", Resource("list", resource="configmaps")),
            ("cluster-reader", Resource("list", resource="deployments", group="apps")),
        }
        self.asked: list[tuple[str, Resource]] = []
        self.down = False

    async def caller(self, request: Any) -> Caller | None:
        if self.down:
            raise AccessUnavailableError("the API server could not review the request: ClientConnectorError")
        return self.tokens.get(bearer_token(request))

    async def allowed(self, caller: Caller, want: Resource) -> bool:
        self.asked.append((caller.user, want))
        return caller.user == "admin" or (caller.user, want) in self.allowed_to


def as_user(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ADMIN_HEADERS = as_user("admin-token")


@pytest.fixture
def guard() -> TableGuard:
    return TableGuard()


@pytest.fixture
def served() -> ServedRequests:
    return ServedRequests()


@pytest.fixture
async def client(guard: TableGuard, served: ServedRequests) -> AsyncIterator[TestClient[Any, Any]]:
    findings = _findings()
    registry = new_registry()
    Metrics(registry).read_at_scrape(lambda: {"fightwatch_ready": [((), float(State.ready))]})
    sources = StateReaders(
        findings=lambda: findings,
        readiness=lambda: {"ready": State.ready, "resources": {"configmaps": {"state": "listing"}}},
        liveness=lambda: {"alive": State.alive, "last_tick_seconds_ago": 0.5},
        metrics=lambda accept: exposition(registry, accept),
        resource=guessed_resource,
    )
    async with TestClient(TestServer(make_app(sources, guard, served)), headers=ADMIN_HEADERS) as test_client:
        yield test_client


async def _findings_of(
    client: TestClient[Any, Any], query: str, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/findings{query}", headers=headers)
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


async def test_no_credential_or_an_unknown_token_is_a_401(client: TestClient[Any, Any]) -> None:
    for path in ("/metrics", "/api/v1/findings"):
        for headers in ({"Authorization": ""}, as_user("not-a-token"), {"Authorization": "Basic YWRtaW46YWRtaW4="}):
            response = await client.get(path, headers=headers)
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == 'Bearer realm="fightwatch"'
            assert "bearer token" in (await response.json())["error"]


async def test_metrics_need_get_on_the_path(client: TestClient[Any, Any], guard: TableGuard) -> None:
    response = await client.get("/metrics", headers=as_user("tenant-token"))
    assert response.status == 403
    assert (await response.json())["error"] == 'Forbidden: User "tenant" cannot get path "/metrics"'
    guard.allowed_to.add(("tenant", Resource("get", path="/metrics")))
    assert (await client.get("/metrics", headers=as_user("tenant-token"))).status == 200


async def test_a_caller_sees_the_findings_about_objects_it_may_list(
    client: TestClient[Any, Any], guard: TableGuard
) -> None:
    everything = {(f["object"]["namespace"], f["object"]["name"]) for f in await _findings_of(client, "")}
    assert len(everything) == 4
    tenant = {
        (f["object"]["namespace"], f["object"]["name"]) for f in await _findings_of(client, "", as_user("tenant-token"))
    }
    # configmaps in fight-data and hot-loop-timestamp; not the deployment, nor the cluster-scoped webhook
    assert tenant == {("fight-data", "service-endpoints"), ("hot-loop-timestamp", "reconcile-state")}
    assert await _findings_of(client, "", as_user("nobody-token")) == []
    reader = {f["object"]["name"] for f in await _findings_of(client, "", as_user("reader-token"))}
    assert reader == {"service-endpoints", "reconcile-state", "web"}  # configmaps and deployments everywhere
    # a cluster-wide reader is asked once per resource, never per namespace
    asked = [w for user, w in guard.asked if user == "cluster-reader" and w.group != "fightwatch.io"]
    assert sorted((w.resource, w.namespace) for w in asked) == [
        ("configmaps", ""),
        ("deployments", ""),
        ("validatingwebhookconfigurations", ""),
    ]


async def test_filters_apply_before_access_is_reviewed(client: TestClient[Any, Any], guard: TableGuard) -> None:
    found = await _findings_of(client, "?namespace=fight-data", as_user("tenant-token"))
    assert [f["object"]["name"] for f in found] == ["service-endpoints"]
    reviewed = {w.namespace for user, w in guard.asked if user == "tenant" and w.group != "fightwatch.io"}
    assert reviewed == {"", "fight-data"}


async def test_the_api_server_unable_to_review_is_a_503(client: TestClient[Any, Any], guard: TableGuard) -> None:
    guard.down = True
    for path in ("/metrics", "/api/v1/findings"):
        response = await client.get(path)
        assert response.status == 503
        assert response.headers["Retry-After"] == "5"
    # the probes stay open, without their report
    State.ready = True
    response = await client.get("/readyz")
    assert (response.status, await response.json()) == (200, {"ready": True})


async def test_probes_are_open_and_their_report_is_for_callers_allowed_the_path(client: TestClient[Any, Any]) -> None:
    State.ready, State.alive = True, True
    for headers in ({"Authorization": ""}, as_user("tenant-token"), as_user("not-a-token")):
        assert await (await client.get("/readyz", headers=headers)).json() == {"ready": True}
        assert await (await client.get("/healthz", headers=headers)).json() == {"alive": True}
    assert "resources" in await (await client.get("/readyz")).json()
    assert "last_tick_seconds_ago" in await (await client.get("/healthz")).json()


async def test_requests_are_counted_by_endpoint_and_code(client: TestClient[Any, Any], served: ServedRequests) -> None:
    await client.get("/metrics", headers={"Authorization": ""})
    await client.get("/metrics", headers=as_user("tenant-token"))
    await client.get("/api/v1/findings")
    await client.get("/nothing-here")
    assert served.counts == {
        ("/metrics", "401"): 1,
        ("/metrics", "403"): 1,
        ("/api/v1/findings", "200"): 1,
        ("other", "404"): 1,
    }


async def test_list_on_the_findings_of_fightwatch_io_grants_every_finding(
    client: TestClient[Any, Any], guard: TableGuard
) -> None:
    assert await _findings_of(client, "", as_user("nobody-token")) == []
    guard.allowed_to.add(("nobody", Resource("list", resource="findings", group="fightwatch.io")))
    guard.asked.clear()
    assert len(await _findings_of(client, "", as_user("nobody-token"))) == 4
    assert [w.resource for _, w in guard.asked] == ["findings"]  # (nothing else asked)


def _cards(html: str) -> set[tuple[str, str]]:
    """The findings a page shows, by (namespace, object name): from the ids of its cards."""
    by_id = {f.id: (f.object.namespace or "", f.object.name) for f in _findings()}
    return {by_id[i] for i in re.findall(r'<article[^>]* id="finding-([0-9a-f]+)"', html)}


async def test_the_page_shows_a_caller_what_the_findings_api_gives_it(client: TestClient[Any, Any]) -> None:
    for token, expected in (
        ("admin-token", 4),
        ("tenant-token", {("fight-data", "service-endpoints"), ("hot-loop-timestamp", "reconcile-state")}),
        ("nobody-token", set()),
    ):
        for query in ("", "?fragment=1"):
            response = await client.get(f"/findings{query}", headers=as_user(token))
            assert response.status == 200
            assert response.content_type == "text/html"
            shown = _cards(await response.text())
            assert (len(shown) if isinstance(expected, int) else shown) == expected, (token, query)
    response = await client.get("/findings?namespace=fight-data&fragment=1", headers=as_user("tenant-token"))
    assert _cards(await response.text()) == {("fight-data", "service-endpoints")}  # the API's filters apply


async def test_without_credentials_the_page_has_no_findings_and_its_part_is_a_401(
    client: TestClient[Any, Any],
) -> None:
    for headers in ({"Authorization": ""}, as_user("not-a-token")):
        response = await client.get("/findings", headers=headers)
        assert response.status == 200
        assert _cards(await response.text()) == set()
        response = await client.get("/findings?fragment=1", headers=headers)
        assert response.status == 401
    assert (await client.get("/findings?fragment=1&colour=red")).status == 400
    response = await client.get("/", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (302, "/findings")


async def test_the_page_admits_only_its_own_script_and_style(client: TestClient[Any, Any]) -> None:
    response = await client.get("/findings")
    policy = response.headers["Content-Security-Policy"]
    html = await response.text()
    nonces = set(re.findall(r'<(?:script|style)[^>]* nonce="([^"]+)"', html))
    assert len(nonces) == 1
    (nonce,) = nonces
    assert f"script-src 'nonce-{nonce}'" in policy
    assert "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert (response.headers["Cache-Control"], response.headers["X-Content-Type-Options"]) == ("no-store", "nosniff")
    again = await client.get("/findings")
    assert again.headers["Content-Security-Policy"] != policy  # a nonce per response


async def test_the_page_needs_the_api_server_only_for_its_findings(
    client: TestClient[Any, Any], guard: TableGuard
) -> None:
    guard.down = True
    response = await client.get("/findings")
    assert response.status == 200  # the page, whose script asks again
    assert _cards(await response.text()) == set()
    assert (await client.get("/findings?fragment=1")).status == 503


async def test_incidents_are_made_of_the_findings_a_caller_may_see(client: TestClient[Any, Any]) -> None:
    response = await client.get("/api/v1/incidents")
    assert response.status == 200
    everything = (await response.json())["incidents"]
    assert [i["id"] for i in everything] == [i.id for i in group(_findings())]
    response = await client.get("/api/v1/incidents", headers=as_user("tenant-token"))
    seen = (await response.json())["incidents"]
    assert {n for i in seen for n in i["namespaces"]} == {"fight-data", "hot-loop-timestamp"}
    assert sum(i["objects"] for i in seen) == 2
    assert (await client.get("/api/v1/incidents", headers=as_user("nobody-token"))).status == 200
    assert (await client.get("/api/v1/incidents", headers={"Authorization": ""})).status == 401
    assert (await client.get("/api/v1/incidents?colour=red")).status == 400


async def test_the_incident_filter_gives_one_incidents_findings_of_those_a_caller_may_see(
    client: TestClient[Any, Any],
) -> None:
    incidents = group(_findings())
    chosen = incidents[0]
    served = await _findings_of(client, f"?incident={chosen.id}")
    assert {f["id"] for f in served} == set(chosen.findings)
    assert {f["incident"] for f in served} == {chosen.id}
    both = await _findings_of(client, f"?incident={chosen.id},{incidents[1].id}")
    assert {f["id"] for f in both} == set(chosen.findings) | set(incidents[1].findings)
    (one,) = (await (await client.get(f"/api/v1/incidents?incident={chosen.id}")).json())["incidents"]
    assert one["id"] == chosen.id
    # a caller who may not read its objects sees none of it
    assert await _findings_of(client, f"?incident={chosen.id}", headers=as_user("nobody-token")) == []
    response = await client.get("/api/v1/findings?incident=../../etc")
    assert response.status == 400
    assert "not an incident id" in (await response.json())["error"]
