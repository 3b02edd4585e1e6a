"""Kubernetes Events: the core v1 path on the real test kube-apiserver, written by `fightwatch run` (a hot loop
and a fight, told and resolved, one Warning Event per finding updated as a series), and the choice of API on a
server without events.k8s.io/v1.

The events.k8s.io/v1 path meets the real server in test_delivery_live.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from harness.control_plane import ControlPlane, free_port
from harness.kube import CONFIGMAPS, Kube, new_api_client
from harness.scenarios import rfc3339_now
from harness.watcher import Watcher
from tests.unit.captures import events as capture_events
from watcher.config import Config, EventsSettings
from watcher.delivery.kube_events import CORE_V1, KubeEventsSink
from watcher.detection.engine import Engine
from watcher.model import FindingChange

NAMESPACE = "e2e-events-v1"
DEADLINE = 90.0


async def _write(kube: Kube, name: str, manager: str, mutate: Callable[[dict[str, Any]], None]) -> None:
    def create() -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}}

    await kube.read_modify_write(CONFIGMAPS.path(NAMESPACE, name), mutate, manager=manager, create=create)


def _annotate(value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("annotations", {})["example.com/last-reconciled"] = value

    return mutate


def _label(value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("labels", {})["tier"] = value

    return mutate


async def _hot_loop(kube: Kube) -> None:
    """A reconciler stamping the time into an annotation 5 times a second for 8 seconds."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for n in range(40):
        await asyncio.sleep(max(0.0, start + n * 0.2 - loop.time()))
        await _write(kube, "hot", "reconciler", _annotate(rfc3339_now()))


async def _fight(kube: Kube) -> None:
    for n in range(8):
        team = ("alpha", "beta")[n % 2]
        await _write(kube, "contested", f"{team}-controller", _label(team))
        await asyncio.sleep(0.5)  # the writers' pace, not a readiness wait


async def _fightwatch_events(kube: Kube) -> list[dict[str, Any]]:
    listing = await kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")
    return [e for e in listing["items"] if (e.get("source") or {}).get("component") == "fightwatch"]


