"""Scenarios of API requests for the audit analysis: real clients, each with an identity (a ServiceAccount with a
token bound to a Pod of its own: `identities.py`) and a User-Agent of its own, racing over objects the way
controllers do, and the real kube-controller-manager where a scenario needs it. Each scenario runs in namespaces of
its own, once per audit level (see `VARIANTS`).

- `rmw-fight`: two controllers with stale reads rewrite ConfigMap `settings` whole (update), each setting
  `data.mode` to its own value: a fight, whose failed half is a conflict storm.
- `storm-fields`: two controllers update different fields of ConfigMap `app` (a label, an annotation) from
  stale reads; one retries with the same stale copy before re-reading: conflicts, no field changes hands.
- `apply-stuck`: Helm owns `data.mode` of ConfigMap `flags` (an update); `kubectl apply --server-side` (the real
  kubectl) sets another value without `--force-conflicts`, and is rejected every time.
- `scale-fight`: Helm applies `spec.replicas: 2` to Deployment `web` (with force) and an autoscaler sets 5 through
  the `scale` subresource, in turns: a fight over `spec.replicas`. Kubernetes v1.20 recorded no managedFields entry
  for the autoscaler's writes (only the audit events told who it was); current releases record it with
  `subresource: scale`.
- `hpa-fight`: the real HorizontalPodAutoscaler of kube-controller-manager (minReplicas 3) against `kubectl apply`
  of a Deployment manifest with `replicas: 1` every 3 s: every HPA sync (15 s) scales `web` up through the `scale`
  subresource, the next apply down. The HPA writes as field manager `kube-controller-manager`, as does the
  deployment controller (the Deployment's status), each with its own service account.
- `cascade`: the GitOps controller and the labeler fight over `data.mode` of ConfigMap `app`; a renderer, the
  controller of ConfigMap `app-rendered` (its ownerReference), re-renders it on every change from a copy read
  before a sidecar annotated it: its conflicts follow from the fight upstream.
- `shared-manager`: two operators that both write as field manager `manager` (kubebuilder's default) flip a label
  of ConfigMap `shared`: the watch sees one manager undoing its own writes; the audit events tell the two users.
- `noop-loop`: a sync controller rewrites ConfigMap `cache` with the very object it read (once: it writes its
  cached copy, as a controller that reads from its informer's cache): nothing changes.
- `benign`: traffic that must not be reported: a few conflicts each retried once, a job labelling many
  ConfigMaps once, two writers on objects of their own, and a Secret written by Helm (its value must not leak).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import orjson
from kubernetes_asyncio.client import ApiClient

from . import manifests
from .control_plane import ADMIN_USER, RELEASES, ControlPlane, default_release, start_control_plane
from .identities import Identity, provision
from .kube import CONFIGMAPS, DEPLOYMENTS, JSON, ROLE_BINDINGS, ROLES, SECRETS, ApiError, Kube, new_api_client
from .kubectl import Kubectl, KubectlError
from .recorder import Recorder

HARNESS_MANAGER = "fightwatch-harness"
# A scenario runs in one namespace per audit level: its name (Metadata), NAME-full (RequestResponse) and NAME-omf
# (RequestResponse with omitManagedFields: bodies without their managedFields). The fixtures' file name for each.
FULL_SUFFIX = "-full"
OMIT_SUFFIX = "-omf"
VARIANTS = {"": "metadata", FULL_SUFFIX: "request-response", OMIT_SUFFIX: "omit-managed-fields"}
# A value that no output of fightwatch may hold (the Secret of `benign`), plain or base64-encoded.
SECRET_VALUE = "s3cr3t-fixture-value-5d1e9b"  # noqa: S105 - a test value, there to be looked for
END_MARKER = "end-of-recording"
HPA_FIGHT_SECONDS = 75.0  # kubectl apply every 3 s against the HPA's syncs every 15 s: five of them


GITOPS = Identity(
    "argocd", "argocd-application-controller", "argocd-application-controller-0", "argocd-application-controller/v2.9.3"
)
LABELER = Identity("ops", "labeler", "labeler-6d9c7f5b4-qx2lp", "labeler/0.3.1 (linux/amd64)")
ANNOTATOR = Identity("ops", "annotator", "annotator-5f8b6c9d7-m4tzr", "annotator/1.2.0")
HELM = Identity("ci", "helm", "helm-upgrade-28340515-7zq9x", "Helm/3.13.2")
DEPLOYER = Identity("ci", "deployer", "deploy-pipeline-28340520-4k7xp")  # the release's kubectl, its own User-Agent
SYNC = Identity("ops", "settings-sync", "settings-sync-7b5d8c6f9-w2vjn", "settings-sync/2.0.0")
JOB = Identity("ops", "relabel-job", "relabel-job-28340510-5x2kq", "relabel-job/1.0")
AUTOSCALER = Identity(
    "autoscaling", "custom-autoscaler", "custom-autoscaler-6c7d8b9f5-h3nqv", "custom-autoscaler/1.6.0 (linux/amd64)"
)
RENDERER = Identity("ops", "app-renderer", "app-renderer-58f9d6c7b-r8wxt", "app-renderer/0.4.0")
IDENTITIES = (GITOPS, LABELER, ANNOTATOR, HELM, DEPLOYER, SYNC, JOB, AUTOSCALER, RENDERER)
# kube-controller-manager's controllers (--use-service-account-credentials): each its own service account
HPA_CONTROLLER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
DEPLOYMENT_CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"


@dataclass(frozen=True)
class Clients:
    """The scenarios' clients: one API client per identity, and the release's kubectl as `DEPLOYER`."""

    apis: dict[Identity, Kube]
    kubectl: Kubectl

    def __getitem__(self, identity: Identity) -> Kube:
        return self.apis[identity]


Scenario = Callable[[Clients, str], Awaitable[None]]


def tested_releases() -> list[str]:
    """The releases the live audit tests run on: both pinned ones, or only the oldest when $FIGHTWATCH_KUBERNETES
    asks for it."""
    return ["oldest"] if default_release() == "oldest" else list(RELEASES)


def namespaces(names: Sequence[str]) -> list[str]:
    return [name + suffix for name in names for suffix in VARIANTS]


def policy(names: Sequence[str]) -> JSON:
    """An audit policy: the scenarios' `-full` namespaces at RequestResponse level, their `-omf` namespaces at
    RequestResponse level without managedFields, everything else at Metadata."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "RequestResponse", "namespaces": [n + FULL_SUFFIX for n in names]},
            {"level": "RequestResponse", "namespaces": [n + OMIT_SUFFIX for n in names], "omitManagedFields": True},
            {"level": "Metadata"},
        ],
    }


