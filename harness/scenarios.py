"""Scenarios: real clients writing to a real API server, some fighting, some not.

Every scenario works in its own namespace, named after the scenario, so they can all run concurrently
against one server (cluster-scoped objects they own are listed in CLUSTER_OBJECT_OWNERS); the `incident-*`
scenarios, one root cause on many objects, work in several (`<scenario>-a`, `-b`, ...: NAMESPACE_OWNERS) and
run only when named (`Scenario.separate`). Each writer is a distinct field manager unless a scenario says
otherwise. Update writers read-modify-write (GET, change, PUT) and retry on 409 Conflict; when the object
does not exist yet, the first such write creates it (POST, same manager). Apply writers use server-side
apply with force=True; their first apply creates the object.

Alternating writes are spaced STEP seconds apart on a fixed schedule from the scenario's start.
``benign-status-vs-spec`` needs kube-controller-manager (ControlPlane.start_controller_manager()).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from kubernetes_asyncio.client import ApiClient

from . import manifests
from .kube import (
    CONFIGMAPS,
    CRDS,
    DEPLOYMENTS,
    JSON,
    LEASES,
    VALIDATING_WEBHOOKS,
    WIDGETS,
    ApiError,
    Kube,
)
from .kubectl import Kubectl

STEP = 1.5  # seconds between two alternating writes
SLOW_PERIOD = 50.0  # seconds between two writes of fight-slow
READY_DEADLINE = 60.0  # seconds to wait for the CRD or the deployment controller
POLL_INTERVAL = 0.2
HARNESS_MANAGER = "fightwatch-harness"  # creates namespaces and the Widget CRD; never fights

ScenarioFn = Callable[..., Awaitable[None]]
Write = Callable[[], Awaitable[Any]]
Mutation = Callable[[JSON], None]


# --------------------------------------------------------------------------------------------------------
# helpers


def rfc3339_now(*, digits: int = 6) -> str:
    """Current UTC time as RFC 3339 with `digits` sub-second digits (0: whole seconds), e.g. ...:05.123456Z."""
    now = datetime.now(UTC)
    text = now.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += f".{now.microsecond:06d}"[: digits + 1]
    return text + "Z"


async def ensure_namespace(kube: Kube, name: str) -> None:
    await kube.ensure_namespace(name, manager=HARNESS_MANAGER)


async def _at_intervals(writes: Sequence[Write], period: float) -> None:
    """Run writes one after another, the k-th starting `k * period` seconds after the first."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for k, write in enumerate(writes):
        await asyncio.sleep(max(0.0, start + k * period - loop.time()))
        await write()


async def _for_duration(write: Write, *, period: float, duration: float) -> int:
    """Call write every `period` seconds (fixed schedule) for `duration` seconds; return how many writes."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    count = 0
    while (due := start + count * period) < start + duration:
        await asyncio.sleep(max(0.0, due - loop.time()))
        await write()
        count += 1
    return count


async def _in_namespace(api_client: ApiClient, ns: str) -> Kube:
    """Make the scenario's namespace if it is missing; return a client to write in it."""
    kube = Kube(api_client)
    await ensure_namespace(kube, ns)
    return kube


def _configmap(namespace: str, name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


def _configmap_at(namespace: str, name: str) -> tuple[str, Callable[[], JSON]]:
    """A ConfigMap's path, and what makes it (for a writer that creates it if missing)."""
    return CONFIGMAPS.path(namespace, name), functools.partial(_configmap, namespace, name)


def _hpa(namespace: str, name: str, *, min_replicas: int, max_replicas: int) -> JSON:
    """An autoscaling/v2 HorizontalPodAutoscaler of the Deployment `name` on CPU. Without a metrics API (none runs
    here) it cannot compute a recommendation, yet it still enforces its bounds: a Deployment below `min_replicas`
    is scaled up to it (through the `scale` subresource), as on any cluster."""
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    metric = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": target,
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [metric],
        },
    }


def _manifest(obj: JSON) -> str:
    """An object as a manifest file for kubectl (JSON is YAML)."""
    return orjson.dumps(obj).decode()


def _widget(namespace: str, name: str, *, size: int = 1, color: str = "green") -> JSON:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, "color": color},
    }


def _set_label(key: str, value: str) -> Mutation:
    def mutate(obj: JSON) -> None:
        obj["metadata"].setdefault("labels", {})[key] = value

    return mutate


def _set_annotation(key: str, value: str | Callable[[], str]) -> Mutation:
    def mutate(obj: JSON) -> None:
        obj["metadata"].setdefault("annotations", {})[key] = value() if callable(value) else value

    return mutate


def _set_data(key: str, value: str) -> Mutation:
    def mutate(obj: JSON) -> None:
        obj.setdefault("data", {})[key] = value

    return mutate


