"""Generate a seeded `Metadata`-level audit log shaped like the one recorded from a real kube-apiserver.

The recorded events (tests/fixtures/audit/*.metadata.jsonl: v1.37.2) are the templates, each client a service
account in a pod of its own: reads and successful updates by one or two clients per object over two hours, an
occasional conflict retried once, plus injected conflict storms, stuck appliers and no-op loops.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from harness import REPO_ROOT
from watcher.model import format_observed

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "audit"
POD_NAME = "authentication.kubernetes.io/pod-name"
START = 1_795_000_000.0
Event = dict[str, Any]


def templates() -> dict[str, Event]:
    """Take the recorded events: a get, a successful update, an update rejected with 409, an apply rejected so."""
    found: dict[str, Event] = {}
    for name in ("rmw-fight", "apply-stuck"):
        for line in (FIXTURES / f"{name}.metadata.jsonl").read_bytes().splitlines():
            event = orjson.loads(line)
            code = event["responseStatus"]["code"]
            kind = {("get", 200): "get", ("update", 200): "update", ("update", 409): "conflict"}.get(
                (event["verb"], code)
            )
            if event["verb"] == "patch" and code == 409:
                kind = "apply"
            if kind is not None:
                found.setdefault(kind, event)
    return found


class Log:
    """An audit log being written: events copied from the recorded templates, kept in memory until written."""

    def __init__(self, seed: int) -> None:
        self.templates = templates()
        self.random = random.Random(seed)  # noqa: S311 - seeded test data, not secrets
        self.events: list[tuple[float, bytes]] = []
        self.serial = 0

    def add(self, kind: str, at: float, ns: str, name: str, user: str, *, rv: int, query: str = "") -> None:
        """Add a `kind` event (get, update, conflict, apply) of `user` on a ConfigMap at `at`."""
        self.serial += 1
        event = self.templates[kind]
        agent = user.rsplit(":", 1)[-1]
        # (each service account in a pod of its own, its token bound to it, as the recorded clients' are)
        extra = {**event["user"].get("extra", {}), POD_NAME: [f"{agent}-5f8b6c9d7-m4tzr"]}
        copy = {
            **event,
            "auditID": f"{self.serial:032x}",
            "requestURI": f"/api/v1/namespaces/{ns}/configmaps/{name}{query}",
            "user": {**event["user"], "username": user, "extra": extra},
            "userAgent": f"{agent}/1.0",
            "objectRef": {**event["objectRef"], "namespace": ns, "name": name, "resourceVersion": str(rv)},
            "requestReceivedTimestamp": format_observed(at),
            "stageTimestamp": format_observed(at + 0.002),
        }
        self.events.append((at, orjson.dumps(copy)))


def generate(path: Path, *, objects: int, clients: int, seed: int) -> dict[str, set[tuple[str, str]]]:
    """Write the log; return the injected findings by type: {(namespace, name)}."""
    log = Log(seed)
    rng = log.random
    users = [f"system:serviceaccount:team-{i % 40}:controller-{i}" for i in range(clients)]
    injected: dict[str, set[tuple[str, str]]] = {"conflict_storm": set(), "apply_conflict": set(), "noop_writes": set()}
    span = 7200.0
    for index in range(objects):
        ns, name = f"ns-{index % 500}", f"cm-{index}"
        writers = rng.sample(users, 2 if index % 3 == 0 else 1)
        rv = 1000 + index * 1000
        at = START + rng.uniform(0, 600)
        role = index % 400
        for _ in range(rng.randint(3, 8)):  # benign: a read and an update every ten minutes or so
            who = rng.choice(writers)
            log.add("get", at, ns, name, who, rv=rv)
            if len(writers) == 2 and rng.random() < 0.1:  # now and then the other wrote first: one conflict
                log.add("conflict", at + 0.01, ns, name, who, rv=rv)
                rv += 1
            log.add("update", at + 0.02, ns, name, who, rv=rv)
            rv += 1
            at += rng.uniform(300, span / 8)
        if role == 1:  # a storm: two controllers over one object, one losing every round for a few minutes
            injected["conflict_storm"].add((ns, name))
            loser, winner = users[index % clients], users[(index + 1) % clients]
            for step in range(40):
                t = at + step * 3.0
                log.add("update", t, ns, name, winner, rv=rv)
                log.add("conflict", t + 0.5, ns, name, loser, rv=rv)
                rv += 1
        elif role == 2:  # a no-op loop: the same version rewritten every 5 seconds
            injected["noop_writes"].add((ns, name))
            for step in range(30):
                log.add("update", at + step * 5.0, ns, name, users[index % clients], rv=rv)
        elif role == 3:  # a stuck applier
            injected["apply_conflict"].add((ns, name))
            for step in range(5):
                log.add(
                    "apply", at + step * 60.0, ns, name, users[index % clients], rv=rv, query="?fieldManager=deployer"
                )
    log.events.sort(key=lambda e: e[0])
    path.write_bytes(b"".join(line + b"\n" for _, line in log.events))
    return injected


def write_updates(path: Path, *, objects: int, clients_per_object: int) -> None:
    """Write a log of successful updates by `clients_per_object` clients of each object.

    Each update changes its object (a new resourceVersion each: no no-op writes, whose rates would be counted too).
    """
    log = Log(7)
    for index in range(objects):
        for c in range(clients_per_object):
            log.add(
                "update",
                START + index * 0.001 + c * 0.0001,
                "ns",
                f"cm-{index}",
                f"system:serviceaccount:a:c{c}",
                rv=c + 1,
            )
    path.write_bytes(b"".join(line + b"\n" for _, line in log.events))
