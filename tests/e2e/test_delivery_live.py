"""A real fight on the real test kube-apiserver, told everywhere fightwatch tells it, and resolved everywhere.

Two real Update writers flip a ConfigMap label until every outlet shows the fight: the metrics (scraped over
HTTP, clean for `promtool check metrics`), a real Prometheus that scrapes them and fires
ControllerFightDetected from the repo's rules file, two real Alertmanagers (an HA pair, each told directly by
fightwatch), one Warning Event on the ConfigMap (read back through the API and through `kubectl describe`),
and a webhook receiver on loopback. A failing and a hanging webhook are configured at the same time and
must not hold any of that back. Then the writers stop; the fight resolves (resolve.after is a few seconds in
this config) and every outlet must show that too. Everything is polled against deadlines; nothing sleeps
in place of a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from harness.control_plane import ControlPlane, free_port
from harness.kube import CONFIGMAPS, Kube, new_api_client
from harness.monitoring import RULES_FILE, Monitor, promtool, start_alertmanager, start_prometheus
from harness.pipeline import Pipeline, new_metrics, serve_metrics
from kubernetes_asyncio.client import ApiClient
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from watcher.config import parse_config
from watcher.sinks.delivery import Delivery
from watcher.sinks.metrics import Metrics
from watcher.sinks.outlets import build_sinks

NAMESPACE = "e2e-delivery"
NAME = "settings"
FLIP_PERIOD = 1.0
DETECT_DEADLINE = 150.0  # the rule's `for: 1m` plus detection, scrapes and evaluations
RESOLVE_DEADLINE = 90.0
POLL = 0.5
SECRET_PATH = "/hooks/T0SECRET/B0SECRET"  # noqa: S105 - a fake secret, asserted absent from the logs; stands for the secret part of a chat webhook URL


@dataclass
class Receiver:
    """Loopback HTTP receivers: a healthy webhook, a failing one, a hanging one, and Alertmanager's notifier."""

    port: int = 0
    ok: list[dict[str, Any]] = field(default_factory=list)
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


async def _fight(kube: Kube, stop: asyncio.Event) -> int:
    """team-a-operator and team-b-operator set label owner back and forth until `stop`; return the writes."""
    path = CONFIGMAPS.path(NAMESPACE, NAME)

    def create() -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NAMESPACE}}

    def owner(team: str) -> Callable[[dict[str, Any]], None]:
        def mutate(obj: dict[str, Any]) -> None:
            obj["metadata"].setdefault("labels", {})["owner"] = team

        return mutate

    writes = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not stop.is_set():
        team = ("team-a", "team-b")[writes % 2]
        await kube.read_modify_write(path, owner(team), manager=f"{team}-operator", create=create)
        writes += 1
        with contextlib.suppress(TimeoutError):  # the next write on a fixed schedule, or stop
            await asyncio.wait_for(stop.wait(), max(0.0, start + writes * FLIP_PERIOD - loop.time()))
    return writes


async def _until(
    what: str, check: Callable[[], Awaitable[bool]], *, deadline: float, on_fail: Callable[[], str]
) -> None:
    give_up = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > give_up:
            raise AssertionError(f"not within {deadline:.0f}s: {what}\n{on_fail()}")
        await asyncio.sleep(POLL)  # poll interval against the deadline


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        response.raise_for_status()
        return await response.json()


async def _scrape(session: aiohttp.ClientSession, port: int) -> str:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        response.raise_for_status()
        return await response.text()


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


SEEN: dict[str, Any] = {}  # the last answers polled, for the failure message


async def _prometheus_alerts(session: aiohttp.ClientSession, prometheus: Monitor) -> list[dict[str, Any]]:
    data = await _get_json(session, f"{prometheus.url}/api/v1/alerts")
    SEEN["prometheus alerts"] = alerts = [a for a in data["data"]["alerts"] if a["labels"].get("name") == NAME]
    SEEN["prometheus targets"] = (await _get_json(session, f"{prometheus.url}/api/v1/targets"))["data"]
    return alerts