def _updater(kube: Kube, path: str, create: Callable[[], JSON], manager: str, mutate: Mutation) -> Write:
    """An Update writer: read-modify-write of path (creating the object first if missing)."""
    return functools.partial(kube.read_modify_write, path, mutate, manager=manager, create=create)


async def label_fight(kube: Kube, namespace: str, managers: tuple[str, str], *, rounds: int = 3) -> None:
    """Two managers take the label `owner` of the ConfigMap `contested` from each other, `rounds` times.

    Read, modify, write (the first write creates it): a fight found at once, for a test or a benchmark that needs one.
    """
    path, new = _configmap_at(namespace, "contested")
    for _ in range(rounds):
        await kube.read_modify_write(path, _set_label("owner", "a"), manager=managers[0], create=new)
        await kube.read_modify_write(path, _set_label("owner", "b"), manager=managers[1])


async def _label_in_turns(
    api_client: ApiClient, ns: str, name: str, key: str, writers: Sequence[tuple[str, str]]
) -> None:
    """Writers (field manager, value) set the label `key` of a ConfigMap in turn (read, modify, write; the first
    creates it), three rounds, `STEP` apart."""
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, name)
    updaters = [_updater(kube, path, new, manager, _set_label(key, value)) for manager, value in writers]
    await _at_intervals(updaters * 3, STEP)


def _applier(kube: Kube, path: str, manager: str, manifest: JSON) -> Write:
    return functools.partial(kube.apply, path, manifest, manager=manager, force=True)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --------------------------------------------------------------------------------------------------------
# fights


async def fight_apply_vs_update_replicas(api_client: ApiClient) -> None:
    ns = "fight-apply-vs-update-replicas"
    kube = await _in_namespace(api_client, ns)
    path = DEPLOYMENTS.path(ns, "web")

    def replicas(count: int) -> Mutation:
        def mutate(obj: JSON) -> None:
            obj["spec"]["replicas"] = count

        return mutate

    argocd = _applier(kube, path, "argocd-controller", manifests.deployment(ns, "web", replicas=2))
    autoscaler = functools.partial(kube.read_modify_write, path, replicas(5), manager="custom-autoscaler")
    await _at_intervals([argocd, autoscaler] * 3, STEP)


async def fight_update_vs_update_label(api_client: ApiClient) -> None:
    writers = [("team-a-operator", "team-a"), ("team-b-operator", "team-b")]
    await _label_in_turns(api_client, "fight-update-vs-update-label", "settings", "owner", writers)


async def fight_apply_vs_apply_annotation(api_client: ApiClient) -> None:
    ns = "fight-apply-vs-apply-annotation"
    kube = await _in_namespace(api_client, ns)
    path = CONFIGMAPS.path(ns, "app-config")

    def manifest(config_hash: str) -> JSON:
        cm = _configmap(ns, "app-config")
        cm["metadata"]["annotations"] = {"example.com/config-hash": config_hash}
        return cm

    flux = _applier(kube, path, "flux-kustomize", manifest("3f1a9c0e"))
    helm = _applier(kube, path, "helm-controller", manifest("9c2b47d1"))
    await _at_intervals([flux, helm] * 3, STEP)


async def fight_data(api_client: ApiClient) -> None:
    ns = "fight-data"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "service-endpoints")
    gitops = _applier(kube, path, "gitops-sync", new() | {"data": {"endpoint": "https://api.prod.example.com"}})
    injector = _updater(
        kube, path, new, "config-injector", _set_data("endpoint", "https://api.internal.example.com:8443")
    )
    await _at_intervals([gitops, injector] * 3, STEP)


WIDGET_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer"}, "color": {"type": "string"}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "message": {"type": "string"},
                                    "observedGeneration": {"type": "integer"},
                                    "lastReconciled": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def ensure_widget_crd(kube: Kube, *, deadline: float = READY_DEADLINE) -> None:
    """Create the widgets.example.com CRD unless it exists; wait until it is Established and served.

    Safe to call concurrently: a losing creator sees 409 AlreadyExists and just waits like the others.
    """
    await kube.ensure(CRDS.path(), WIDGET_CRD, manager=HARNESS_MANAGER)
    give_up = time.monotonic() + deadline
    crd_path = CRDS.path(name="widgets.example.com")
    while True:
        crd = await kube.get(crd_path)
        conditions = (crd.get("status") or {}).get("conditions") or []  # null until the controller runs
        established = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        if established:
            try:
                await kube.get(WIDGETS.path())  # served (discovery and the REST handler are up)
            except ApiError as exc:
                if exc.status != 404:
                    raise
            else:
                return
        if time.monotonic() > give_up:
            raise RuntimeError(f"CRD widgets.example.com not established and served after {deadline}s: {conditions}")
        await asyncio.sleep(POLL_INTERVAL)