async def grant(admin: Kube, names: Sequence[str]) -> None:
    """The scenarios' namespaces, with every identity's ServiceAccount allowed to write ConfigMaps, Secrets,
    Deployments and HorizontalPodAutoscalers there."""
    for ns in namespaces(names):
        await admin.ensure_namespace(ns)
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "writer", "namespace": ns},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["*"]},
                {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"], "verbs": ["*"]},
                {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["*"]},
            ],
        }
        await admin.ensure(ROLES.path(ns), role, manager=HARNESS_MANAGER)
        subjects = [{"kind": "ServiceAccount", "name": i.name, "namespace": i.namespace} for i in IDENTITIES]
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "writers", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
            "subjects": subjects,
        }
        await admin.ensure(ROLE_BINDINGS.path(ns), binding, manager=HARNESS_MANAGER)


def _configmap(ns: str, name: str, data: dict[str, str] | None = None) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data or {}}


async def _create(kube: Kube, ns: str, name: str, data: dict[str, str]) -> str:
    """POST a ConfigMap without a fieldManager (the API server derives it from the User-Agent); return its path."""
    await kube.request("POST", CONFIGMAPS.path(ns), body=_configmap(ns, name, data))
    return CONFIGMAPS.path(ns, name)


async def _update(kube: Kube, path: str, obj: JSON) -> bool:
    """PUT without a fieldManager (the API server derives it from the User-Agent); False on 409 Conflict."""
    try:
        await kube.request("PUT", path, body=obj)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return False
    return True


async def rmw_fight(clients: Clients, ns: str) -> None:
    gitops, labeler = clients[GITOPS], clients[LABELER]
    path = await _create(labeler, ns, "settings", {"mode": "b"})
    for _ in range(12):
        mine, stale = await gitops.get(path), await labeler.get(path)
        mine["data"]["mode"], stale["data"]["mode"] = "a", "b"
        assert await _update(gitops, path, mine)
        assert not await _update(labeler, path, stale)  # read before gitops wrote: 409
        fresh = await labeler.get(path)
        fresh["data"]["mode"] = "b"
        assert await _update(labeler, path, fresh)


