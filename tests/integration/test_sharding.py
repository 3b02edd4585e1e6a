"""Two shards of `fightwatch run` on the real kube-apiserver: each lists and watches only its own resources (the
server sends it nothing else), and together they find every fight, each fight whole in one shard, with the shard
in its metrics."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from harness.control_plane import ControlPlane
from harness.kube import Kube, Resource
from harness.watcher import Watcher
from watcher.config import ShardingSettings
from watcher.sources.discovery import ApiResource, shard_of

NAMESPACE = "sharding"
DEADLINE = 120.0
SHARDS = 2
# One object of each of these kinds, fought over (a label taken back and forth by two operators).
OBJECTS: dict[Resource, dict[str, Any]] = {
    Resource("/api/v1", "configmaps", "ConfigMap"): {"data": {"a": "1"}},
    Resource("/api/v1", "secrets", "Secret"): {"data": {"a": "MQ=="}},
    Resource("/api/v1", "services", "Service"): {"spec": {"ports": [{"port": 80}]}},
    Resource("/api/v1", "serviceaccounts", "ServiceAccount"): {"automountServiceAccountToken": False},
    Resource("/apis/apps/v1", "deployments", "Deployment"): {
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "a"}]}},
        }
    },
}


def _name(resource: Resource) -> str:
    """kubectl's name of the resource: `configmaps`, `deployments.apps`."""
    group = resource.api_version.rpartition("/")[0]
    return f"{resource.plural}.{group}" if group else resource.plural


def _expected_shard(resource: Resource) -> int:
    group, _, version = resource.api_version.rpartition("/")
    api = ApiResource(group, version, resource.plural, resource.kind, namespaced=True)
    return shard_of(api, ShardingSettings(total_shards=SHARDS))


async def _fight(kube: Kube, resource: Resource, body: dict[str, Any]) -> None:
    obj = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": {"name": "contested"}, **body}
    await kube.ensure(resource.path(NAMESPACE), obj, manager="setup")
    for n in range(6):
        team = ("alpha", "beta")[n % 2]
        patch = {"metadata": {"labels": {"owner": team}}}
        await kube.merge_patch(resource.path(NAMESPACE, "contested"), patch, manager=f"{team}-operator")
        await asyncio.sleep(0.3)  # the writers' pace, not a readiness wait


async def test_two_shards_watch_only_their_resources_and_together_find_every_fight(
    control_plane: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    await kube.ensure_namespace(NAMESPACE)
    config = {"watch": {"resources": [_name(r) for r in OBJECTS], "namespaces": [NAMESPACE]}}
    expected = {i: {_name(r) for r in OBJECTS if _expected_shard(r) == i} for i in range(SHARDS)}
    assert all(expected.values())  # (these five resources hash to both shards)
    async with contextlib.AsyncExitStack() as stack:
        shards = []
        for index in range(SHARDS):
            shard = Watcher(
                tmp_path,
                kubeconfig=control_plane.kubeconfig,
                config=config,
                name=f"shard-{index}",
                args=("--shard", f"fw-fightwatch-{index}", "--total-shards", str(SHARDS)),
            )
            await shard.start()
            stack.push_async_callback(shard.stop)
            shards.append(shard)
        for index, shard in enumerate(shards):
            ready = await shard.wait_ready()
            assert {name.split("@")[0] for name in ready["resources"]} == expected[index]
            assert ready["shard"] == {"shard": index, "total_shards": SHARDS}

        await asyncio.gather(*(_fight(kube, resource, body) for resource, body in OBJECTS.items()))

        async def every_fight() -> list[list[dict[str, Any]]] | None:
            found = [await shard.findings() for shard in shards]
            return found if sum(len(f) for f in found) >= len(OBJECTS) else None

        found = await shards[0].poll_async(every_fight, what="a fight on each kind", deadline=DEADLINE)
        for index, shard in enumerate(shards):
            kinds = {f["object"]["kind"] for f in found[index]}
            assert kinds == {r.kind for r in OBJECTS if _expected_shard(r) == index}  # each fight in its shard only
            assert all(f["type"] == "fight" for f in found[index])
            assert all(set(f["fields"]) == {"metadata.labels.owner"} for f in found[index])
            received = {
                sample.labels["resource"]
                for family in text_string_to_metric_families(await shard.scrape())
                for sample in family.samples
                if sample.name == "fightwatch_events_total" and sample.value > 0
            }
            assert received == {name.split(".")[0] for name in expected[index]}  # the server sent nothing else
            infos = [
                sample.labels
                for family in text_string_to_metric_families(await shard.scrape())
                for sample in family.samples
                if sample.name == "fightwatch_finding_info"
            ]
            assert {i["shard"] for i in infos} == {str(index)}
            assert await shard.metric("fightwatch_shard_info", shard=str(index), total_shards=str(SHARDS)) == 1.0
