"""Watch reads in batches (`watch.read_batch`): after a read, the events written meanwhile arrive together.

A burst of writes to one ConfigMap reaches the watcher in fewer reads than writes, every one of them in order.
The events of one read share their receive time in the recording, which is how the reads are counted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, Kube, new_api_client
from harness.watcher import Watcher, recorded

pytestmark = pytest.mark.integration

NAMESPACE = "read-batch"
WRITES = 40


@pytest.mark.parametrize("read_batch", ["500ms", 0])
async def test_a_burst_of_writes_arrives_in_fewer_reads_and_in_order(
    control_plane: ControlPlane, tmp_path: Path, read_batch: str | int
) -> None:
    client = await new_api_client(control_plane.kubeconfig)
    kube = Kube(client)
    name = f"burst-{read_batch}"
    config = {"watch": {"resources": ["configmaps"], "namespaces": [NAMESPACE], "read_batch": read_batch}}
    try:
        await kube.ensure_namespace(NAMESPACE)
        async with Watcher(tmp_path, kubeconfig=control_plane.kubeconfig, config=config) as watcher:
            await watcher.wait_ready()
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}}
            await kube.create(CONFIGMAPS.path(NAMESPACE), body, manager="creator")
            versions = []
            for n in range(WRITES):
                answer = await kube.merge_patch(
                    CONFIGMAPS.path(NAMESPACE, name), {"data": {"n": str(n)}}, manager="burst"
                )
                versions.append(answer["metadata"]["resourceVersion"])
            recording = watcher.recording
            assert recording is not None

            def burst() -> list[dict[str, Any]] | None:
                events = [e for e in recorded(recording) if e["object"]["metadata"]["name"] == name]
                return events if len(events) == WRITES + 1 else None

            events = await watcher.poll(burst, what="every write of the burst")
    finally:
        await client.close()
    modified = events[1:]
    assert [e["object"]["metadata"]["resourceVersion"] for e in modified] == versions
    reads = {e["observedAt"] for e in events}
    if read_batch:
        assert len(reads) < len(events) / 2
