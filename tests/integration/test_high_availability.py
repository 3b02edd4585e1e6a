"""Two `fightwatch run` replicas with leader election on a Lease of the real kube-apiserver.

Both watch and find the same fights under the same finding ids; only the leader writes Events. A leader killed
with SIGKILL is replaced by the standby once its Lease expires, and the standby goes on with the same Event's
series (no second Event for the same fight) and tells a fight that began while nobody led. A leader stopped with
SIGTERM releases its Lease after its delivery drained, so the standby takes over at once, not a Lease duration
later. Waits poll against deadlines; nothing here asserts how fast anything is (the load test measures that).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, LEASES, ApiError, Kube
from harness.watcher import Watcher

NAMESPACE = "ha"
EVENTS = f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events"
DEADLINE = 120.0


def _config(lease: str, **timings: str) -> dict[str, Any]:
    return {
        "watch": {"resources": ["configmaps"], "namespaces": [NAMESPACE]},
        "leader_election": {"enabled": True, "lease_name": lease, "lease_namespace": "default", **timings},
        "detection": {"resolve": {"after": "30m"}},  # nothing resolves while the test runs
        "delivery": {"backoff_initial": "0.1s"},
    }


@pytest.fixture
async def replicas(control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Any]:
    """`await replicas(config)` starts two replicas (pods fw-a and fw-b) and waits until both are ready; what is
    still running at the end is killed."""
    started: list[Watcher] = []

    async def start(config: dict[str, Any]) -> tuple[Watcher, Watcher]:
        for name in ("fw-a", "fw-b"):
            watcher = Watcher(
                tmp_path, kubeconfig=control_plane.kubeconfig, config=config, name=name, env={"POD_NAME": name}
            )
            await watcher.start()
            started.append(watcher)
        for watcher in started:
            await watcher.wait_ready()
        return started[0], started[1]

    yield start
    for watcher in started:
        await watcher.stop(signal.SIGKILL)


async def _leading(watcher: Watcher) -> bool:
    return await watcher.metric("fightwatch_leader") == 1.0


async def _leader_and_standby(a: Watcher, b: Watcher) -> tuple[Watcher, Watcher]:
    async def one_leads() -> tuple[Watcher, Watcher] | None:
        first, second = await _leading(a), await _leading(b)
        if first != second:
            return (a, b) if first else (b, a)
        return None

    pair: tuple[Watcher, Watcher] = await a.poll_async(one_leads, what="exactly one replica leading", deadline=DEADLINE)
    return pair


async def _flip(kube: Kube, name: str, writes: range) -> None:
    """Two operators taking the `owner` label of a ConfigMap from each other, one write every 0.3 s."""
    # (with data: an object created empty may have no managedFields entry at all, as v1.20 left it even after later
    # writes)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"a": "1"},
    }
    await kube.ensure(CONFIGMAPS.path(NAMESPACE), body, manager="setup")
    for n in writes:
        team = ("alpha", "beta")[n % 2]
        patch = {"metadata": {"labels": {"owner": team}}}
        await kube.merge_patch(CONFIGMAPS.path(NAMESPACE, name), patch, manager=f"{team}-operator")
        await asyncio.sleep(0.3)  # the writers' pace, not a readiness wait


async def _warnings(kube: Kube, name: str) -> list[dict[str, Any]]:
    """fightwatch's Warning Events about the ConfigMap `name`."""
    listing = await kube.get(EVENTS)
    return [
        e
        for e in listing["items"]
        if e.get("reportingController") == "fightwatch" and e["regarding"]["name"] == name and e["type"] == "Warning"
    ]


def _count(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count") or 1)


async def test_only_the_leader_tells_and_a_killed_leader_s_standby_goes_on_without_a_second_event(
    replicas: Any, kube: Kube
) -> None:
    await kube.ensure_namespace(NAMESPACE)
    a, b = await replicas(_config("fw-failover", lease_duration="5s", renew_deadline="3s", retry_period="1s"))
    leader, standby = await _leader_and_standby(a, b)

    await _flip(kube, "contested", range(6))
    found = await leader.wait_for_finding(lambda f: f["object"]["name"] == "contested", deadline=DEADLINE)
    mirrored = await standby.wait_for_finding(lambda f: f["object"]["name"] == "contested", deadline=DEADLINE)
    assert mirrored["id"] == found["id"]  # replica-independent ids: both would name the same Event

    async def told() -> dict[str, Any] | None:
        warnings = await _warnings(kube, "contested")
        return warnings[0] if warnings else None

    event = await leader.poll_async(told, what="the fight's Event", deadline=DEADLINE)
    assert event["metadata"]["name"] == f"contested.{found['id']}"
    assert event["reportingInstance"] == leader.env["POD_NAME"]
    assert "alpha-operator" in event["note"]
    assert "beta-operator" in event["note"]
    assert await standby.metric("fightwatch_delivery_sent_total", sink="events") == 0  # the standby tells nothing
    told_before = _count(event)

    await leader.stop(signal.SIGKILL)
    await _flip(kube, "while-nobody-leads", range(6))  # found by the standby, before or after it takes over
    await standby.poll_async(_truthy(lambda: _leading(standby)), what="the standby leading", deadline=DEADLINE)
    assert standby.log("leading")

    await _flip(kube, "contested", range(6, 20))  # the fight goes on: 8 and then 16 handovers are updates

    async def series_went_on() -> list[dict[str, Any]] | None:
        warnings = await _warnings(kube, "contested")
        return warnings if warnings and _count(warnings[0]) > told_before else None

    warnings = await standby.poll_async(series_went_on, what="the new leader updating the Event", deadline=DEADLINE)
    assert [w["metadata"]["name"] for w in warnings] == [event["metadata"]["name"]]  # the same Event, no second
    assert warnings[0]["reportingInstance"] == leader.env["POD_NAME"]  # (a series keeps its first reporter)

    newcomer = await standby.poll_async(
        _truthy(lambda: _warnings(kube, "while-nobody-leads")),
        what="the fight begun while nobody led",
        deadline=DEADLINE,
    )
    assert len(newcomer) == 1
    assert newcomer[0]["reportingInstance"] == standby.env["POD_NAME"]
    assert await standby.metric("fightwatch_leader_changes_total", change="acquired") == 1.0


async def test_a_stopped_leader_releases_its_lease_and_the_standby_takes_over_at_once(
    replicas: Any, kube: Kube
) -> None:
    """A 60 s Lease: a standby that leads within the 30 s the test waits did not wait for it to expire."""
    a, b = await replicas(_config("fw-release", lease_duration="60s", renew_deadline="40s", retry_period="1s"))
    leader, standby = await _leader_and_standby(a, b)
    assert await leader.stop(signal.SIGTERM) == 0
    released = leader.log("lease released")
    assert released
    assert leader.log()[-1]["event"] == "stopped"  # released after delivery drained, then the last line
    await standby.poll_async(_truthy(lambda: _leading(standby)), what="the standby leading", deadline=30.0)
    try:
        lease = await kube.get(LEASES.path("default", "fw-release"))
    except ApiError as exc:  # pragma: no cover - the Lease exists while a replica runs
        pytest.fail(str(exc))
    assert lease["spec"]["holderIdentity"].startswith("fw-")
    assert lease["spec"]["holderIdentity"] == standby.log("started")[0]["identity"]
    assert lease["spec"]["leaseTransitions"] >= 1


def _truthy(check: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[object | None]]:
    """A poll check that answers None until `check()` (a coroutine function) gives something truthy."""

    async def wrapped() -> object | None:
        result = await check()
        return result or None

    return wrapped