async def storm_fields(clients: Clients, ns: str) -> None:
    labeler, annotator = clients[LABELER], clients[ANNOTATOR]
    path = await _create(labeler, ns, "app", {"k": "v"})
    for round_ in range(15):
        mine, theirs = await labeler.get(path), await annotator.get(path)
        mine["metadata"].setdefault("labels", {})["revision"] = str(round_)
        theirs["metadata"].setdefault("annotations", {})["checked"] = str(round_)
        assert await _update(labeler, path, mine)
        attempts = 0
        while not await _update(annotator, path, theirs):
            attempts += 1
            if attempts >= 2:  # a stale cache: the same copy sent twice before reading again
                theirs = await annotator.get(path)
                theirs["metadata"].setdefault("annotations", {})["checked"] = str(round_)


async def apply_stuck(clients: Clients, ns: str) -> None:
    await clients[HELM].create(CONFIGMAPS.path(ns), _configmap(ns, "flags", {"mode": "blue"}), manager="helm")
    manifest = orjson.dumps(_configmap(ns, "flags", {"mode": "green"})).decode()
    for _ in range(6):
        try:
            await clients.kubectl.apply(manifest, "--server-side")  # field manager `kubectl`, without force
        except KubectlError as exc:
            if "conflict" not in str(exc):
                raise
        else:
            raise AssertionError("the apply without --force-conflicts was expected to conflict")


async def scale_fight(clients: Clients, ns: str) -> None:
    helm, autoscaler = clients[HELM], clients[AUTOSCALER]
    path = DEPLOYMENTS.path(ns, "web")
    manifest = manifests.deployment(ns, "web", replicas=2, image="nginx")
    for _ in range(6):
        await helm.apply(path, manifest, manager="helm", force=True)
        while True:  # (as client-go's RetryOnConflict: the deployment controller may write the status in between)
            scale = await autoscaler.get(path + "/scale")
            scale["spec"]["replicas"] = 5
            if await _update(autoscaler, path + "/scale", scale):
                break


async def hpa_fight(clients: Clients, ns: str, *, period: float = 3.0) -> None:
    """`kubectl apply` of Deployment `web` with `replicas: 1` every `period` seconds for `HPA_FIGHT_SECONDS`, against
    the HorizontalPodAutoscaler of kube-controller-manager with minReplicas 3. Without a metrics API (none runs) the
    HPA computes no recommendation, yet enforces its bounds: each sync scales the Deployment up to 3."""
    manifest = orjson.dumps(manifests.deployment(ns, "web", replicas=1, image="nginx")).decode()
    await clients.kubectl.apply(manifest)
    metric = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 3,
            "maxReplicas": 5,
            "metrics": [metric],
        },
    }
    await clients.kubectl.apply(orjson.dumps(hpa).decode())
    loop = asyncio.get_running_loop()
    start = loop.time()
    applied = 0
    while (due := start + applied * period) < start + HPA_FIGHT_SECONDS:  # a fixed schedule, as a pipeline's
        await asyncio.sleep(max(0.0, due - loop.time()))
        await clients.kubectl.apply(manifest)
        applied += 1


async def cascade(clients: Clients, ns: str) -> None:
    gitops, labeler, renderer, sidecar = clients[GITOPS], clients[LABELER], clients[RENDERER], clients[ANNOTATOR]
    parent_path, child_path = CONFIGMAPS.path(ns, "app"), CONFIGMAPS.path(ns, "app-rendered")
    parent = await labeler.request("POST", CONFIGMAPS.path(ns), body=_configmap(ns, "app", {"mode": "b"}))
    child = _configmap(ns, "app-rendered", {"mode": "b"})
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "app",
        "uid": parent["metadata"]["uid"],
        "controller": True,
    }
    child["metadata"]["ownerReferences"] = [owner]
    await renderer.request("POST", CONFIGMAPS.path(ns), body=child)
    for round_ in range(12):
        who, value = (gitops, "a") if round_ % 2 == 0 else (labeler, "b")
        current = await who.get(parent_path)
        current["data"]["mode"] = value
        assert await _update(who, parent_path, current)  # the fight upstream
        cached = await renderer.get(child_path)
        noted = await sidecar.get(child_path)
        noted["metadata"].setdefault("annotations", {})["seen"] = str(round_)
        assert await _update(sidecar, child_path, noted)
        cached["data"]["mode"] = value
        if not await _update(renderer, child_path, cached):  # re-rendered from a copy read before the sidecar wrote
            fresh = await renderer.get(child_path)
            fresh["data"]["mode"] = value
            assert await _update(renderer, child_path, fresh)


