"""The recorder sees every write from creation on, across re-watches, and nothing twice."""

from __future__ import annotations

import contextlib

from kubernetes_asyncio.client import ApiClient

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, ApiError, Kube
from harness.kubectl import Kubectl
from harness.recorder import Recorder
from harness.scenarios import run_scenarios


async def test_recorder_keeps_every_event_across_rewatches(control_plane: ControlPlane, api_client: ApiClient) -> None:
    with contextlib.suppress(ApiError):  # another test of the session may have run this scenario already
        await Kube(api_client).request("DELETE", CONFIGMAPS.path("benign-one-correction", "ownership"))
    recorder = Recorder(api_client, (CONFIGMAPS,), watch_timeout_seconds=1)  # the server ends each watch after 1 s
    await recorder.start()
    try:
        kubectl = Kubectl(control_plane.kubectl, control_plane.kubeconfig)
        await run_scenarios(api_client, ["benign-one-correction"], kubectl=kubectl)
        await recorder.sync()
    finally:
        await recorder.stop()

    events = [
        e
        for e in recorder.events
        if e["object"]["metadata"]["namespace"] == "benign-one-correction"
        and e["object"]["metadata"]["name"] == "ownership"
    ]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED"]
    assert [e["object"]["metadata"]["labels"]["owner"] for e in events] == ["platform", "team-b", "platform"]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(set(versions))
    assert all(e["observedAt"].endswith("Z") and len(e["observedAt"]) == 27 for e in events)