async def fight_status(api_client: ApiClient, *, kubectl: Kubectl) -> None:
    ns = "fight-status"
    kube = await _in_namespace(api_client, ns)
    await ensure_widget_crd(kube)
    await kubectl("create", "-f", "-", stdin=_manifest(_widget(ns, "gizmo", size=3, color="blue")).encode())
    path = WIDGETS.path(ns, "gizmo")

    def phase(value: str) -> Mutation:
        def mutate(obj: JSON) -> None:
            obj.setdefault("status", {})["phase"] = value

        return mutate

    operator = functools.partial(
        kube.read_modify_write, path, phase("Ready"), manager="widget-operator", subresource="status"
    )
    legacy = functools.partial(
        kube.read_modify_write, path, phase("Pending"), manager="legacy-widget-controller", subresource="status"
    )
    await _at_intervals([operator, legacy] * 3, STEP)


WEBHOOK_CONFIG_NAME = "fightwatch-test-validate"


async def fight_cabundle(api_client: ApiClient) -> None:
    ns = "fight-cabundle"
    kube = await _in_namespace(api_client, ns)
    manifest: JSON = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIG_NAME},
        "webhooks": [
            {
                "name": "validate.example.com",
                "clientConfig": {
                    "service": {"namespace": ns, "name": "gadget-webhook", "path": "/validate", "port": 443},
                    "caBundle": _b64("chart-ca"),
                },
                "rules": [
                    {
                        "apiGroups": ["example.com"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["gadgets"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }
    path = VALIDATING_WEBHOOKS.path(name=WEBHOOK_CONFIG_NAME)

    def inject(obj: JSON) -> None:
        for webhook in obj["webhooks"]:
            if webhook["name"] == "validate.example.com":
                webhook["clientConfig"]["caBundle"] = _b64("injected-ca")

    helm = _applier(kube, path, "helm", manifest)
    cainjector = functools.partial(kube.read_modify_write, path, inject, manager="cainjector")
    await _at_intervals([helm, cainjector] * 3, STEP)


async def fight_three_writers(api_client: ApiClient) -> None:
    writers = [("alpha-controller", "gold"), ("beta-controller", "silver"), ("gamma-controller", "bronze")]
    await _label_in_turns(api_client, "fight-three-writers", "placement", "tier", writers)


async def fight_slow(api_client: ApiClient, *, period: float = SLOW_PERIOD) -> None:
    """Five writes, `period` seconds apart: Apply argocd-controller, Update mode-operator, ..."""
    ns = "fight-slow"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "runtime-mode")
    manifest = new()
    manifest["metadata"]["annotations"] = {"example.com/mode": "managed"}
    argocd = _applier(kube, path, "argocd-controller", manifest)
    operator = _updater(kube, path, new, "mode-operator", _set_annotation("example.com/mode", "manual"))
    await _at_intervals([argocd, operator, argocd, operator, argocd], period)


async def fight_shared_manager(api_client: ApiClient) -> None:
    """Two operators that both call themselves `manager` (the kubebuilder default)."""
    writers = [("manager", "op-one"), ("manager", "op-two")]
    await _label_in_turns(api_client, "fight-shared-manager", "shared", "owner", writers)


async def fight_scale_vs_apply(api_client: ApiClient, *, kubectl: Kubectl) -> None:
    """`kubectl apply` of a manifest with replicas 3 against `kubectl scale --replicas=6`, which writes through the
    `scale` subresource (servers before 1.22 record no managedFields entry for it)."""
    ns = "fight-scale-vs-apply"
    await _in_namespace(api_client, ns)
    apply = functools.partial(kubectl.apply, _manifest(manifests.deployment(ns, "api", replicas=3)))
    scale = functools.partial(kubectl, "scale", "deployment/api", "-n", ns, "--replicas=6")
    await _at_intervals([apply, scale] * 3, STEP)


async def hot_loop_timestamp(api_client: ApiClient, *, rate: float = 5.0, duration: float = 30.0) -> None:
    """One writer stamping the current time into an annotation `rate` times a second.

    30 s, so that a loaded machine writing at only 2/s still reaches the 30/min decaying-rate threshold.
    """
    ns = "hot-loop-timestamp"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "reconcile-state")
    stamp = _set_annotation("example.com/last-reconciled", functools.partial(rfc3339_now, digits=6))
    write = _updater(kube, path, new, "reconciler", stamp)
    await _for_duration(write, period=1.0 / rate, duration=duration)


async def hot_loop_status(api_client: ApiClient, *, rate: float = 5.0, duration: float = 30.0) -> None:
    """One controller rewriting a Widget's status through the status subresource `rate` times a second.

    The commonest infinite reconcile loop: every pass PUTs `.../widgets/sprocket/status` (read-modify-write,
    operation Update) with a fresh `status.lastReconciled` (RFC 3339, microseconds), the same
    `status.observedGeneration` and `status.phase`, fields the one reconciler already owns after its first pass.
    """
    ns = "hot-loop-status"
    kube = await _in_namespace(api_client, ns)
    await ensure_widget_crd(kube)
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "sprocket", "namespace": ns},
        "spec": {"size": 1, "color": "green"},
    }
    await kube.ensure(WIDGETS.path(ns), widget, manager=HARNESS_MANAGER)

    def reconcile(obj: JSON) -> None:
        status = obj.setdefault("status", {})
        status["phase"] = "Ready"
        status["observedGeneration"] = obj["metadata"]["generation"]
        status["lastReconciled"] = rfc3339_now(digits=6)

    write = functools.partial(
        kube.read_modify_write,
        WIDGETS.path(ns, "sprocket"),
        reconcile,
        manager="widget-status-reconciler",
        subresource="status",
    )
    await _for_duration(write, period=1.0 / rate, duration=duration)


# --------------------------------------------------------------------------------------------------------
# the real controllers and the real kubectl of the release


async def fight_hpa_vs_apply(
    api_client: ApiClient, *, kubectl: Kubectl, period: float = 3.0, duration: float = 75.0
) -> None:
    """The classic: a HorizontalPodAutoscaler (the real one, in kube-controller-manager) against a manifest that a
    pipeline re-applies every `period` seconds with `kubectl apply`, as a GitOps tool does. The manifest says
    `replicas: 1`, the HPA's minReplicas is 3: every HPA sync (15 s) scales the Deployment up through the `scale`
    subresource, and the next apply scales it back down."""
    ns = "fight-hpa-vs-apply"
    await _in_namespace(api_client, ns)
    manifest = _manifest(manifests.deployment(ns, "web", replicas=1))
    await kubectl.apply(manifest)
    await kubectl.apply(_manifest(_hpa(ns, "web", min_replicas=3, max_replicas=5)))
    await _for_duration(functools.partial(kubectl.apply, manifest), period=period, duration=duration)


async def benign_hpa_scaling(api_client: ApiClient, *, kubectl: Kubectl, period: float = 20.0) -> None:
    """An HPA that merely scales: the Deployment's manifest leaves `replicas` alone, and a person raises the HPA's
    minReplicas now and then (2, then 3, then 4, `period` seconds apart). The HPA scales the Deployment each time and
    its conditions change with its state (in `status.conditions`, and in the conditions annotation of the
    autoscaling/v1 view): one writer reporting on its own object."""
    ns = "benign-hpa-scaling"
    await _in_namespace(api_client, ns)
    deployment = manifests.deployment(ns, "api", replicas=1)
    del deployment["spec"]["replicas"]
    await kubectl.apply(_manifest(deployment))
    await kubectl.apply(_manifest(_hpa(ns, "api", min_replicas=2, max_replicas=6)))

    def raise_to(count: int) -> Write:
        patch = _manifest({"spec": {"minReplicas": count}})
        return functools.partial(kubectl, "patch", "hpa", "api", "-n", ns, "--type=merge", "-p", patch)

    await _at_intervals([_noop, raise_to(3), raise_to(4), _noop], period)


async def hot_loop_rollout_restart(
    api_client: ApiClient, *, kubectl: Kubectl, period: float = 1.5, duration: float = 45.0
) -> None:
    """A script runs `kubectl rollout restart` every `period` seconds: each restart stamps
    `spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]` (kubectl-rollout), and the deployment
    controller rolls a new ReplicaSet out and rewrites the Deployment's status several times in reply."""
    ns = "hot-loop-rollout-restart"
    await _in_namespace(api_client, ns)
    await kubectl.apply(_manifest(manifests.deployment(ns, "app", replicas=1)))
    restart = functools.partial(kubectl, "rollout", "restart", "deployment/app", "-n", ns)
    await _for_duration(restart, period=period, duration=duration)


CROWD = 12  # update managers of fight-ancient-changes' ConfigMap: more than the 10 the API server keeps


async def fight_ancient_changes(api_client: ApiClient) -> None:
    """A ConfigMap written by more update managers than the API server keeps (10): each of 12 operators sets a key of
    its own, and the API server merges the oldest entries into one called `ancient-changes`. Then `tier-operator`
    (which first set the `tier` label, before the others, so its entry is merged away) and `team-b-operator` flip
    that label in turns: the first handover takes it from `ancient-changes`."""
    ns = "fight-ancient-changes"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "crowded")
    writes: list[Write] = [_updater(kube, path, new, "tier-operator", _set_label("tier", "gold"))]
    writes += [_updater(kube, path, new, f"operator-{n:02d}", _set_data(f"key-{n:02d}", str(n))) for n in range(CROWD)]
    await _at_intervals(writes, 1.0)  # (a second apart: the API server merges the oldest first, by entry time)
    tier = _updater(kube, path, new, "tier-operator", _set_label("tier", "gold"))
    team_b = _updater(kube, path, new, "team-b-operator", _set_label("tier", "silver"))
    await _at_intervals([team_b, tier] * 3, STEP)