async def shared_manager(clients: Clients, ns: str) -> None:
    first, second = clients[LABELER], clients[ANNOTATOR]
    path = CONFIGMAPS.path(ns, "shared")
    await first.create(CONFIGMAPS.path(ns), _configmap(ns, "shared", {"k": "v"}), manager="manager")
    for round_ in range(8):
        who, value = (first, "blue") if round_ % 2 == 0 else (second, "green")
        current = await who.get(path)
        current["metadata"].setdefault("labels", {})["tier"] = value
        await who.replace(path, current, manager="manager")


async def noop_loop(clients: Clients, ns: str) -> None:
    sync = clients[SYNC]
    path = await _create(sync, ns, "cache", {"ttl": "60"})
    # (no read between the writes: on a busy machine each request waits its turn among every scenario's, and the
    # no-op writes must still come at the rate of a loop, `noop_writes.min_writes_per_minute`)
    cached = await sync.get(path)
    for _ in range(15):
        await sync.request("PUT", path, body=cached)


async def benign(clients: Clients, ns: str) -> None:
    gitops, labeler, helm, job = clients[GITOPS], clients[LABELER], clients[HELM], clients[JOB]
    # a few conflicts, each retried once with a fresh read
    path = await _create(gitops, ns, "shared", {"a": "0", "b": "0"})
    for round_ in range(3):
        mine, theirs = await gitops.get(path), await labeler.get(path)
        mine["data"]["a"], theirs["data"]["b"] = str(round_), str(round_)
        assert await _update(gitops, path, mine)
        if not await _update(labeler, path, theirs):
            fresh = await labeler.get(path)
            fresh["data"]["b"] = str(round_)
            assert await _update(labeler, path, fresh)
    # a job labelling many objects once
    for index in range(20):
        await _create(job, ns, f"batch-{index}", {"i": str(index)})
    for index in range(20):
        await job.merge_patch(
            CONFIGMAPS.path(ns, f"batch-{index}"),
            {"metadata": {"labels": {"relabelled": "yes"}}},
            manager="relabel-job",
        )
    # two writers on objects of their own
    for who, name in ((gitops, "own-a"), (labeler, "own-b")):
        await _create(who, ns, name, {"n": "0"})
    for n in range(1, 11):
        for who, name in ((gitops, "own-a"), (labeler, "own-b")):
            await who.merge_patch(CONFIGMAPS.path(ns, name), {"data": {"n": str(n)}}, manager="own")
    # a Secret: its value is in the RequestResponse log, and must be nowhere else
    secret: JSON = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "credentials", "namespace": ns},
        "data": {"password": base64.b64encode(SECRET_VALUE.encode()).decode()},
    }
    await helm.create(SECRETS.path(ns), secret, manager="helm")
    secret["data"]["token"] = secret["data"]["password"]
    await helm.apply(SECRETS.path(ns, "credentials"), secret, manager="helm", force=True)


SCENARIOS: dict[str, Scenario] = {
    "rmw-fight": rmw_fight,
    "storm-fields": storm_fields,
    "apply-stuck": apply_stuck,
    "scale-fight": scale_fight,
    "hpa-fight": hpa_fight,
    "cascade": cascade,
    "shared-manager": shared_manager,
    "noop-loop": noop_loop,
    "benign": benign,
}


CONTROLLER_SCENARIOS = frozenset({"hpa-fight"})  # need kube-controller-manager running


async def run(clients: Clients, names: Sequence[str]) -> None:
    """Each scenario in each of its namespaces, all at once."""
    await asyncio.gather(*(SCENARIOS[name](clients, name + suffix) for name in names for suffix in VARIANTS))


def start(
    workdir: Path, names: Sequence[str], *, audit_webhook: Path | None = None, release: str | None = None
) -> ControlPlane:
    """A control plane of `release` (default: `control_plane.default_release()`) for the scenarios: the audit log
    backend with their `policy`, the webhook backend too when `audit_webhook` names its kubeconfig, and
    kube-controller-manager when a scenario needs it (it then acts everywhere, as in a cluster: the deployment
    controller writes every Deployment's status, each namespace gets its `kube-root-ca.crt` ConfigMap)."""
    cp = start_control_plane(workdir, audit_policy=policy(names), audit_webhook=audit_webhook, release=release)
    try:
        if CONTROLLER_SCENARIOS.intersection(names):
            cp.start_controller_manager()
    except BaseException:
        cp.stop()
        raise
    return cp


