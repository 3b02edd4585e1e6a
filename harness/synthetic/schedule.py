"""Plan every object's writes: injected fights and hot loops first, then benign churn to fill the event budget.

Benign churn: rollouts with their status bursts, status writes, config edits, leader-election ConfigMaps renewed
every 2 s, single corrections A->B->A, ownership migrations A->B->C. Injected: fights (A->B->A->B... on
spec.replicas or a label) and hot loops (one writer, >= 1 write/s for minutes).
"""

from __future__ import annotations

import math
import random
from typing import Any

from harness.synthetic.fields import HPA, REPLICAS, Writer
from harness.synthetic.population import SPAN, TEAMS, Planned, Population

LABEL_FIGHTERS: tuple[Writer, ...] = (("kyverno", "Update"), ("team-labeler", "Update"), ("kubectl-label", "Update"))
# (an HPA's, KEDA's through its HPA, and `kubectl scale`'s writes go through the scale subresource)
SCALERS: tuple[Writer, ...] = (HPA, ("keda-operator", "Update", "scale"), ("kubectl", "Update", "scale"))
HOT_WRITERS: tuple[Writer, ...] = (
    ("config-syncer", "Update"),
    ("external-secrets", "Update"),
    ("reloader", "Update"),
    ("my-operator", "Update"),
)
TEAM_LABEL = ("f:metadata", "f:labels", "f:team")


def plan(rng: random.Random, events: int, objects: int) -> Population:
    """Decide every object's writes: injected fights and hot loops first, benign churn fills the budget."""
    pop = Population(rng, objects)
    inject(rng, pop, objects)
    churn = [o for o in pop.objects if o.role not in ("leader", "static")]
    deleted = rng.sample([o for o in churn if o.role == "benign"], round(len(churn) * 0.01))
    fixed = len(pop.objects) + len(deleted) + sum(len(o.actions) for o in pop.objects)
    for obj, count in zip(churn, spread(rng, max(0, events - fixed), len(churn)), strict=True):
        obj.actions += benign(rng, obj, count)
    for obj in deleted:
        last = max((t for t, _, _ in obj.actions), default=obj.listed)
        obj.actions.append((last + rng.uniform(5.0, 300.0), "delete", ()))
    for obj in pop.objects:
        obj.actions.sort(key=lambda a: a[0])
        previous = obj.listed
        for i, (t, op, args) in enumerate(obj.actions):  # writes of one object are >= 50 ms apart
            if t < previous + 0.05:
                obj.actions[i] = (previous + 0.05, op, args)
            previous = obj.actions[i][0]
    return pop


def inject(rng: random.Random, pop: Population, objects: int) -> None:
    for obj in pop.pick(round(objects * 0.015), ("Deployment",), "fight"):
        obj.actions += fight(rng, obj, "replicas")
    for obj in pop.pick(round(objects * 0.015), ("ConfigMap", "Deployment"), "fight"):
        obj.actions += fight(rng, obj, "label")
    for obj in pop.pick(max(3, round(objects * 0.0025)), ("ConfigMap", "Deployment"), "hot"):
        obj.actions += hot_loop(rng, obj)
    for obj in pop.pick(round(objects * 0.005), ("Deployment",), "correction"):
        obj.actions += correction(rng, obj)
    for obj in pop.pick(round(objects * 0.005), ("ConfigMap",), "migration"):
        obj.actions += migration(rng, obj)
    for obj in pop.objects:
        if obj.role == "leader":  # leader election in a ConfigMap annotation, renewed every 2 s
            t = obj.listed + rng.uniform(0.1, 2.0)
            while t < SPAN:
                obj.actions.append((t, "leader", ()))
                t += rng.uniform(1.98, 2.02)


def spread(rng: random.Random, budget: int, count: int, cap: int = 120) -> list[int]:
    """Split `budget` writes over `count` objects, heavy-tailed, at most `cap` each (2 h: no hot loops)."""
    weights = [rng.lognormvariate(0.0, 0.8) for _ in range(count)]
    scale = budget / sum(weights)
    counts = [min(cap, math.floor(w * scale)) for w in weights]
    short = budget - sum(counts)
    while short > 0:
        i = rng.randrange(count)
        if counts[i] < cap:
            counts[i] += 1
            short -= 1
    return counts