async def fight_before_first_apply(api_client: ApiClient) -> None:
    """An object from before server-side apply: `legacy-operator` created ConfigMap `legacy` and a migration reset its
    managedFields (an update with `managedFields: [{}]`). The first server-side apply of `gitops-sync` gives every
    field it finds to a manager called `before-first-apply`; then gitops-sync (Apply) and legacy-operator (Update)
    flip `data.mode`."""
    ns = "fight-before-first-apply"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "legacy")
    await kube.ensure(
        CONFIGMAPS.path(ns), new() | {"data": {"mode": "manual", "retries": "3"}}, manager="legacy-operator"
    )

    def reset(obj: JSON) -> None:
        obj["metadata"]["managedFields"] = [{}]

    await kube.read_modify_write(path, reset, manager="fieldmanager-reset")
    gitops = _applier(kube, path, "gitops-sync", new() | {"data": {"mode": "auto"}})
    legacy = _updater(kube, path, new, "legacy-operator", _set_data("mode", "manual"))
    await _at_intervals([gitops, legacy] * 3, STEP)


# --------------------------------------------------------------------------------------------------------
# benign


async def benign_different_fields(api_client: ApiClient) -> None:
    ns = "benign-different-fields"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "app")
    writes: list[Write] = []
    for n in range(1, 4):
        writes.append(_updater(kube, path, new, "app-config", _set_data("a", str(n))))
        writes.append(_updater(kube, path, new, "labeler", _set_label("env", f"env-{n}")))
    await _at_intervals(writes, STEP)


