"""The whole product: a real fight on the real test kube-apiserver, seen by `fightwatch run`, told everywhere, and
resolved everywhere.

`fightwatch run` runs as users run it (a subprocess with a config file, harness/watcher.py), configured to
deliver to Kubernetes Events, two real Alertmanagers (an HA pair, each told directly) and three webhooks: a
healthy one whose URL comes from an environment variable (with headers from a file), a failing one and a
hanging one (URLs from files). A real Prometheus scrapes its `/metrics` and evaluates the repo's rules file.
Two real Update writers flip a label of three ConfigMaps until every outlet shows the fight, as one incident (the
same writers and field on three objects): the watcher's `/api/v1/findings` (three findings, one incident id) and
`/api/v1/incidents`, `/metrics` (clean for `promtool check metrics`), one ControllerFightDetected alert for the
incident (its value 3) pending then firing in Prometheus, one alert for it in each Alertmanager, exactly one Warning
Event on each ConfigMap (read back through the API and through `kubectl describe`), and one "opened" call to the
healthy webhook, while the failing and the hanging webhook are tried and hold none of it back. Then the writers
stop; the fight resolves (resolve.after is a few seconds in this config) and every outlet must show that too.
Everything is polled against deadlines; nothing sleeps in place of a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from harness.control_plane import ControlPlane, free_port
from harness.kube import CONFIGMAPS, Kube, new_api_client
from harness.monitoring import RULES_FILE, Monitor, promtool, start_alertmanager, start_prometheus
from harness.watcher import Watcher
from watcher.metrics.families import FAMILIES

NAMESPACE = "e2e-delivery"
NAME = "settings"
NAMES = (NAME, "settings-b", "settings-c")  # one fight on three objects: one incident
FLIP_PERIOD = 1.0
DETECT_DEADLINE = 150.0  # the rule's `for: 1m` plus detection, scrapes and evaluations
RESOLVE_DEADLINE = 90.0
POLL = 0.5
SECRET_PATH = "/hooks/T0SECRET/B0SECRET"  # noqa: S105 - a fake secret, asserted absent from the logs; stands for the secret part of a chat webhook URL
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Receiver:
    """Loopback HTTP receivers: a healthy webhook, a failing one, a hanging one, and Alertmanager's notifier."""

    port: int = 0
    ok: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    failed: int = 0
    hung: int = 0
    notifications: list[dict[str, Any]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = Receiver()

    async def ok(request: web.Request) -> web.Response:
        rx.ok.append(await request.json())
        rx.headers.append(dict(request.headers))
        return web.Response(status=200, text="ok")

    async def fail(request: web.Request) -> web.Response:
        await request.read()
        rx.failed += 1
        return web.Response(status=503)

    async def hang(request: web.Request) -> web.Response:
        rx.hung += 1
        await rx.release.wait()  # never answers while the test runs
        return web.Response(status=200)

    async def notified(request: web.Request) -> web.Response:
        rx.notifications.append(await request.json())
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post(SECRET_PATH, ok)
    app.router.add_post("/fail", fail)
    app.router.add_post("/hang", hang)
    app.router.add_post("/alertmanager", notified)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    rx.port = free_port()
    await web.TCPSite(runner, "127.0.0.1", rx.port).start()
    try:
        yield rx
    finally:
        rx.release.set()
        await runner.cleanup()


def _config(receiver: Receiver, ams: list[Monitor], tmp_path: Path) -> dict[str, Any]:
    """The watcher's config file: one resource, a short quiet period, every delivery sink; credentials from
    files and the environment only."""
    (tmp_path / "fail-url").write_text(receiver.url("/fail") + "\n")
    (tmp_path / "hang-url").write_text(receiver.url("/hang"))
    (tmp_path / "headers.yaml").write_text("X-Team-Token: t0ps3cret\n")
    return {
        "watch": {"resources": ["configmaps"]},
        "detection": {"resolve": {"after": "3s", "flip_periods": 2}},
        "delivery": {
            "queue_size": 4,
            "timeout": "1s",
            "attempts": 2,
            "backoff_initial": "0.1s",
            "events": {"enabled": True},
            "alertmanager": {"urls": [am.url for am in ams], "resend_interval": "2s"},
            "webhooks": [
                {
                    "name": "chat",
                    "url": {"env": "FIGHTWATCH_TEST_WEBHOOK_URL"},
                    "headers": {"file": str(tmp_path / "headers.yaml")},
                },
                {"name": "failing", "url": {"file": str(tmp_path / "fail-url")}},
                {"name": "hanging", "url": {"file": str(tmp_path / "hang-url")}},
            ],
        },
    }


async def _fight(kube: Kube, stop: asyncio.Event) -> int:
    """team-a-operator and team-b-operator set label owner of every ConfigMap of NAMES back and forth until
    `stop`; return the rounds of writes."""

    def create(name: str) -> Callable[[], dict[str, Any]]:
        return lambda: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}}

    def owner(team: str) -> Callable[[dict[str, Any]], None]:
        def mutate(obj: dict[str, Any]) -> None:
            obj["metadata"].setdefault("labels", {})["owner"] = team

        return mutate

    writes = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not stop.is_set():
        team = ("team-a", "team-b")[writes % 2]
        for name in NAMES:
            path = CONFIGMAPS.path(NAMESPACE, name)
            await kube.read_modify_write(path, owner(team), manager=f"{team}-operator", create=create(name))
        writes += 1
        with contextlib.suppress(TimeoutError):  # the next write on a fixed schedule, or stop
            await asyncio.wait_for(stop.wait(), max(0.0, start + writes * FLIP_PERIOD - loop.time()))
    return writes