def fight(rng: random.Random, obj: Planned, what: str) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Plan a fight: two managers alternately taking spec.replicas or the `team` label, A->B->A->B..."""
    writes = rng.randint(4, 12)
    period = rng.choice((rng.uniform(2.0, 15.0), rng.uniform(15.0, 120.0)))
    start = rng.uniform(obj.listed + 30.0, max(obj.listed + 31.0, SPAN - writes * period * 1.1 - 10.0))
    keys: tuple[str, ...]
    taker: Writer
    values: tuple[Any, Any]
    if what == "replicas":
        keys, taker, values = REPLICAS, rng.choice(SCALERS), (3, rng.randint(5, 12))
    else:
        keys, taker, values = TEAM_LABEL, rng.choice(LABEL_FIGHTERS), (obj.team, rng.choice(TEAMS))
        if values[1] == obj.team:
            values = (obj.team, "unassigned")
    alone = "owns only this field"
    obj.flavor = f"{'spec.replicas' if what == 'replicas' else 'label'} taken by {taker[0]} ({alone})"
    out = []
    t = start
    for k in range(writes):
        by, loser, value = (taker, obj.primary, values[1]) if k % 2 == 0 else (obj.primary, taker, values[0])
        out.append((t, "take", (by, loser, keys, value)))
        t += period * rng.uniform(0.9, 1.1)
    return out


def hot_loop(rng: random.Random, obj: Planned) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Plan a hot loop: one writer stamping an annotation with the time, >= 1 write/s for 1-2 minutes."""
    writer = rng.choice(HOT_WRITERS)
    period, duration = rng.uniform(0.5, 1.0), rng.uniform(60.0, 120.0)
    start = rng.uniform(obj.listed + 10.0, max(obj.listed + 11.0, SPAN - duration - 10.0))
    out = []
    t = start
    while t < start + duration:
        out.append((t, "annotate", (writer, "reconciler.example.com/last-sync")))
        t += period * rng.uniform(0.8, 1.2)
    return out


def correction(rng: random.Random, obj: Planned) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Plan a correction, not a fight: someone edits spec.replicas once and the owner sets it back (A->B->A)."""
    t = rng.uniform(obj.listed + 30.0, max(obj.listed + 31.0, SPAN - 700.0))
    edit = ("kubectl-edit", "Update")
    return [
        (t, "take", (edit, obj.primary, REPLICAS, 4)),
        (t + rng.uniform(30.0, 600.0), "take", (obj.primary, edit, REPLICAS, 3)),
    ]


def migration(rng: random.Random, obj: Planned) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Plan a migration, not a fight: ownership of a label moves on, A->B->C, with a new value each time."""
    t = rng.uniform(obj.listed + 30.0, max(obj.listed + 31.0, SPAN - 1300.0))
    b, c = ("helm", "Update"), ("argocd-controller", "Update")
    if obj.primary[0] == "helm":
        b = ("kubectl-client-side-apply", "Update")
    if obj.primary[0] == "argocd-controller":
        c = ("kubectl-client-side-apply", "Update")
    return [
        (t, "take", (b, obj.primary, TEAM_LABEL, f"{obj.team}-v2")),
        (t + rng.uniform(60.0, 1200.0), "take", (c, b, TEAM_LABEL, f"{obj.team}-v3")),
    ]


def benign(rng: random.Random, obj: Planned, count: int) -> list[tuple[float, str, tuple[Any, ...]]]:
    """Plan everyday churn: rollouts with a status burst, status writes, config edits; values never go back."""
    groups: list[list[tuple[str, tuple[Any, ...]]]] = []
    left = count
    while left > 0:
        if obj.kind == "Deployment" and left >= 3 and rng.random() < 0.3:
            first = "rollout" if rng.random() < 0.8 else "restart"
            size = min(left, rng.randint(3, 5))
            group = [(first, ()), ("dep_status", ("start",))]
            group += [("dep_status", ("progress",))] * (size - 3) + [("dep_status", ("done",))]
        elif obj.kind == "Deployment":
            size, group = 1, [("dep_status", ("blip",))]
        elif obj.kind == "ReplicaSet":
            size, group = 1, [("rs_status", ())]
        elif rng.random() < 0.1:
            size, group = 1, [("cm_annotate", ())]
        else:
            size, group = 1, [("cm_data", ())]
        groups.append(group[:size])
        left -= size
    if obj.kind == "ReplicaSet" and groups and rng.random() < 0.3:
        groups[-1] = [("rs_scale_down", ())]
    starts = sorted(rng.uniform(obj.listed + 1.0, SPAN) for _ in groups)
    out = []
    t = obj.listed
    for start, group in zip(starts, groups, strict=True):
        t = max(start, t + 1.0)
        for op, args in group:
            out.append((t, op, args))
            t += rng.uniform(1.0, 8.0)
    return out
