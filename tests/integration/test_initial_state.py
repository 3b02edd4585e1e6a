"""The watcher reads each resource's current objects as the start of its watch (WatchList) where the API server allows
it, and lists them in pages where it does not: the same objects, tracked and ready, either way.

Two control planes of the current release, each with an audit log of every request: one as released (WatchList
on), one started with `--feature-gates=WatchList=false`, which refuses `sendInitialEvents` (as releases before 1.27
do, and 1.27 to 1.31 and 1.33 with their default gates). The audit log tells how the watcher read them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, Kube, new_api_client
from harness.watcher import Watcher
from tests.control_planes import running_control_plane

pytestmark = pytest.mark.integration

POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}
NAMESPACE = "initial-state"
OBJECTS = 1_200  # more than two list pages of 500
USER_AGENT = "fightwatch/"


def _plane(tmp_path_factory: pytest.TempPathFactory, name: str, *flags: str) -> Iterator[ControlPlane]:
    yield from running_control_plane(tmp_path_factory, name, audit_policy=POLICY, apiserver_flags=flags)


@pytest.fixture(scope="module")
def streaming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from _plane(tmp_path_factory, "watch-list-on")


@pytest.fixture(scope="module")
def listing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from _plane(tmp_path_factory, "watch-list-off", "--feature-gates=WatchList=false")


async def _fill(cp: ControlPlane) -> None:
    client = await new_api_client(cp.kubeconfig)
    try:
        kube = Kube(client)
        await kube.ensure_namespace(NAMESPACE)
        for start in range(0, OBJECTS, 100):
            await asyncio.gather(
                *(
                    kube.request(
                        "POST",
                        CONFIGMAPS.path(NAMESPACE),
                        query={"fieldManager": "filler"},
                        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{n:04d}"}},
                    )
                    for n in range(start, min(start + 100, OBJECTS))
                )
            )
    finally:
        await client.close()


def _requests(cp: ControlPlane) -> list[dict[str, Any]]:
    """The watcher's requests for configmaps, as the audit log has them (one entry each, at ResponseComplete or,
    for a watch still open, ResponseStarted), in order."""
    assert cp.audit_log is not None
    found: dict[str, dict[str, Any]] = {}
    for line in cp.audit_log.read_bytes().splitlines():
        event = orjson.loads(line)
        ref = event.get("objectRef") or {}
        if str(event.get("userAgent", "")).startswith(USER_AGENT) and ref.get("resource") == "configmaps":
            found.setdefault(event["auditID"], event)
            if event["stage"] == "ResponseComplete":
                found[event["auditID"]] = event
    return list(found.values())


def _query(event: dict[str, Any]) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(event["requestURI"]).query).items()}


async def _ready_with_every_object(cp: ControlPlane, tmp_path: Path) -> Watcher:
    watcher = Watcher(tmp_path, kubeconfig=cp.kubeconfig)
    await watcher.start()
    await watcher.wait_ready()
    objects = await watcher.metric("fightwatch_watch_objects", group="", resource="configmaps")
    assert objects is not None
    assert objects >= OBJECTS  # (and each namespace's kube-root-ca.crt, where a controller manager makes them)
    lists = await watcher.metric("fightwatch_watch_lists_total", group="", resource="configmaps")
    assert lists == 1
    added = await watcher.metric("fightwatch_events_total", group="", resource="configmaps", type="ADDED")
    assert added == objects
    return watcher


async def test_the_current_objects_stream_as_the_start_of_the_watch(streaming: ControlPlane, tmp_path: Path) -> None:
    await _fill(streaming)
    watcher = await _ready_with_every_object(streaming, tmp_path)
    try:
        requests = _requests(streaming)
        assert [e["verb"] for e in requests] == ["watch"]  # no list: the watch began with the objects
        query = _query(requests[0])
        assert (query.get("sendInitialEvents"), query.get("resourceVersionMatch")) == ("true", "NotOlderThan")
        assert "resourceVersion" not in query  # (a consistent read: the objects as of the request)
        assert watcher.log("listing instead of streaming the initial state") == []
    finally:
        assert await watcher.stop() == 0


async def test_a_server_without_watch_list_is_listed_in_pages(listing: ControlPlane, tmp_path: Path) -> None:
    await _fill(listing)
    watcher = await _ready_with_every_object(listing, tmp_path)
    try:
        requests = _requests(listing)
        refused, *rest = requests
        assert (refused["verb"], refused["responseStatus"]["code"]) == ("watch", 422)
        assert _query(refused).get("sendInitialEvents") == "true"
        pages = [e for e in rest if e["verb"] == "list"]
        assert len(pages) == 3  # 1,200 objects and more, 500 a page
        assert all(_query(e)["limit"] == "500" for e in pages)
        (watch,) = [e for e in rest if e["verb"] == "watch"]
        assert "sendInitialEvents" not in _query(watch)
        assert _query(watch)["resourceVersion"]  # from the list's
        # Refused once for the whole server: every other resource was listed without asking again.
        (told,) = watcher.log("listing instead of streaming the initial state")
        assert told["level"] == "info"
    finally:
        assert await watcher.stop() == 0