@dataclass
class Scene:
    """Everything a step of the test looks at, and what it last saw (for the failure message)."""

    watcher: Watcher
    prometheus: Monitor
    ams: list[Monitor]
    kube: Kube
    receiver: Receiver
    session: aiohttp.ClientSession
    control_plane: ControlPlane
    seen: dict[str, Any] = field(default_factory=dict)
    incident: str = ""  # the fight's incident id, once the watcher found it

    def state(self) -> str:
        return "\n".join(
            [f"{key}: {value}" for key, value in self.seen.items()]
            + [self.watcher.tail()]
            + [f"--- {m.name}:\n{m.log_tail()}" for m in (self.prometheus, *self.ams)]
        )

    async def until(self, what: str, check: Callable[[], Awaitable[bool]], *, deadline: float) -> None:
        give_up = time.monotonic() + deadline
        while True:
            self.prometheus.check_running()
            for am in self.ams:
                am.check_running()
            if await check():
                return
            if time.monotonic() > give_up:
                raise AssertionError(f"not within {deadline:.0f}s: {what}\n{self.state()}")
            await asyncio.sleep(POLL)  # poll interval against the deadline

    async def get_json(self, url: str) -> Any:
        async with self.session.get(url) as response:
            response.raise_for_status()
            return await response.json()

    async def finding(self, state: str) -> dict[str, Any] | None:
        found = await self.watcher.findings(namespace=NAMESPACE, state=state)
        self.seen[f"watcher findings ({state})"] = found
        return next((f for f in found if f["object"]["name"] == NAME), None)

    async def prometheus_alerts(self) -> list[dict[str, Any]]:
        """The alerts about the fight: per incident (the default `delivery.per`), so none names an object."""
        data = await self.get_json(f"{self.prometheus.url}/api/v1/alerts")
        alerts = [a for a in data["data"]["alerts"] if a["labels"].get("incident") == self.incident]
        self.seen["prometheus alerts"] = alerts
        self.seen["prometheus targets"] = (await self.get_json(f"{self.prometheus.url}/api/v1/targets"))["data"]
        return alerts

    async def am_alerts(self, am: Monitor) -> list[dict[str, Any]]:
        alerts = await self.get_json(f"{am.url}/api/v2/alerts")
        return [a for a in alerts if a["labels"].get("incident") == self.incident]

    async def events(self, uid: str) -> list[dict[str, Any]]:
        listing = await self.kube.get(
            f"/api/v1/namespaces/{NAMESPACE}/events", query={"fieldSelector": f"involvedObject.uid={uid}"}
        )
        told = [e for e in listing["items"] if (e.get("reportingComponent") or "") == "fightwatch"]
        self.seen["events"] = [(e["type"], e["reason"], e.get("count")) for e in told]
        return told


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def _value(text: str, name: str, **labels: str) -> float | None:
    return next((v for s, v in _samples(text, name) if s == labels), None)