async def _am_alerts(session: aiohttp.ClientSession, am: Monitor) -> list[dict[str, Any]]:
    alerts = await _get_json(session, f"{am.url}/api/v2/alerts")
    return [a for a in alerts if a["labels"].get("name") == NAME and a["labels"].get("namespace") == NAMESPACE]


async def _events(kube: Kube, uid: str) -> list[dict[str, Any]]:
    listing = await kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/events", query={"fieldSelector": f"involvedObject.uid={uid}"}
    )
    return [e for e in listing["items"] if (e.get("reportingComponent") or "") == "fightwatch"]


async def test_a_real_fight_is_told_everywhere_and_resolves_everywhere(
    control_plane: ControlPlane, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Credentials as in production: the healthy webhook's URL from an environment variable, the others' from files.
    monkeypatch.setenv("FIGHTWATCH_TEST_WEBHOOK_URL", receiver.url(SECRET_PATH))
    (tmp_path / "fail-url").write_text(receiver.url("/fail") + "\n")
    (tmp_path / "hang-url").write_text(receiver.url("/hang"))
    (tmp_path / "headers.yaml").write_text("X-Team-Token: t0ps3cret\n")
    async with contextlib.AsyncExitStack() as stack:
        ams = []
        for i in (1, 2):
            am = start_alertmanager(
                tmp_path / f"am{i}", name=f"alertmanager-{i}", webhook_url=receiver.url("/alertmanager")
            )
            stack.callback(am.stop)
            ams.append(am)
        registry, metrics = new_metrics()
        runner, metrics_port = await serve_metrics(registry)
        stack.push_async_callback(runner.cleanup)
        prometheus = start_prometheus(
            tmp_path / "prometheus", scrape_target=f"127.0.0.1:{metrics_port}", rule_files=[RULES_FILE]
        )
        stack.callback(prometheus.stop)
        clients = [await new_api_client(control_plane.kubeconfig) for _ in range(3)]
        for client in clients:
            stack.push_async_callback(client.close)
        api_client, watch_client, writer_client = clients  # the sinks' (Events), the watch's, the fighters'
        session = await stack.enter_async_context(aiohttp.ClientSession())
        await _told_and_resolved(
            control_plane, receiver, tmp_path, ams=ams, prometheus=prometheus, metrics=metrics,
            metrics_port=metrics_port, api_client=api_client, watch_client=watch_client,
            writer_client=writer_client, session=session,
        )  # fmt: skip


async def _told_and_resolved(
    control_plane: ControlPlane,
    receiver: Receiver,
    tmp_path: Path,
    *,
    ams: list[Monitor],
    prometheus: Monitor,
    metrics: Metrics,
    metrics_port: int,
    api_client: ApiClient,
    watch_client: ApiClient,
    writer_client: ApiClient,
    session: aiohttp.ClientSession,
) -> None:
    config = parse_config(
        {
            "detection": {"resolve": {"after": "3s", "flip_periods": 2}},
            "delivery": {
                "queue_size": 4,
                "timeout": "1s",
                "attempts": 2,
                "backoff_initial": "0.1s",
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
        },
        source="test",
    )
    kube = Kube(writer_client)
    await kube.ensure_namespace(NAMESPACE)
    delivery = Delivery(build_sinks(config.delivery, api_client=api_client), config.delivery, metrics=metrics)
    pipeline = Pipeline(watch_client, [CONFIGMAPS], detection=config.detection, metrics=metrics, delivery=delivery)
    stop = asyncio.Event()

    def state() -> str:
        return "\n".join(
            [f"pipeline changes: {[(c.kind.value, c.finding.object.name) for c in pipeline.changes]}"]
            + [f"{key}: {value}" for key, value in SEEN.items()]
            + [f"--- {m.name}:\n{m.log_tail()}" for m in (prometheus, *ams)]
        )

    with capture_logs() as logs:
        await pipeline.start()
        try:
            await _fight_and_resolve(
                control_plane, receiver, kube, pipeline, stop, ams=ams, prometheus=prometheus,
                metrics_port=metrics_port, session=session, state=state,
            )  # fmt: skip
        finally:
            await pipeline.stop()

    # No credential in any log line; the hanging webhook's timeouts are logged.
    text = orjson.dumps(logs, default=str).decode()
    assert "T0SECRET" not in text
    assert "t0ps3cret" not in text
    assert any(entry["event"] == "delivery failed" and entry["sink"] == "webhook:hanging" for entry in logs)
    assert os.environ["FIGHTWATCH_TEST_WEBHOOK_URL"].endswith(SECRET_PATH)


async def _fight_and_resolve(
    control_plane: ControlPlane,
    receiver: Receiver,
    kube: Kube,
    pipeline: Pipeline,
    stop: asyncio.Event,
    *,
    ams: list[Monitor],
    prometheus: Monitor,
    metrics_port: int,
    session: aiohttp.ClientSession,
    state: Callable[[], str],
) -> None:
    fight = asyncio.create_task(_fight(kube, stop))
    try:
        # ------------------------------------------------------------------------------ told everywhere
        async def detected() -> bool:
            pipeline.check()
            return any(c.finding.object.name == NAME for c in pipeline.changes)

        await _until("the engine detects the fight", detected, deadline=60, on_fail=state)
        uid = next(c.finding.object.uid for c in pipeline.changes if c.finding.object.name == NAME)

        async def firing_in_prometheus() -> bool:
            pipeline.check()
            return any(a["state"] == "firing" for a in await _prometheus_alerts(session, prometheus))

        async def pending_or_firing() -> bool:
            return bool(await _prometheus_alerts(session, prometheus))

        await _until("ControllerFightDetected pending in Prometheus", pending_or_firing, deadline=60, on_fail=state)
        await _until(
            "ControllerFightDetected firing in Prometheus",
            firing_in_prometheus,
            deadline=DETECT_DEADLINE,
            on_fail=state,
        )
        [prom_alert] = [a for a in await _prometheus_alerts(session, prometheus) if a["state"] == "firing"]
        assert prom_alert["labels"]["alertname"] == "ControllerFightDetected"
        assert prom_alert["labels"]["writers"] == "team-a-operator(Update),team-b-operator(Update)"
        assert prom_alert["labels"]["fields"] == "metadata.labels.owner"
        assert "team-a-operator(Update)" in prom_alert["annotations"]["description"]

        for am in ams:

            async def in_alertmanager(am: Monitor = am) -> bool:
                return bool(await _am_alerts(session, am))

            await _until(f"the alert in {am.name}", in_alertmanager, deadline=30, on_fail=state)
            [am_alert] = await _am_alerts(session, am)
            assert am_alert["labels"]["alertname"] == "ControllerFightDetected"
            assert am_alert["labels"]["severity"] == "warning"
            assert am_alert["labels"]["kind"] == "ConfigMap"
            assert am_alert["labels"]["type"] == "fight"
            assert "team-b-operator" in am_alert["annotations"]["writers"]
            assert am_alert["annotations"]["fields"] == "metadata.labels.owner"
            assert am_alert["annotations"]["hint"]
            assert am_alert["status"]["state"] == "active"

        async def event_written() -> bool:
            return any(e["type"] == "Warning" for e in await _events(kube, uid))

        await _until("a Warning Event on the ConfigMap", event_written, deadline=30, on_fail=state)
        [warning] = [e for e in await _events(kube, uid) if e["type"] == "Warning"]
        assert warning["reason"] == "ControllerFight"
        assert "team-a-operator" in warning["message"]
        assert "metadata.labels.owner" in warning["message"]
        assert "Hint:" in warning["message"]
        describe = await asyncio.create_subprocess_exec(
            "kubectl", f"--kubeconfig={control_plane.kubeconfig}", "-n", NAMESPACE, "describe", "configmap", NAME,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await describe.communicate()
        assert describe.returncode == 0, err.decode()
        assert "ControllerFight" in out.decode()
        assert "Warning" in out.decode()

        async def webhook_told() -> bool:
            return any(p["event"] == "opened" and p["finding"]["object"]["name"] == NAME for p in receiver.ok)

        await _until("the webhook receives the fight", webhook_told, deadline=30, on_fail=state)
        opened = next(p for p in receiver.ok if p["event"] == "opened")
        assert opened["finding"]["type"] == "fight"
        assert "Controller fight" in opened["text"]
        assert "metadata.labels.owner" in opened["text"]

        scrape = await _scrape(session, metrics_port)
        check = promtool("check", "metrics", stdin=scrape.encode())
        assert (check.returncode, check.stdout.strip(), check.stderr.strip()) == (0, "", "")  # nothing reported
        [(info, value)] = [s for s in _samples(scrape, "fightwatch_finding_info") if s[0]["name"] == NAME]
        assert value == 1
        assert info["namespace"] == NAMESPACE
        assert info["kind"] == "ConfigMap"
        managers = {
            s[0]["manager"] for s in _samples(scrape, "fightwatch_writes_total") if s[0]["namespace"] == NAMESPACE
        }
        assert {"team-a-operator", "team-b-operator"} <= managers
        events = {
            s[0]["type"]: s[1] for s in _samples(scrape, "fightwatch_events_total") if s[0]["resource"] == "configmaps"
        }
        assert events["MODIFIED"] > 0

        # The failing and the hanging webhook were tried, and held nothing above back.
        assert receiver.failed > 0
        assert receiver.hung > 0
    finally:
        stop.set()
        writes = await fight
    assert writes >= 6

    # -------------------------------------------------------------------------------- resolved everywhere
    async def resolved_in_engine() -> bool:
        pipeline.check()
        return any(c.kind.value == "resolved" and c.finding.object.name == NAME for c in pipeline.changes)

    await _until("the fight resolves", resolved_in_engine, deadline=RESOLVE_DEADLINE, on_fail=state)

    async def gone_from_prometheus() -> bool:
        return not await _prometheus_alerts(session, prometheus)

    await _until("the alert leaves Prometheus", gone_from_prometheus, deadline=RESOLVE_DEADLINE, on_fail=state)

    for am in ams:

        async def resolved_in_alertmanager(am: Monitor = am) -> bool:
            return not await _am_alerts(session, am)

        await _until(f"the alert resolves in {am.name}", resolved_in_alertmanager, deadline=30, on_fail=state)

    async def alertmanager_notified_resolved() -> bool:
        return any(
            n["status"] == "resolved" and any(a["labels"].get("name") == NAME for a in n["alerts"])
            for n in receiver.notifications
        )

    await _until("Alertmanager notifies the resolution", alertmanager_notified_resolved, deadline=30, on_fail=state)

    async def resolved_event() -> bool:
        return any(e["type"] == "Normal" for e in await _events(kube, uid))

    await _until("a Normal Event on the ConfigMap", resolved_event, deadline=30, on_fail=state)
    told = await _events(kube, uid)
    assert [e["reason"] for e in told if e["type"] == "Warning"] == ["ControllerFight"]  # one per finding
    assert [e["reason"] for e in told if e["type"] == "Normal"] == ["ControllerFightResolved"]

    async def webhook_resolved() -> bool:
        return any(p["event"] == "resolved" for p in receiver.ok)

    await _until("the webhook receives the resolution", webhook_resolved, deadline=30, on_fail=state)
    scrape = await _scrape(session, metrics_port)
    assert not _samples(scrape, "fightwatch_finding_info")
    assert {s[0]["type"]: s[1] for s in _samples(scrape, "fightwatch_findings_active")}["fight"] == 0
    sent = {s[0]["sink"]: s[1] for s in _samples(scrape, "fightwatch_delivery_sent_total")}
    failures = {s[0]["sink"]: s[1] for s in _samples(scrape, "fightwatch_delivery_failures_total")}
    assert sent["webhook:chat"] >= 2
    assert sent["events"] >= 2
    assert sent["webhook:failing"] == 0
    assert failures["webhook:failing"] > 0
    assert sent["webhook:hanging"] == 0
    assert failures["webhook:hanging"] > 0