async def test_core_v1_events_tell_a_hot_loop_and_a_fight_once_each_and_their_resolution(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    config = {
        "watch": {"resources": ["configmaps"], "namespaces": [NAMESPACE]},
        "detection": {
            "hot_loop": {"min_writes_per_minute": 10, "min_writes": 10},
            "resolve": {"after": "3s", "flip_periods": 2},
        },
        "delivery": {"events": {"api": "v1", "reporting_instance": "fightwatch-test-0"}, "backoff_initial": "0.1s"},
    }
    async with contextlib.AsyncExitStack() as stack:
        writer_client = await new_api_client(control_plane.kubeconfig)
        stack.push_async_callback(writer_client.close)
        kube = Kube(writer_client)
        await kube.ensure_namespace(NAMESPACE)
        watcher = Watcher(tmp_path, kubeconfig=control_plane.kubeconfig, config=config, record=False)
        await watcher.start()
        stack.push_async_callback(watcher.stop)
        await watcher.wait_ready()
        await asyncio.gather(_hot_loop(kube), _fight(kube))

        async def told_and_resolved() -> list[dict[str, Any]] | None:
            resolved = {f["object"]["name"] for f in await watcher.findings(state="resolved")}
            told = await _fightwatch_events(kube)
            normal = {e["involvedObject"]["name"] for e in told if e["type"] == "Normal"}
            return told if resolved >= {"hot", "contested"} and normal >= {"hot", "contested"} else None

        told = await watcher.poll_async(told_and_resolved, what="both findings told and resolved", deadline=DEADLINE)
        assert await watcher.stop() == 0  # (delivery drained: every change was sent before the counts below)

    for name, reason, writer in (
        ("hot", "ControllerHotLoop", "reconciler"),
        ("contested", "ControllerFight", "beta-controller"),
    ):
        mine = [e for e in told if e["involvedObject"]["name"] == name]
        warnings = [e for e in mine if e["type"] == "Warning"]
        assert [e["reason"] for e in warnings] == [reason]  # one Event per finding, never one per write
        assert [e["reason"] for e in mine if e["type"] == "Normal"] == [f"{reason}Resolved"]
        (warning,) = warnings
        assert writer in warning["message"]
        assert warning["reportingInstance"] == "fightwatch-test-0"
        assert warning["involvedObject"]["uid"]
        updates = sum(1 for e in watcher.log("finding updated") if e["name"] == name)
        assert warning["count"] == 1 + updates  # the series: one occurrence per opened/updated change
    assert not watcher.log("delivery failed")


@contextlib.asynccontextmanager
async def _old_server() -> AsyncIterator[tuple[ApiClient, list[tuple[str, Any]]]]:
    """A loopback HTTP server answering like an API server without events.k8s.io/v1 (Kubernetes < 1.19)."""
    received: list[tuple[str, Any]] = []

    async def no_group(request: web.Request) -> web.Response:
        received.append((request.path, None))
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        received.append((request.path, body))
        return web.json_response(body, status=201)

    app = web.Application()
    app.router.add_get("/apis/events.k8s.io/v1", no_group)
    app.router.add_post("/api/v1/namespaces/{namespace}/events", create)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    configuration = Configuration(host=f"http://127.0.0.1:{port}")
    client = ApiClient(configuration=configuration)
    try:
        yield client, received
    finally:
        await client.close()
        await runner.cleanup()


async def test_auto_falls_back_to_core_v1_events_where_events_k8s_io_v1_is_not_served() -> None:
    engine = Engine(Config().detection)
    changes: list[FindingChange] = []
    for event in capture_events("fight-data", engine.decode):
        changes += engine.process(event)
    async with _old_server() as (client, received):
        sink = KubeEventsSink(client, EventsSettings(api="auto"))
        await sink.send(changes[:1])
        assert await sink.api() == CORE_V1
    assert [path for path, _ in received] == [
        "/apis/events.k8s.io/v1",
        "/api/v1/namespaces/fight-data/events",
    ]
    body = received[1][1]
    assert body["apiVersion"] == "v1"
    assert body["involvedObject"]["name"] == "service-endpoints"
    assert body["reason"] == "ControllerFight"
    assert body["type"] == "Warning"


async def test_a_restarted_watcher_goes_on_with_the_open_event_of_a_fight_it_finds_again(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """Every replica restarted (a rolling upgrade): the new one opens the same fight under another id, since it did not
    see the write that opened it, and goes on with the open Event (its series, then its Resolved Event) instead of
    adding a second; once that Event is closed, a new fight on the object has an Event of its own."""
    namespace = "e2e-events-restart"
    config = {
        "watch": {"resources": ["configmaps"], "namespaces": [namespace]},
        "delivery": {"backoff_initial": "0.1s"},
    }
    async with contextlib.AsyncExitStack() as stack:
        writer_client = await new_api_client(control_plane.kubeconfig)
        stack.push_async_callback(writer_client.close)
        kube = Kube(writer_client)
        await kube.ensure_namespace(namespace)

        async def fight(writes: range) -> None:
            for n in writes:
                team = ("alpha", "beta")[n % 2]

                def create() -> dict[str, Any]:
                    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "contested"}}

                await kube.read_modify_write(
                    CONFIGMAPS.path(namespace, "contested"), _label(team), manager=f"{team}-controller", create=create
                )
                await asyncio.sleep(0.3)  # the writers' pace, not a readiness wait

        async def warnings() -> list[dict[str, Any]]:
            listing = await kube.get(f"/api/v1/namespaces/{namespace}/events")
            return [
                e for e in listing["items"] if e.get("reportingComponent") == "fightwatch" and e["type"] == "Warning"
            ]

        async def run(name: str, writes: range, until: Callable[[], Any], resolve_after: str = "3s") -> Watcher:
            settings = {**config, "detection": {"resolve": {"after": resolve_after, "flip_periods": 2}}}
            watcher = Watcher(tmp_path / name, kubeconfig=control_plane.kubeconfig, config=settings, record=False)
            await watcher.start()
            await watcher.wait_ready()
            await fight(writes)
            await watcher.poll_async(until, what=f"{name}'s Events", deadline=DEADLINE)
            assert await watcher.stop() == 0  # (delivery drained)
            return watcher

        async def told() -> list[dict[str, Any]] | None:
            return await warnings() or None

        first = await run("first", range(6), told, resolve_after="30m")  # (stopped before it could resolve)
        (event,) = await warnings()

        async def closed() -> list[dict[str, Any]] | None:
            listing = await kube.get(f"/api/v1/namespaces/{namespace}/events")
            resolved = [e for e in listing["items"] if e.get("reason") == "ControllerFightResolved"]
            return resolved or None

        second = await run("second", range(6, 14), closed)
        (resolved,) = await closed() or []
        (went_on,) = await warnings()  # the same Event, no second
        assert went_on["metadata"]["name"] == event["metadata"]["name"]
        assert (went_on.get("series") or {}).get("count", 1) > (event.get("series") or {}).get("count", 1)
        assert resolved["metadata"]["name"] == event["metadata"]["name"] + "-resolved"
        ids = {w.log("finding opened")[0]["id"] for w in (first, second)}
        assert len(ids) == 2  # the premise: the restarted watcher knew the fight under another id

        async def two() -> list[dict[str, Any]] | None:
            found = await warnings()
            return found if len(found) == 2 else None

        await run("third", range(14, 22), two)  # a new fight, after the first was closed: an Event of its own