def start_each(
    workdirs: Mapping[str, Path], names: Sequence[str], *, audit_webhooks: Mapping[str, Path] | None = None
) -> dict[str, ControlPlane]:
    """Start a control plane for the scenarios per release (`start`), each in its workdir, all at once.

    If one fails to start, those that started are stopped before the error is raised.
    """
    hooks = audit_webhooks or {}
    with ThreadPoolExecutor(max_workers=len(workdirs) or 1) as pool:
        futures = {
            release: pool.submit(start, workdir, names, audit_webhook=hooks.get(release), release=release)
            for release, workdir in workdirs.items()
        }
        wait(futures.values())
    errors = [error for f in futures.values() if (error := f.exception()) is not None]
    started = {release: f.result() for release, f in futures.items() if f.exception() is None}
    if errors:
        for cp in started.values():
            cp.stop()
        raise errors[0]
    return started


async def connect(cp: ControlPlane) -> tuple[Kube, Clients, list[ApiClient]]:
    """An admin client, and per identity its ServiceAccount, Pod and a token bound to the Pod: an API client with
    that token and the identity's User-Agent, and for `DEPLOYER` the release's kubectl. Close the ApiClients after."""
    made: list[ApiClient] = []
    admin = Kube(await new_api_client(cp.kubeconfig))
    made.append(admin.api_client)
    tokens = await provision(admin, IDENTITIES)
    apis: dict[Identity, Kube] = {}
    kubectl = None
    for identity in IDENTITIES:
        kubeconfig = cp.kubeconfig_with_token(identity.user, tokens[identity])
        if not identity.user_agent:
            kubectl = Kubectl(cp.kubectl, kubeconfig)
            continue
        api_client = await new_api_client(kubeconfig)
        api_client.user_agent = identity.user_agent
        made.append(api_client)
        apis[identity] = Kube(api_client)
    assert kubectl is not None
    return admin, Clients(apis, kubectl), made


async def record(cp: ControlPlane, names: Sequence[str]) -> tuple[list[JSON], JSON]:
    """Run the scenarios with a Recorder watching ConfigMaps and Deployments; return its watch events and the
    server's /version. Read the audit events from `cp.audit_log` after `wait_for_log`."""
    made: list[ApiClient] = []
    try:
        admin, clients, made = await connect(cp)
        watcher_client = await new_api_client(cp.kubeconfig)
        made.append(watcher_client)
        version = await admin.get("/version")
        await grant(admin, names)
        async with Recorder(watcher_client, (CONFIGMAPS, DEPLOYMENTS)) as recorder:
            await run(clients, names)
            await recorder.sync()
        await admin.create(CONFIGMAPS.path(names[0]), _configmap(names[0], END_MARKER), manager=HARNESS_MANAGER)
        return recorder.events, version
    finally:
        for api_client in made:
            await api_client.close()


def wait_for_log(log: Path, names: Sequence[str], *, deadline: float = 30.0) -> list[bytes]:
    """The audit log's lines once it holds the end marker `record` writes last (the log backend writes an event
    when its request completes, which can be after the client has its answer)."""
    return wait_for_marker(log, f'"namespace":"{names[0]}","name":"{END_MARKER}"'.encode(), deadline=deadline)


def wait_for_marker(log: Path, needle: bytes, *, deadline: float = 30.0) -> list[bytes]:
    """The audit log's lines once one of them holds `needle` (the event of the request a recording makes last)."""
    give_up = time.monotonic() + deadline
    while True:
        data = log.read_bytes() if log.exists() else b""
        if needle in data:
            return data.splitlines()
        if time.monotonic() > give_up:
            raise TimeoutError(f"{log}: the end marker was not logged within {deadline:g}s")
        time.sleep(0.05)  # poll interval while the log catches up, not a readiness guess


def scenario_lines(lines: Sequence[bytes], namespace: str) -> list[bytes]:
    """The log's events in one namespace of every user but the harness's admin (who makes the namespace, grants and
    records): the scenario's clients, and kube-controller-manager's controllers where it runs."""
    out = []
    for line in lines:
        event = orjson.loads(line)
        ref = event.get("objectRef") or {}
        if ref.get("namespace") == namespace and (event.get("user") or {}).get("username") != ADMIN_USER:
            out.append(line)
    return out