async def benign_status_vs_spec(api_client: ApiClient, *, kubectl: Kubectl, period: float = 5.0) -> None:
    """A user creates a Deployment and edits its image 3 times with `kubectl edit`; kube-controller-manager writes
    status and ReplicaSets."""
    ns = "benign-status-vs-spec"
    kube = await _in_namespace(api_client, ns)
    manifest = _manifest(manifests.deployment(ns, "frontend", replicas=1, image="nginx:1.19.0"))
    await kubectl("create", "-f", "-", stdin=manifest.encode())
    path = DEPLOYMENTS.path(ns, "frontend")
    edits: list[Write] = [
        functools.partial(
            kubectl, "edit", "deployment/frontend", "-n", ns, editor=f"sed -i -e 's/nginx:{old}$/nginx:{new}/'"
        )
        for old, new in (("1.19.0", "1.19.1"), ("1.19.1", "1.19.2"), ("1.19.2", "1.19.3"))
    ]
    await _at_intervals([_noop, *edits], period)
    # The controller's reaction is part of the scenario: wait until it has seen the last edit.
    give_up = time.monotonic() + READY_DEADLINE
    while True:
        obj = await kube.get(path)
        if (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]:
            return
        if time.monotonic() > give_up:
            raise RuntimeError(
                f"{ns}/frontend: the deployment controller never observed generation "
                f"{obj['metadata']['generation']} (is kube-controller-manager running?)"
            )
        await asyncio.sleep(POLL_INTERVAL)


async def _noop() -> None:
    return None


async def benign_one_correction(api_client: ApiClient, *, kubectl: Kubectl) -> None:
    """An operator sets a label, someone changes it with `kubectl edit`, the operator sets it back once; then
    silence."""
    ns = "benign-one-correction"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "ownership")
    operator = _updater(kube, path, new, "owner-operator", _set_label("owner", "platform"))
    human = functools.partial(
        kubectl, "edit", "configmap/ownership", "-n", ns, editor="sed -i -e 's/owner: platform/owner: team-b/'"
    )
    await _at_intervals([operator, human, operator], STEP)


async def benign_normal_rate(api_client: ApiClient, *, period: float = 3.0) -> None:
    ns = "benign-normal-rate"
    kube = await _in_namespace(api_client, ns)
    path, new = _configmap_at(ns, "release")
    writes = [_updater(kube, path, new, "deployer", _set_data("version", f"1.0.{n}")) for n in range(1, 9)]
    await _at_intervals(writes, period)


async def benign_leader_election(api_client: ApiClient, *, period: float = 1.0, duration: float = 15.0) -> None:
    """A coordination.k8s.io Lease and an old-style ConfigMap lock, each renewed every second."""
    ns = "benign-leader-election"
    kube = await _in_namespace(api_client, ns)
    holder = "example-controller-7d9f8b6c5-x2x4q"
    acquired_micro = rfc3339_now(digits=6)
    acquired = rfc3339_now(digits=0)

    def new_lease() -> JSON:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "example-controller", "namespace": ns},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 15,
                "acquireTime": acquired_micro,
                "leaseTransitions": 0,
            },
        }

    def renew_lease(obj: JSON) -> None:
        obj["spec"]["renewTime"] = rfc3339_now(digits=6)

    def renew_lock(obj: JSON) -> None:
        record = {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": acquired,
            "renewTime": rfc3339_now(digits=0),
            "leaderTransitions": 0,
        }
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations["control-plane.alpha.kubernetes.io/leader"] = orjson.dumps(record).decode()

    lease = _updater(kube, LEASES.path(ns, "example-controller"), new_lease, "leader-elector", renew_lease)
    lock = _updater(kube, *_configmap_at(ns, "example-controller-lock"), "old-elector", renew_lock)
    async with asyncio.TaskGroup() as group:
        group.create_task(_for_duration(lease, period=period, duration=duration))
        group.create_task(_for_duration(lock, period=period, duration=duration))


