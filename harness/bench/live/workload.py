"""Generate the live benchmark's traffic: ConfigMaps and Deployments, then writes to them at a fixed rate.

Merge patches on ConfigMaps' data by `managers` field managers (writer-a, writer-b, ..., one key each), on
Deployments' annotations by `deployer`; a few ConfigMaps are fought over by two more managers, fight-a-operator and
fight-b-operator.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any

from harness import manifests
from harness.bench.cluster_load import Load, Write, create_all, write_at_rate
from harness.kube import CONFIGMAPS, DEPLOYMENTS, Kube

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
    body = manifests.deployment(ns, name, replicas=1, image="registry.example.com/app:1.0.0")
    body["spec"]["template"]["spec"]["containers"][0] |= {
        "name": "app",
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(10)],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    return body


async def populate(kube: Kube, workload: Workload) -> list[tuple[str, str]]:
    """Create the objects; return their paths ('configmap' or 'deployment', path)."""
    namespaces = [f"bench-{n}" for n in range(workload.namespaces)]
    configmaps = [(namespaces[i % workload.namespaces], f"cm-{i}") for i in range(workload.configmaps)]
    deployments = [(namespaces[i % workload.namespaces], f"deploy-{i}") for i in range(workload.deployments)]
    keys = WRITER_KEYS[: workload.managers]
    bodies = [(CONFIGMAPS.path(ns), configmap(ns, name, keys=keys)) for ns, name in configmaps]
    bodies += [(DEPLOYMENTS.path(ns), deployment(ns, name)) for ns, name in deployments]
    await create_all(kube, namespaces, bodies, manager="bench-setup")
    return [("configmap", CONFIGMAPS.path(ns, name)) for ns, name in configmaps] + [
        ("deployment", DEPLOYMENTS.path(ns, name)) for ns, name in deployments
    ]


async def generate(kube: Kube, objects: list[tuple[str, str]], workload: Workload, *, run: int) -> Load:
    """Write at a fixed rate: benign patches by per-field managers, and alternating writes on fought objects.

    Every value written names the run, so that no write of a later run leaves an object as it was (no event).
    """
    rng = random.Random(workload.seed)  # noqa: S311 - a reproducible load, not cryptography
    fought = [path for kind, path in objects if kind == "configmap"][: workload.fights]
    fight_turn = dict.fromkeys(fought, 0)
    fight_every = max(1, int(workload.rate * 2.0 / max(len(fought), 1)))  # each fought object written every ~2 s

    def write_of(k: int) -> Write:
        if fought and k % fight_every == 0:
            path = fought[(k // fight_every) % len(fought)]
            turn = fight_turn[path] = fight_turn[path] + 1
            side = "a" if turn % 2 else "b"
            return Write(
                path, {"metadata": {"labels": {"owner": f"team-{side}-{run}"}}}, f"fight-{side}-operator", True
            )
        kind, path = objects[rng.randrange(len(objects))]
        if kind == "configmap":
            key = rng.choice(WRITER_KEYS[: workload.managers])
            return Write(path, {"data": {key: f"{run}.{k}"}}, f"writer-{key}")
        return Write(path, {"metadata": {"annotations": {"example.com/revision": f"{run}.{k}"}}}, "deployer")

    return await write_at_rate(kube, rate=workload.rate, duration=workload.duration, write_of=write_of)
