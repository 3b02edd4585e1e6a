"""Generate the live benchmark's traffic: ConfigMaps and Deployments, then writes to them at a fixed rate.

Merge patches on ConfigMaps' data by `managers` field managers (writer-a, writer-b, ..., one key each), on
Deployments' annotations by `deployer`; a few ConfigMaps are fought over by two more managers, fight-a-operator and
fight-b-operator.
"""

from __future__ import annotations

import asyncio
import random
import string
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.kube import CONFIGMAPS, DEPLOYMENTS, Kube

IN_FLIGHT = 48  # concurrent writes of the load generator
WRITER_KEYS = string.ascii_lowercase  # writer-a owns the ConfigMaps' data key `a`, writer-b `b`, ...
DATA = "".join(
    random.Random(7).choice(  # noqa: S311 - filler text, not cryptography
        "abcdefghijklmnopqrstuvwxyz0123456789 \n"
    )
    for _ in range(1000)
)


@dataclass(frozen=True)
class Workload:
    """The objects the benchmark creates, and the writes it makes to them."""

    configmaps: int
    deployments: int
    namespaces: int  # the objects are spread over these
    managers: int  # field managers writing ConfigMaps' data
    fights: int  # ConfigMaps two managers fight over
    rate: float  # writes per second
    duration: float  # seconds of load
    seed: int


@dataclass
class Load:
    """The writes one run made."""

    accepted: dict[str, float] = field(default_factory=dict)  # resourceVersion -> when the writer had the answer
    writes: int = 0
    fight_writes: int = 0
    by_manager: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    seconds: float = 0.0


def configmap(ns: str, name: str, *, keys: str) -> dict[str, Any]:
    """Make a ConfigMap of about 1 KB of data, with a data key of each manager's in `keys`."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": name.rsplit("-", 1)[0], "tier": "backend"},
            "annotations": {"example.com/owner": "team-platform"},
        },
        "data": {"config.yaml": DATA} | dict.fromkeys(keys, "0"),
    }


def deployment(ns: str, name: str) -> dict[str, Any]:
    """Make a Deployment of one replica whose container has ten environment variables."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example.com/app:1.0.0",
                            "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(10)],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ]
                },
            },
        },
    }


async def populate(kube: Kube, workload: Workload) -> list[tuple[str, str]]:
    """Create the objects; return their paths ('configmap' or 'deployment', path)."""
    limit = asyncio.Semaphore(IN_FLIGHT)
    objects: list[tuple[str, str]] = []

    async def create(collection: str, body: dict[str, Any]) -> None:
        async with limit:
            await kube.create(collection, body, manager="bench-setup")

    tasks = []
    for n in range(workload.namespaces):
        await kube.ensure_namespace(f"bench-{n}")
    for i in range(workload.configmaps):
        ns = f"bench-{i % workload.namespaces}"
        tasks.append(create(CONFIGMAPS.path(ns), configmap(ns, f"cm-{i}", keys=WRITER_KEYS[: workload.managers])))
        objects.append(("configmap", CONFIGMAPS.path(ns, f"cm-{i}")))
    for i in range(workload.deployments):
        ns = f"bench-{i % workload.namespaces}"
        tasks.append(create(DEPLOYMENTS.path(ns), deployment(ns, f"deploy-{i}")))
        objects.append(("deployment", DEPLOYMENTS.path(ns, f"deploy-{i}")))
    await asyncio.gather(*tasks)
    return objects


async def generate(kube: Kube, objects: list[tuple[str, str]], workload: Workload, *, run: int) -> Load:
    """Write at a fixed rate: benign patches by per-field managers, and alternating writes on fought objects.

    Every value written names the run, so that no write of a later run leaves an object as it was (no event).
    """
    rng = random.Random(workload.seed)  # noqa: S311 - a reproducible load, not cryptography
    fought = [path for kind, path in objects if kind == "configmap"][: workload.fights]
    fight_turn = dict.fromkeys(fought, 0)
    load = Load()
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def write(path: str, patch: dict[str, Any], manager: str, *, fight: bool) -> None:
        try:
            answer = await kube.merge_patch(path, patch, manager=manager)
        except Exception:  # counted; the load goes on
            load.errors += 1
        else:
            load.accepted[answer["metadata"]["resourceVersion"]] = time.time()
            load.writes += 1
            load.fight_writes += fight
            load.by_manager[manager] += 1
        finally:
            limit.release()

    loop = asyncio.get_running_loop()
    start = loop.time()
    total = int(workload.rate * workload.duration)
    fight_every = max(1, int(workload.rate * 2.0 / max(len(fought), 1)))  # each fought object written every ~2 s
    tasks = []
    for k in range(total):
        await asyncio.sleep(max(0.0, start + k / workload.rate - loop.time()))
        await limit.acquire()
        if fought and k % fight_every == 0:
            path = fought[(k // fight_every) % len(fought)]
            turn = fight_turn[path] = fight_turn[path] + 1
            side = "a" if turn % 2 else "b"
            patch: dict[str, Any] = {"metadata": {"labels": {"owner": f"team-{side}-{run}"}}}
            tasks.append(asyncio.create_task(write(path, patch, f"fight-{side}-operator", fight=True)))
            continue
        kind, path = objects[rng.randrange(len(objects))]
        if kind == "configmap":
            key = rng.choice(WRITER_KEYS[: workload.managers])
            patch = {"data": {key: f"{run}.{k}"}}
            manager = f"writer-{key}"
        else:
            patch = {"metadata": {"annotations": {"example.com/revision": f"{run}.{k}"}}}
            manager = "deployer"
        tasks.append(asyncio.create_task(write(path, patch, manager, fight=False)))
    await asyncio.gather(*tasks)
    load.seconds = loop.time() - start
    return load