# --------------------------------------------------------------------------------------------------------
# incidents: one root cause on many objects, in several namespaces (`<scenario>-a`, `<scenario>-b`, ...)

INCIDENT_REPLICAS_OBJECTS = {
    "incident-replicas-a": ("web", "api"),
    "incident-replicas-b": ("cart", "search"),
    "incident-replicas-c": ("auth", "pay"),
}
INCIDENT_HOT_LOOP_OBJECTS = {
    "incident-hot-loop-a": ("cog", "gear"),
    "incident-hot-loop-b": ("rotor", "spindle"),
}


async def incident_replicas(api_client: ApiClient) -> None:
    """fight-apply-vs-update-replicas on 6 Deployments in 3 namespaces, by the same two writers.

    Each Deployment gets Apply gitops-sync 2 / Update replica-autoscaler 5, x3, STEP seconds apart; the writes to
    the 6 interleave (one every STEP / 6 seconds, Deployment after Deployment).
    """
    kube = Kube(api_client)
    for ns in INCIDENT_REPLICAS_OBJECTS:
        await ensure_namespace(kube, ns)

    def replicas(count: int) -> Mutation:
        def mutate(obj: JSON) -> None:
            obj["spec"]["replicas"] = count

        return mutate

    rounds: list[list[Write]] = [[], []]
    for ns, names in INCIDENT_REPLICAS_OBJECTS.items():
        for name in names:
            path = DEPLOYMENTS.path(ns, name)
            rounds[0].append(_applier(kube, path, "gitops-sync", manifests.deployment(ns, name, replicas=2)))
            rounds[1].append(functools.partial(kube.read_modify_write, path, replicas(5), manager="replica-autoscaler"))
    await _at_intervals((rounds[0] + rounds[1]) * 3, STEP / len(rounds[0]))


async def incident_hot_loop(api_client: ApiClient, *, rate: float = 5.0, duration: float = 30.0) -> None:
    """hot-loop-timestamp on 4 Widgets in 2 namespaces: one controller, widget-reconciler, stamping the current time
    into each one's annotation `rate` times a second for `duration` seconds."""
    kube = Kube(api_client)
    for ns in INCIDENT_HOT_LOOP_OBJECTS:
        await ensure_namespace(kube, ns)
    await ensure_widget_crd(kube)
    stamp = _set_annotation("example.com/last-reconciled", functools.partial(rfc3339_now, digits=6))
    async with asyncio.TaskGroup() as group:
        for ns, names in INCIDENT_HOT_LOOP_OBJECTS.items():
            for name in names:
                new = functools.partial(_widget, ns, name)
                write = _updater(kube, WIDGETS.path(ns, name), new, "widget-reconciler", stamp)
                group.create_task(_for_duration(write, period=1.0 / rate, duration=duration))


CASCADE_OBJECTS = ("web", "api")  # Deployments in the namespace cascade-replicas


async def cascade_replicas(api_client: ApiClient, *, period: float = 1.0, flips: int = 40) -> None:
    """Deployments web and api spec.replicas fought over (Apply gitops-sync 1 / Update replica-autoscaler 3) every
    `period` seconds, `flips` times each: the real kube-controller-manager scales each one's ReplicaSet after every
    flip (spec.replicas, then its status), so the ReplicaSets are rewritten as fast as the fight goes on."""
    ns = "cascade-replicas"
    kube = await _in_namespace(api_client, ns)

    def replicas(count: int) -> Mutation:
        def mutate(obj: JSON) -> None:
            obj["spec"]["replicas"] = count

        return mutate

    writes: list[Write] = []
    for flip in range(flips):
        for name in CASCADE_OBJECTS:
            path = DEPLOYMENTS.path(ns, name)
            if flip % 2 == 0:
                writes.append(_applier(kube, path, "gitops-sync", manifests.deployment(ns, name, replicas=1)))
            else:
                writes.append(
                    functools.partial(kube.read_modify_write, path, replicas(3), manager="replica-autoscaler")
                )
    await _at_intervals(writes, period / len(CASCADE_OBJECTS))


# --------------------------------------------------------------------------------------------------------
# registry

Expectation = Literal["fight", "hot-loop", "benign"]