async def test_a_real_fight_is_told_everywhere_and_resolves_everywhere(
    control_plane: ControlPlane, receiver: Receiver, tmp_path: Path
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        ams = []
        for i in (1, 2):
            am = start_alertmanager(
                tmp_path / f"am{i}", name=f"alertmanager-{i}", webhook_url=receiver.url("/alertmanager")
            )
            stack.callback(am.stop)
            ams.append(am)
        cert, key = control_plane.watcher_serving_pair
        config = _config(receiver, ams, tmp_path) | {"serve": {"tls": {"cert_file": str(cert), "key_file": str(key)}}}
        watcher = Watcher(
            tmp_path / "watcher",
            kubeconfig=control_plane.kubeconfig,
            config=config,
            ca_file=control_plane.ca_file,
            env={"FIGHTWATCH_TEST_WEBHOOK_URL": receiver.url(SECRET_PATH)},  # as from a Secret, in production
            record=False,
        )
        await watcher.start()
        stack.push_async_callback(watcher.stop)
        await watcher.wait_ready()
        (tmp_path / "scrape-token").write_text(watcher.token)  # (HTTPS and a bearer token, as a ServiceMonitor)
        prometheus = start_prometheus(
            tmp_path / "prometheus",
            target=watcher.url,
            rule_files=[RULES_FILE],
            ca_file=control_plane.ca_file,
            bearer_token_file=tmp_path / "scrape-token",
        )
        stack.callback(prometheus.stop)
        writer_client = await new_api_client(control_plane.kubeconfig)
        stack.push_async_callback(writer_client.close)
        kube = Kube(writer_client)
        await kube.ensure_namespace(NAMESPACE)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        scene = Scene(watcher, prometheus, ams, kube, receiver, session, control_plane)
        uid = await _told_everywhere_while_fighting(scene)
        await _resolved_everywhere(scene, uid)
        await _prometheus_scraped_every_name_the_rules_and_dashboards_use(scene)
        assert await watcher.stop() == 0

    # Delivery drained on SIGTERM; no credential in any log line; the hanging webhook's timeouts are logged.
    log = watcher.log()
    assert log[-1]["event"] == "stopped"
    text = watcher.log_path.read_text()
    assert "T0SECRET" not in text
    assert "t0ps3cret" not in text
    assert any(e["event"] == "delivery failed" and e.get("sink") == "webhook:hanging" for e in log)
    assert not [e for e in log if e.get("level") in ("error", "critical") and e["event"] != "finding changes given up"]


async def _told_everywhere_while_fighting(scene: Scene) -> str:
    """The fight goes on until it shows in every outlet; returns the ConfigMap's uid."""
    stop = asyncio.Event()
    fight = asyncio.create_task(_fight(scene.kube, stop))
    try:

        async def detected() -> bool:
            found = scene.seen.get("watcher findings (active)") if await scene.finding("active") else []
            return {f["object"]["name"] for f in found or []} >= set(NAMES)

        await scene.until("fightwatch run finds the fight on every ConfigMap", detected, deadline=60)
        finding = await scene.finding("active")
        assert finding is not None
        assert finding["type"] == "fight"
        assert finding["fields"] == ["metadata.labels.owner"]
        uid = str(finding["object"]["uid"])
        fights = [f for f in scene.seen["watcher findings (active)"] if f["object"]["name"] in NAMES]
        assert len(fights) == len(NAMES)
        assert len({f["incident"] for f in fights}) == 1  # one pattern on three objects: one incident
        scene.incident = finding["incident"]
        status, body = await scene.watcher.get("/api/v1/incidents", incident=scene.incident)
        assert status == 200, body
        [incident] = body["incidents"]
        assert incident["objects"] == len(NAMES)
        assert set(incident["findings"]) == {f["id"] for f in fights}
        assert "fight over metadata.labels.owner on 3 ConfigMaps in e2e-delivery" in incident["summary"]

        async def pending_or_firing() -> bool:
            return bool(await scene.prometheus_alerts())

        async def firing() -> bool:
            return any(a["state"] == "firing" for a in await scene.prometheus_alerts())

        await scene.until("ControllerFightDetected pending in Prometheus", pending_or_firing, deadline=60)
        await _told_directly(scene, uid)  # (the rule's `for: 1m` runs meanwhile)
        await scene.until("ControllerFightDetected firing in Prometheus", firing, deadline=DETECT_DEADLINE)
        [prom_alert] = await scene.prometheus_alerts()  # one alert for the three objects
        assert prom_alert["state"] == "firing"
        assert prom_alert["labels"]["alertname"] == "ControllerFightDetected"
        assert prom_alert["labels"]["per"] == "incident"
        assert "name" not in prom_alert["labels"]
        assert prom_alert["labels"]["writers"] == "team-a-operator(Update),team-b-operator(Update)"
        assert prom_alert["labels"]["fields"] == "metadata.labels.owner"
        assert prom_alert["labels"]["job"] == "fightwatch"
        assert float(prom_alert["value"]) == len(NAMES)
        assert prom_alert["annotations"]["objects"] == "3"
        assert "on 3 objects" in prom_alert["annotations"]["summary"]
        description = prom_alert["annotations"]["description"]
        assert "team-a-operator(Update)" in description
        for name in NAMES:  # (up to 3 examples, from fightwatch_finding_info{incident=...})
            assert f"ConfigMap {NAMESPACE}/{name}" in description
        await _metrics_while_fighting(scene)
        await _every_dashboard_query_returns_data(scene)
    finally:
        stop.set()
        writes = await fight
    assert writes >= 6
    return uid


async def _told_directly(scene: Scene, uid: str) -> None:
    """What fightwatch delivers itself: both Alertmanagers, one Warning Event, the healthy webhook."""
    for am in scene.ams:

        async def in_alertmanager(am: Monitor = am) -> bool:
            return bool(await scene.am_alerts(am))

        await scene.until(f"the alert in {am.name}", in_alertmanager, deadline=30)
        [am_alert] = await scene.am_alerts(am)  # one alert for the incident, whatever its size

        async def grown(am: Monitor = am) -> bool:
            [alert] = await scene.am_alerts(am)
            scene.seen[f"{am.name} alert"] = alert
            return bool(alert["annotations"]["objects"] == "3")

        await scene.until(f"the alert in {am.name} counts the three ConfigMaps", grown, deadline=30)
        [am_alert] = await scene.am_alerts(am)
        assert set(am_alert["labels"]) == {"alertname", "severity", "type", "incident"}
        assert am_alert["labels"]["alertname"] == "ControllerFightDetected"
        assert am_alert["labels"]["severity"] == "warning"
        assert am_alert["labels"]["type"] == "fight"
        assert am_alert["annotations"]["kinds"] == "ConfigMap"
        for name in NAMES:
            assert f"ConfigMap {NAMESPACE}/{name}" in am_alert["annotations"]["examples"]
        assert "team-b-operator" in am_alert["annotations"]["writers"]
        assert am_alert["annotations"]["fields"] == "metadata.labels.owner"
        assert am_alert["annotations"]["hint"]
        assert am_alert["status"]["state"] == "active"

    async def event_written() -> bool:
        return any(e["type"] == "Warning" for e in await scene.events(uid))

    await scene.until("a Warning Event on the ConfigMap", event_written, deadline=30)
    [warning] = [e for e in await scene.events(uid) if e["type"] == "Warning"]
    for name in NAMES:  # one Event per object stays (where `kubectl describe` users look)

        async def warned(name: str = name) -> bool:
            listing = await scene.kube.get(
                f"/api/v1/namespaces/{NAMESPACE}/events", query={"fieldSelector": f"involvedObject.name={name}"}
            )
            found = [
                e for e in listing["items"] if e["type"] == "Warning" and e.get("reportingComponent") == "fightwatch"
            ]
            scene.seen[f"events of {name}"] = [e["message"] for e in found]
            return len(found) == 1

        await scene.until(f"one Warning Event on ConfigMap {name}", warned, deadline=30)
    messages = [m for name in NAMES for m in scene.seen[f"events of {name}"]]
    assert any(f"Incident {scene.incident} on " in m for m in messages)  # (once the incident spans several)
    assert warning["reason"] == "ControllerFight"
    assert "team-a-operator" in warning["message"]
    assert "metadata.labels.owner" in warning["message"]
    assert "Hint:" in warning["message"]
    describe = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={scene.control_plane.kubeconfig}", "-n", NAMESPACE, "describe", "configmap", NAME,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await describe.communicate()
    assert describe.returncode == 0, err.decode()
    assert "ControllerFight" in out.decode()
    assert "Warning" in out.decode()

    async def webhook_told() -> bool:
        return any(p["event"] == "opened" and p["incident"]["id"] == scene.incident for p in scene.receiver.ok)

    await scene.until("the webhook receives the incident", webhook_told, deadline=30)
    [opened] = [p for p in scene.receiver.ok if p["event"] == "opened"]  # one message for the three objects
    assert opened["incident"]["type"] == "fight"
    assert {f["incident"] for f in opened["findings"]} == {scene.incident}
    assert "Controller fight" in opened["text"]
    assert "metadata.labels.owner" in opened["text"]
    assert {f["object"]["name"] for p in scene.receiver.ok for f in p["findings"]} <= set(NAMES)
    assert scene.receiver.headers[0]["X-Team-Token"] == "t0ps3cret"  # headers from the file

    # The failing and the hanging webhook were tried (the hanging one never answered), and held nothing back.
    assert scene.receiver.failed > 0
    assert scene.receiver.hung > 0


async def _metrics_while_fighting(scene: Scene) -> None:
    """A real scrape of the watcher: clean for promtool, the fight and the watch loop as the table names them."""
    scrape = await scene.watcher.scrape()
    check = promtool("check", "metrics", stdin=scrape.encode())
    assert (check.returncode, check.stdout.strip(), check.stderr.strip()) == (0, "", "")  # nothing reported
    [(info, value)] = [s for s in _samples(scrape, "fightwatch_finding_info") if s[0]["name"] == NAME]
    assert value == 1
    assert (info["namespace"], info["kind"], info["type"]) == (NAMESPACE, "ConfigMap", "fight")
    assert info["incident"] == scene.incident
    incident = {"type": "fight", "incident": scene.incident, "shard": "0"}
    assert _value(scrape, "fightwatch_incident_objects", **incident) == len(NAMES)
    assert _value(scrape, "fightwatch_alerting_info", per="incident") == 1
    managers = {s["manager"] for s, _ in _samples(scrape, "fightwatch_writes_total") if s["namespace"] == NAMESPACE}
    assert {"team-a-operator", "team-b-operator"} <= managers
    cm = {"group": "", "resource": "configmaps"}
    assert (_value(scrape, "fightwatch_events_total", **cm, type="MODIFIED") or 0) > 0
    assert _value(scrape, "fightwatch_watches", **cm, state="watching") == 1
    assert _value(scrape, "fightwatch_watch_restarts_total", **cm, reason="initial") == 1
    assert (_value(scrape, "fightwatch_watch_received_bytes_total", **cm) or 0) > 0
    assert _value(scrape, "fightwatch_resources", state="watched") == 1  # watch.resources: [configmaps]
    assert _value(scrape, "fightwatch_ready") == 1
    assert (_value(scrape, "fightwatch_engine_events_total", outcome="write") or 0) > 0
    assert (_value(scrape, "fightwatch_findings_total", type="fight", group="", kind="ConfigMap") or 0) >= 1
    assert (_value(scrape, "fightwatch_tracked_objects") or 0) >= 1
    assert (_value(scrape, "fightwatch_event_processing_duration_seconds_count") or 0) > 0
    assert (_value(scrape, "fightwatch_delivery_sent_total", sink="events") or 0) >= 1
    [(build, _)] = _samples(scrape, "fightwatch_build_info")
    assert build["version"]


async def _resolved_everywhere(scene: Scene, uid: str) -> None:
    async def resolved_in_watcher() -> bool:
        return await scene.finding("resolved") is not None

    await scene.until("the fight resolves in fightwatch run", resolved_in_watcher, deadline=RESOLVE_DEADLINE)

    async def gone_from_prometheus() -> bool:
        return not await scene.prometheus_alerts()

    await scene.until("the alert leaves Prometheus", gone_from_prometheus, deadline=RESOLVE_DEADLINE)

    for am in scene.ams:

        async def resolved_in_alertmanager(am: Monitor = am) -> bool:
            return not await scene.am_alerts(am)

        await scene.until(f"the alert resolves in {am.name}", resolved_in_alertmanager, deadline=30)

    async def alertmanager_notified_resolved() -> bool:
        return any(
            n["status"] == "resolved" and any(a["labels"].get("incident") == scene.incident for a in n["alerts"])
            for n in scene.receiver.notifications
        )

    await scene.until("Alertmanager notifies the resolution", alertmanager_notified_resolved, deadline=30)

    async def resolved_event() -> bool:
        return any(e["type"] == "Normal" for e in await scene.events(uid))

    await scene.until("a Normal Event on the ConfigMap", resolved_event, deadline=30)
    told = await scene.events(uid)
    assert [e["reason"] for e in told if e["type"] == "Warning"] == ["ControllerFight"]  # one per finding
    assert [e["reason"] for e in told if e["type"] == "Normal"] == ["ControllerFightResolved"]

    async def webhook_resolved() -> bool:
        return any(p["event"] == "resolved" for p in scene.receiver.ok)

    await scene.until("the webhook receives the resolution", webhook_resolved, deadline=30)
    [resolved] = [p for p in scene.receiver.ok if p["event"] == "resolved"]  # the incident as a whole, once
    assert resolved["incident"]["id"] == scene.incident
    assert resolved["incident"]["objects"] == len(NAMES)
    scrape = await scene.watcher.scrape()
    assert not _samples(scrape, "fightwatch_finding_info")
    assert _value(scrape, "fightwatch_findings_active", type="fight") == 0
    sent = {s["sink"]: v for s, v in _samples(scrape, "fightwatch_delivery_sent_total")}
    failures = {s["sink"]: v for s, v in _samples(scrape, "fightwatch_delivery_failures_total")}
    assert sent["webhook:chat"] >= 2
    assert sent["events"] >= 2
    assert sent["webhook:failing"] == 0
    assert failures["webhook:failing"] > 0
    assert sent["webhook:hanging"] == 0
    assert failures["webhook:hanging"] > 0


# Panels about error conditions a healthy run does not have: their queries must run, with or without data (they are
# listed as such: the families they read carry data in the RBAC test's scrapes: code="403", state="forbidden").
ERROR_PANELS = {"Watch errors by HTTP code", "Watches not watching"}
# Panels over audit events have data only with the audit webhook, which this scene does not enable: they must run
# here; tests/integration/test_audit_webhook.py runs them against a Prometheus scraping a watcher that receives them.
NEEDS_AUDIT = "Needs the audit webhook"
# Variables over labels the test's series do not carry (a single cluster).
OPTIONAL_VARIABLES = {"cluster"}


def _promql(expr: str) -> str:
    """A dashboard expression as Grafana sends it with every variable at "All"."""
    for variable in ("cluster", "namespace", "kind", "name", "incident"):
        expr = expr.replace(f"${variable}", ".*")
    return expr.replace("$__rate_interval", "1m")


async def _every_dashboard_query_returns_data(scene: Scene) -> None:
    """Every panel query of the shipped dashboards, run against the real Prometheus that scrapes the live watcher
    during the fight, returns data (the error-condition panels listed above run and return none); every variable
    query finds values."""
    url = scene.prometheus.url
    checked = empty = 0
    for path in sorted((REPO / "dashboards").glob("*.json")):
        board = orjson.loads(path.read_bytes())
        for panel in board["panels"]:
            for target in panel["targets"]:
                expr = _promql(target["expr"])

                async def answered(expr: str = expr) -> bool:
                    data = await scene.get_json(f"{url}/api/v1/query?{urlencode({'query': expr})}")
                    assert data["status"] == "success", (expr, data)
                    scene.seen[f"query {expr}"] = data["data"]["result"]
                    return bool(data["data"]["result"])

                title = f"{path.name}: {panel['title']}"
                if panel["title"] in ERROR_PANELS or NEEDS_AUDIT in panel.get("description", ""):
                    await answered()  # it runs (status success is asserted)
                    empty += 1
                else:  # (rates need two scrapes in their window: polled, not assumed)
                    await scene.until(f"data for {title}", answered, deadline=60)
                checked += 1
        for variable in board["templating"]["list"]:
            if variable["type"] != "query" or variable["name"] in OPTIONAL_VARIABLES:
                continue
            found = re.fullmatch(r"label_values\((.+), (\w+)\)", _promql(variable["query"]["query"]))
            assert found, variable["query"]
            selector, label = found.groups()
            query = urlencode({"match[]": selector})
            values = await scene.get_json(f"{url}/api/v1/label/{label}/values?{query}")
            assert values["data"], f"{path.name}: variable {variable['name']}"
    assert checked > 20
    assert empty == len(ERROR_PANELS) + 4  # (and the four audit panels)


async def _prometheus_scraped_every_name_the_rules_and_dashboards_use(scene: Scene) -> None:
    """Prometheus has metadata (from the scrapes of the live watcher) for every fightwatch family the alert rules
    and the dashboards query, and for every family of the table: no name there is one the watcher does not
    expose."""
    data = await scene.get_json(f"{scene.prometheus.url}/api/v1/metadata")
    scraped = set(data["data"])
    exposed = {f.exposed_name for f in FAMILIES} | {
        f"{f.name}_{suffix}" for f in FAMILIES if f.type == "histogram" for suffix in ("bucket", "sum", "count")
    }
    queried = set()
    for path in [RULES_FILE, *sorted((REPO / "dashboards").glob("*.json"))]:
        queried |= set(re.findall(r"\b(fightwatch_[a-z_]+[a-z])\b", path.read_text()))
    assert queried <= exposed
    missing = {f.exposed_name for f in FAMILIES if _metadata_name(f.exposed_name, f.type) not in scraped}
    scene.seen["prometheus metadata"] = sorted(n for n in scraped if n.startswith("fightwatch_"))
    assert missing == set(), scene.state()


def _metadata_name(exposed: str, kind: str) -> str:
    """How Prometheus's metadata API names a family (OpenMetrics scrapes name counters without `_total`)."""
    return exposed.removesuffix("_total") if kind == "counter" else exposed