@dataclass(frozen=True)
class Scenario:
    name: str  # also the namespace it works in, unless `namespaces` names others
    run: ScenarioFn
    expect: Expectation
    summary: str
    needs_controller_manager: bool = False
    needs_kubectl: bool = False  # run with the release's real kubectl (`kubectl=` keyword)
    namespaces: tuple[str, ...] = ()  # the namespaces it works in, when not just the one named after it
    # Run only when named (record_captures.py --only), not with every scenario (SCENARIOS): its one root cause makes
    # a finding on each of several objects, where every scenario run together makes one finding per scenario.
    separate: bool = False


_ALL = [
    Scenario(
        "fight-apply-vs-update-replicas",
        fight_apply_vs_update_replicas,
        "fight",
        "Deployment web spec.replicas: Apply argocd-controller 2 / Update custom-autoscaler 5, x3",
    ),
    Scenario(
        "fight-update-vs-update-label",
        fight_update_vs_update_label,
        "fight",
        "ConfigMap settings label owner: Update team-a-operator / Update team-b-operator, x3",
    ),
    Scenario(
        "fight-apply-vs-apply-annotation",
        fight_apply_vs_apply_annotation,
        "fight",
        "ConfigMap app-config annotation example.com/config-hash: Apply flux-kustomize / Apply helm-controller, x3",
    ),
    Scenario(
        "fight-data",
        fight_data,
        "fight",
        "ConfigMap service-endpoints data.endpoint: Apply gitops-sync / Update config-injector, x3",
    ),
    Scenario(
        "fight-status",
        fight_status,
        "fight",
        "Widget gizmo status.phase via /status: Update widget-operator / Update legacy-widget-controller, x3",
        needs_kubectl=True,
    ),
    Scenario(
        "fight-cabundle",
        fight_cabundle,
        "fight",
        "ValidatingWebhookConfiguration fightwatch-test-validate caBundle: Apply helm / Update cainjector, x3",
    ),
    Scenario(
        "fight-three-writers",
        fight_three_writers,
        "fight",
        "ConfigMap placement label tier: Update alpha-, beta-, gamma-controller in turn, x3",
    ),
    Scenario(
        "fight-slow",
        fight_slow,
        "fight",
        "ConfigMap runtime-mode annotation example.com/mode: Apply argocd-controller / Update mode-operator, "
        "5 writes one slow period apart",
    ),
    Scenario(
        "fight-shared-manager",
        fight_shared_manager,
        "fight",
        "ConfigMap shared label owner: two Update writers both named `manager`, op-one / op-two, x3",
    ),
    Scenario(
        "fight-scale-vs-apply",
        fight_scale_vs_apply,
        "fight",
        "Deployment api spec.replicas: `kubectl apply` 3 / `kubectl scale --replicas=6` through the scale subresource "
        "(no managedFields entry before 1.22), x3",
        needs_kubectl=True,
    ),
    Scenario(
        "hot-loop-timestamp",
        hot_loop_timestamp,
        "hot-loop",
        "ConfigMap reconcile-state annotation example.com/last-reconciled: Update reconciler, 5/s for 30 s",
    ),
    Scenario(
        "hot-loop-status",
        hot_loop_status,
        "hot-loop",
        "Widget sprocket status.lastReconciled (+ unchanged phase, observedGeneration) via /status: "
        "Update widget-status-reconciler, 5/s for 30 s",
    ),
    Scenario(
        "benign-different-fields",
        benign_different_fields,
        "benign",
        "ConfigMap app: Update app-config data.a / Update labeler label env, new values each time, x3",
    ),
    Scenario(
        "benign-status-vs-spec",
        benign_status_vs_spec,
        "benign",
        "Deployment frontend: `kubectl create`, then `kubectl edit` of its image x3, 5 s apart; "
        "kube-controller-manager writes status, ReplicaSets",
        needs_controller_manager=True,
        needs_kubectl=True,
    ),
    Scenario(
        "benign-one-correction",
        benign_one_correction,
        "benign",
        "ConfigMap ownership label owner: owner-operator, `kubectl edit`, owner-operator once",
        needs_kubectl=True,
    ),
    Scenario(
        "benign-normal-rate",
        benign_normal_rate,
        "benign",
        "ConfigMap release data.version: Update deployer, 8 new values 3 s apart",
    ),
    Scenario(
        "benign-leader-election",
        benign_leader_election,
        "benign",
        "Lease example-controller (leader-elector) and ConfigMap lock annotation (old-elector) renewed 1/s for 15 s",
    ),
    Scenario(
        "fight-hpa-vs-apply",
        fight_hpa_vs_apply,
        "fight",
        "Deployment web spec.replicas: the real HorizontalPodAutoscaler (minReplicas 3, through the scale "
        "subresource, every 15 s) / `kubectl apply` of replicas 1 every 3 s, for 75 s",
        needs_controller_manager=True,
        needs_kubectl=True,
    ),
    Scenario(
        "benign-hpa-scaling",
        benign_hpa_scaling,
        "benign",
        "HPA api scales Deployment api (whose manifest leaves replicas alone); `kubectl patch` raises its minReplicas "
        "2 -> 3 -> 4, 20 s apart; the HPA's conditions change with its state",
        needs_controller_manager=True,
        needs_kubectl=True,
    ),
    Scenario(
        "hot-loop-rollout-restart",
        hot_loop_rollout_restart,
        "hot-loop",
        "Deployment app: `kubectl rollout restart` every 1.5 s for 45 s (kubectl-rollout, restartedAt); the deployment "
        "controller rewrites its status after each",
        needs_controller_manager=True,
        needs_kubectl=True,
    ),
    Scenario(
        "fight-ancient-changes",
        fight_ancient_changes,
        "fight",
        "ConfigMap crowded: 13 update managers (the oldest merged into `ancient-changes`), then label tier: Update "
        "team-b-operator / Update tier-operator, x3",
    ),
    Scenario(
        "fight-before-first-apply",
        fight_before_first_apply,
        "fight",
        "ConfigMap legacy, managedFields reset: Apply gitops-sync (its first apply: `before-first-apply`) / Update "
        "legacy-operator data.mode, x3",
    ),
    Scenario(
        "incident-replicas",
        incident_replicas,
        "fight",
        "Deployments web, api (-a), cart, search (-b), auth, pay (-c) spec.replicas: Apply gitops-sync 2 / Update "
        "replica-autoscaler 5, x3 each, the 6 interleaved: 6 fights, one incident",
        namespaces=tuple(INCIDENT_REPLICAS_OBJECTS),
        separate=True,
    ),
    Scenario(
        "incident-hot-loop",
        incident_hot_loop,
        "hot-loop",
        "Widgets cog, gear (-a), rotor, spindle (-b) annotation example.com/last-reconciled: Update "
        "widget-reconciler, 5/s each for 30 s: 4 hot loops, one incident",
        namespaces=tuple(INCIDENT_HOT_LOOP_OBJECTS),
        separate=True,
    ),
    Scenario(
        "cascade-replicas",
        cascade_replicas,
        "fight",
        "Deployments web, api spec.replicas: Apply gitops-sync 1 / Update replica-autoscaler 3, 40 flips each 1 s "
        "apart; kube-controller-manager rescales their ReplicaSets after each: 2 fights, 2 ReplicaSet hot loops "
        "following from them, one incident",
        needs_controller_manager=True,
        separate=True,
    ),
]

SCENARIO_INFO: dict[str, Scenario] = {s.name: s for s in _ALL}  # every scenario, the separate ones included
SCENARIOS: dict[str, ScenarioFn] = {s.name: s.run for s in _ALL if not s.separate}  # those run all together
# Namespace -> the scenario working in it.
NAMESPACE_OWNERS: dict[str, str] = {ns: s.name for s in _ALL for ns in s.namespaces or (s.name,)}

# Cluster-scoped objects written by a scenario: (kind, name) -> scenario.
CLUSTER_OBJECT_OWNERS: dict[tuple[str, str], str] = {
    ("ValidatingWebhookConfiguration", WEBHOOK_CONFIG_NAME): "fight-cabundle",
}


def scenario_of(obj: JSON) -> str | None:
    """The scenario an object belongs to (by namespace, NAMESPACE_OWNERS, or CLUSTER_OBJECT_OWNERS), or None."""
    metadata = obj.get("metadata", {})
    namespace = metadata.get("namespace")
    if namespace:
        return NAMESPACE_OWNERS.get(namespace)
    return CLUSTER_OBJECT_OWNERS.get((obj.get("kind", ""), metadata.get("name", "")))


async def run_scenario(
    api_client: ApiClient, name: str, *, slow_period: float = SLOW_PERIOD, kubectl: Kubectl | None = None
) -> None:
    info = SCENARIO_INFO[name]
    options: dict[str, Any] = {"period": slow_period} if name == "fight-slow" else {}
    if info.needs_kubectl:
        if kubectl is None:
            raise ValueError(f"scenario {name} runs the real kubectl: pass kubectl=Kubectl(...)")
        options["kubectl"] = kubectl
    await info.run(api_client, **options)


async def run_scenarios(
    api_client: ApiClient,
    names: Iterable[str] | None = None,
    *,
    slow_period: float = SLOW_PERIOD,
    kubectl: Kubectl | None = None,
) -> None:
    """Run the named scenarios (default: all but the separate ones) concurrently; the first failure cancels the rest
    and raises. `kubectl`: the release's kubectl, for the scenarios that run it (`Scenario.needs_kubectl`)."""
    selected = list(names) if names is not None else list(SCENARIOS)
    unknown = sorted(set(selected) - set(SCENARIO_INFO))
    if unknown:
        raise KeyError(f"unknown scenarios {unknown}; known: {sorted(SCENARIO_INFO)}")
    async with asyncio.TaskGroup() as group:
        for name in selected:
            group.create_task(run_scenario(api_client, name, slow_period=slow_period, kubectl=kubectl), name=name)
