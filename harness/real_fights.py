"""Fights and benign patterns of real clusters, played by real programs on a `stage.Stage`.

Each scenario works in a namespace named after it (and names the cluster-scoped objects it makes `<scenario>-...`),
so that all of them run at once on one control plane and each one's watch and audit events can be told apart. The
writers are real programs: cert-manager's cainjector, Flux's kustomize-controller, kube-controller-manager's
controllers, Helm 3 (client-side three-way merge), Helm 4 (server-side apply), the release's kubectl and curl, each as
an identity of its own (`stage.py`). What the harness does itself is set the stage as the admin: namespaces, a CA
Secret, the artifacts a Flux source serves, the objects the fight is about before it starts.

Fights (`FIGHTS`) and benign patterns (`BENIGN`) are listed with what a platform engineer should be told; the
recordings' tests check fightwatch against these (tests/unit/test_real_fights.py).
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from . import manifests
from .kube import CONFIGMAPS, DEPLOYMENTS, ENDPOINT_SLICES, JSON, REPLICASETS, SECRETS, ApiError
from .kubectl import KubectlError
from .stage import HARNESS_MANAGER, LEGACY, PERSON, SCRIPT, SYNC, Stage, self_signed_ca, until

FLUX_INTERVAL = "10s"
ROUNDS = 10  # rounds of a client's loop against a controller
PERIOD = 6.0  # seconds between two of a client's rounds
WAIT = 60.0  # seconds for what a scenario waits for (a controller's object, an injection)


@dataclass(frozen=True)
class Scenario:
    play: Callable[[Stage, str], Awaitable[None]]
    what: str  # what happens, for the fixtures' README
    fight: bool  # a fight to report, else a benign pattern


async def every(period: float, rounds: int, action: Callable[[int], Awaitable[object]]) -> None:
    """Run `action(round)` on a fixed schedule, `period` seconds apart, as a CronJob or a pipeline's loop would."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for round_ in range(rounds):
        await asyncio.sleep(max(0.0, start + round_ * period - loop.time()))
        await action(round_)


async def namespace(stage: Stage, name: str) -> None:
    await stage.admin.ensure_namespace(name, manager=HARNESS_MANAGER)


# ------------------------------------------------------------------------------------------------------- charts


def write_chart(root: Path, name: str, templates: dict[str, str], values: JSON) -> Path:
    """A Helm chart directory, as a team keeps one in its repository."""
    chart = root / name
    (chart / "templates").mkdir(parents=True, exist_ok=True)
    (chart / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": name, "version": "0.1.0"}))
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    for file, text in templates.items():
        (chart / "templates" / file).write_text(text)
    return chart


WEBHOOK_TEMPLATE = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {{ .Release.Namespace }}-validate
  annotations:
    cert-manager.io/inject-ca-from-secret: {{ .Release.Namespace }}/webhook-ca
webhooks:
  - name: validate.{{ .Release.Namespace }}.example.com
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Ignore
    clientConfig:
      service:
        name: webhook
        namespace: {{ .Release.Namespace }}
        path: /validate
      caBundle: {{ .Values.caBundle | quote }}
    objectSelector:
      matchLabels:
        {{ .Release.Namespace }}.example.com/validated: "true"
    rules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["configmaps"]
"""
SERVICE_TEMPLATE = """\
apiVersion: v1
kind: Service
metadata:
  name: webhook
spec:
  selector:
    app: webhook
  ports:
    - port: 443
      targetPort: 8443
"""
# A Deployment that always sets replicas (the mistake), and one that leaves them to the autoscaler as `helm create`'s
# template does (`{{- if not .Values.autoscaling.enabled }}`).
WEB_TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  {{- if or .Values.pinReplicas (not .Values.autoscaling.enabled) }}
  replicas: {{ .Values.replicaCount }}
  {{- end }}
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: nginx:1.27.3
"""
HPA_TEMPLATE = """\
{{- if .Values.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: web
  minReplicas: {{ .Values.autoscaling.minReplicas }}
  maxReplicas: {{ .Values.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: 80
{{- end }}
"""


def charts(root: Path) -> dict[str, Path]:
    webhook = write_chart(
        root, "webhook", {"webhook.yaml": WEBHOOK_TEMPLATE, "service.yaml": SERVICE_TEMPLATE}, {"caBundle": ""}
    )
    values = {
        "replicaCount": 1,
        "pinReplicas": False,
        "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 5},
    }
    web = write_chart(root, "web", {"deployment.yaml": WEB_TEMPLATE, "hpa.yaml": HPA_TEMPLATE}, values)
    return {"webhook": webhook, "web": web}


async def ca_secret(stage: Stage, ns: str) -> None:
    """The CA Secret the webhook's annotation names, as an issuer would have made it, allowed for direct injection."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "webhook-ca",
            "namespace": ns,
            "annotations": {"cert-manager.io/allow-direct-injection": "true"},
        },
        "stringData": {"ca.crt": self_signed_ca(stage.workdir, f"{ns}-ca")},
    }
    await stage.admin.ensure(SECRETS.path(ns), secret, manager=HARNESS_MANAGER)


async def helm_release(stage: Stage, major: int, release: str, chart: str, ns: str, *flags: str) -> str:
    return await stage.helm(
        major, "upgrade", "--install", release, str(stage.workdir / "charts" / chart), "-n", ns, "--wait=false", *flags
    )


# ------------------------------------------------------------------------------------------------------- fights


async def cainjector_helm3(stage: Stage, ns: str) -> None:
    """A CI job re-runs `helm upgrade --install` of a chart whose webhook sets `caBundle: ""`; the cainjector injects
    the CA after every upgrade, the next upgrade's three-way merge removes it again."""
    await namespace(stage, ns)
    await ca_secret(stage, ns)
    await every(PERIOD, ROUNDS, lambda _: helm_release(stage, 3, "webhook", "webhook", ns))


async def cainjector_helm4(stage: Stage, ns: str) -> None:
    """The same with Helm 4, which installs and upgrades with server-side apply (field manager `helm`); the chart's
    empty caBundle is applied with `--force-conflicts`, as a pipeline that must not fail on conflicts runs it."""
    await namespace(stage, ns)
    await ca_secret(stage, ns)
    flags = ("--server-side=true", "--force-conflicts")
    await every(PERIOD, ROUNDS, lambda _: helm_release(stage, 4, "webhook", "webhook", ns, *flags))


async def helm4_apply_conflict(stage: Stage, ns: str) -> None:
    """Helm 4's server-side upgrade without `--force-conflicts` after the cainjector took the caBundle: every upgrade
    is rejected with a conflict (the failed writes only the audit log shows)."""
    await namespace(stage, ns)
    await ca_secret(stage, ns)
    await helm_release(stage, 4, "webhook", "webhook", ns, "--server-side=true")
    await wait_injected(stage, f"{ns}-validate")

    async def upgrade(_: int) -> None:
        try:
            await helm_release(stage, 4, "webhook", "webhook", ns, "--server-side=true")
        except KubectlError as exc:
            if "conflict" not in str(exc).lower():
                raise

    await every(PERIOD, ROUNDS - 4, upgrade)


async def wait_injected(stage: Stage, webhook: str) -> None:
    """Wait until the cainjector has injected a CA into a webhook configuration."""
    path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{webhook}"

    async def injected() -> str | None:
        hooks = (await stage.admin.get(path)).get("webhooks") or [{}]
        return hooks[0].get("clientConfig", {}).get("caBundle") or None

    await until(injected, what=f"{webhook}: a caBundle injected", deadline=WAIT)


async def helm3_reinstall(stage: Stage, ns: str) -> None:
    """`cainjector_helm3`, with faults halfway: the cainjector restarts (its pod stopped and started again), then the
    release is uninstalled and installed again, so the webhook is deleted and recreated under the same name."""
    await namespace(stage, ns)
    await ca_secret(stage, ns)
    await every(PERIOD, 5, lambda _: helm_release(stage, 3, "webhook", "webhook", ns))
    await stage.restart_cainjector()
    await every(PERIOD, 2, lambda _: helm_release(stage, 3, "webhook", "webhook", ns))
    await stage.helm(3, "uninstall", "webhook", "-n", ns)
    await every(PERIOD, 5, lambda _: helm_release(stage, 3, "webhook", "webhook", ns))


async def helm3_hpa(stage: Stage, ns: str) -> None:
    """A chart that always sets `replicas: 1` beside its HorizontalPodAutoscaler (minReplicas 3): every `helm upgrade`
    scales the Deployment down, every HPA sync (15 s) back up. Halfway, a person scales it by hand once (`kubectl
    scale`): a writer that took the field once and lost it, no fighter."""
    await namespace(stage, ns)

    async def by_hand() -> None:
        await asyncio.sleep(PERIOD * (ROUNDS / 2 + 0.5))  # (between two upgrades)
        await stage.kubectl(PERSON)("scale", "deployment", "web", "-n", ns, "--replicas=5")

    await asyncio.gather(
        every(PERIOD, ROUNDS + 2, lambda _: helm_release(stage, 3, "web", "web", ns, "--set", "pinReplicas=true")),
        by_hand(),
    )


def _flux_deployment(ns: str, name: str, replicas: int) -> JSON:
    return manifests.deployment(ns, name, replicas=replicas, image="nginx:1.27.3")


def _flux_hpa(ns: str, name: str, minimum: int) -> JSON:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": minimum,
            "maxReplicas": minimum + 2,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ],
        },
    }


async def flux_hpa(stage: Stage, ns: str) -> None:
    """Flux applies a Deployment with `replicas: 1` and an HPA with minReplicas 3 (Flux's docs: leave replicas out
    when an HPA scales it): the HPA scales up at each sync, Flux corrects the drift at its next interval."""
    await namespace(stage, ns)
    await stage.external_artifact(ns, "app", [_flux_deployment(ns, "web", 1), _flux_hpa(ns, "web", 3)])
    await stage.kustomization(ns, "app", interval=FLUX_INTERVAL)
    await asyncio.sleep(ROUNDS * PERIOD)  # the fight plays on its own: Flux's interval against the HPA's syncs


async def benign_flux_cainjector(stage: Stage, ns: str) -> None:
    """Flux applies a webhook configuration whose manifest carries `caBundle: ""` and the inject annotation: the
    cainjector injects the CA once, and Flux's server-side apply, whose empty value sets nothing, leaves it alone."""
    await namespace(stage, ns)
    await ca_secret(stage, ns)
    webhook = yaml.safe_load(
        WEBHOOK_TEMPLATE.replace("{{ .Release.Namespace }}", ns).replace("{{ .Values.caBundle | quote }}", '""')
    )
    await stage.external_artifact(ns, "webhook", [webhook])
    await stage.kustomization(ns, "webhook", interval=FLUX_INTERVAL)
    await asyncio.sleep(ROUNDS * PERIOD)


async def flux_curl(stage: Stage, ns: str) -> None:
    """A legacy job PATCHes a Flux-managed ConfigMap with curl, no field manager named (the API server records curl's
    User-Agent as the manager); Flux corrects it at its next interval."""
    await namespace(stage, ns)
    await stage.grant_edit(LEGACY, ns)
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app-settings", "namespace": ns},
        "data": {"mode": "blue"},
    }
    await stage.external_artifact(ns, "app", [config])
    await stage.kustomization(ns, "app", interval=FLUX_INTERVAL)
    await wait_for(stage, CONFIGMAPS.path(ns, "app-settings"))
    patch = {"data": {"mode": "green"}}
    await every(
        PERIOD * 2,
        ROUNDS // 2 + 1,
        lambda _: stage.curl(
            LEGACY, "PATCH", CONFIGMAPS.path(ns, "app-settings"), patch, "application/merge-patch+json"
        ),
    )


async def wait_for(stage: Stage, path: str) -> JSON:
    """An object once it exists (made by a controller or a GitOps tool)."""

    async def found() -> JSON | None:
        try:
            return await stage.admin.get(path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            return None

    return await until(found, what=f"{path} made", deadline=WAIT)


async def replicaset_scale(stage: Stage, ns: str) -> None:
    """A CronJob's script scales the ReplicaSet of a Deployment (`kubectl scale rs`) instead of the Deployment; the
    deployment controller scales it back every time."""
    await namespace(stage, ns)
    await stage.grant_edit(SCRIPT, ns)
    await stage.kubectl(SYNC).apply(
        orjson.dumps(manifests.deployment(ns, "web", replicas=2, image="nginx:1.27.3")).decode()
    )
    selector = await _replicaset_of(stage, ns, "web")
    script = stage.kubectl(SCRIPT)
    # every 2 s: fast enough that the deployment controller's status updates of the Deployment make a hot loop
    await every(PERIOD / 3, ROUNDS * 2, lambda _: script("scale", "replicaset", selector, "-n", ns, "--replicas=4"))


async def _replicaset_of(stage: Stage, ns: str, deployment: str) -> str:
    return await _first(stage, REPLICASETS.path(ns), f"app={deployment}", what=f"a ReplicaSet of {ns}/{deployment}")


async def _first(stage: Stage, path: str, selector: str, *, what: str) -> str:
    """The name of the first object a label selector selects, once there is one."""

    async def named() -> str | None:
        items = (await stage.admin.get(path, query={"labelSelector": selector}))["items"]
        return str(items[0]["metadata"]["name"]) if items else None

    return await until(named, what=what, deadline=WAIT)


async def status_edit(stage: Stage, ns: str) -> None:
    """A person "fixes" a Deployment's status by hand (`kubectl patch --subresource=status`), a few times; the
    deployment controller recomputes it from the ReplicaSets every time."""
    await namespace(stage, ns)
    await stage.kubectl(SYNC).apply(
        orjson.dumps(manifests.deployment(ns, "api", replicas=1, image="nginx:1.27.3")).decode()
    )
    await _status_replicas(stage, ns, "api", 1)
    person = stage.kubectl(PERSON)
    patch = orjson.dumps({"status": {"readyReplicas": 1, "availableReplicas": 1}}).decode()
    await every(
        PERIOD * 1.5,
        5,
        lambda _: person("patch", "deployment", "api", "-n", ns, "--subresource=status", "--type=merge", "-p", patch),
    )


async def _status_replicas(stage: Stage, ns: str, deployment: str, replicas: int) -> None:
    """Wait until a Deployment's status counts its pods (created, never ready: no kubelet runs)."""

    async def counted() -> bool | None:
        status = (await stage.admin.get(DEPLOYMENTS.path(ns, deployment))).get("status", {})
        return status.get("replicas") == replicas or None

    await until(counted, what=f"{ns}/{deployment}: status.replicas {replicas}", deadline=WAIT)


async def root_ca_reapply(stage: Stage, ns: str) -> None:
    """A pipeline keeps applying its own `kube-root-ca.crt` ConfigMap (a manifest exported from another cluster); the
    root-ca-cert-publisher of kube-controller-manager restores the cluster's CA every time."""
    await namespace(stage, ns)
    await wait_for(stage, CONFIGMAPS.path(ns, "kube-root-ca.crt"))
    other = self_signed_ca(stage.workdir, f"{ns}-other-cluster")
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "namespace": ns},
        "data": {"ca.crt": other},
    }
    text = orjson.dumps(manifest).decode()
    await every(PERIOD, ROUNDS, lambda _: stage.kubectl(SYNC).apply(text))


async def endpointslice_mirror(stage: Stage, ns: str) -> None:
    """A Service without a selector and its Endpoints, which the endpointslice-mirroring controller mirrors into an
    EndpointSlice; a script edits the mirrored slice by hand, and the controller restores it every time."""
    await namespace(stage, ns)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "legacy-db", "namespace": ns},
        "spec": {"ports": [{"port": 5432}]},
    }
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "legacy-db", "namespace": ns},
        "subsets": [{"addresses": [{"ip": "10.0.0.10"}], "ports": [{"port": 5432}]}],
    }
    person = stage.kubectl(PERSON)
    await person.apply(orjson.dumps(service).decode())
    await person.apply(orjson.dumps(endpoints).decode())
    slice_name = await _slice_of(stage, ns, "legacy-db")
    patch = orjson.dumps([{"op": "replace", "path": "/endpoints/0/addresses/0", "value": "10.0.0.99"}]).decode()
    script = stage.kubectl(SYNC)
    await every(
        PERIOD, ROUNDS, lambda _: script("patch", "endpointslice", slice_name, "-n", ns, "--type=json", "-p", patch)
    )


async def _slice_of(stage: Stage, ns: str, service: str) -> str:
    selector = f"kubernetes.io/service-name={service}"
    return await _first(stage, ENDPOINT_SLICES.path(ns), selector, what=f"an EndpointSlice of {ns}/{service}")


# ------------------------------------------------------------------------------------------------------- benign


async def benign_rollout(stage: Stage, ns: str) -> None:
    """A release pipeline rolls out three new images, 15 s apart, and restarts once: the deployment controller and
    the replicaset controller do their work."""
    await namespace(stage, ns)
    sync = stage.kubectl(SYNC)
    await sync.apply(orjson.dumps(manifests.deployment(ns, "shop", replicas=2, image="nginx:1.27.1")).decode())
    for tag in ("1.27.2", "1.27.3", "1.27.4"):
        await asyncio.sleep(15.0)
        await sync("set", "image", "deployment/shop", f"shop=nginx:{tag}", "-n", ns)
    await sync("rollout", "restart", "deployment/shop", "-n", ns)


async def benign_flux_alone(stage: Stage, ns: str) -> None:
    """Flux reconciles an app every 10 s and nothing else writes it: no drift, only its status."""
    await namespace(stage, ns)
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": ns},
        "data": {"level": "info"},
    }
    await stage.external_artifact(ns, "app", [config, _flux_deployment(ns, "api", 2)])
    await stage.kustomization(ns, "app", interval=FLUX_INTERVAL)
    await asyncio.sleep(ROUNDS * PERIOD)


async def benign_flux_revert(stage: Stage, ns: str) -> None:
    """A person scales a Flux-managed Deployment by hand once; Flux puts it back at its next interval, once."""
    await namespace(stage, ns)
    await stage.external_artifact(ns, "app", [_flux_deployment(ns, "frontend", 2)])
    await stage.kustomization(ns, "app", interval=FLUX_INTERVAL)
    await wait_for(stage, DEPLOYMENTS.path(ns, "frontend"))
    await asyncio.sleep(PERIOD)
    await stage.kubectl(PERSON)("scale", "deployment", "frontend", "-n", ns, "--replicas=5")
    await asyncio.sleep(ROUNDS * PERIOD - PERIOD)


async def benign_cainjector_install(stage: Stage, ns: str) -> None:
    """A chart installed with an empty caBundle and upgraded once: the cainjector injects the CA after each."""
    await namespace(stage, ns)
    await ca_secret(stage, ns)
    await helm_release(stage, 3, "webhook", "webhook", ns)
    await wait_injected(stage, f"{ns}-validate")
    await asyncio.sleep(PERIOD * 3)
    await helm_release(stage, 3, "webhook", "webhook", ns)


async def benign_hpa_scaling(stage: Stage, ns: str) -> None:
    """A chart whose Deployment leaves replicas to its HPA (minReplicas 3), upgraded a few times: the HPA scales it
    once, the upgrades leave replicas alone."""
    await namespace(stage, ns)
    await every(PERIOD * 2, 5, lambda r: helm_release(stage, 3, "web", "web", ns, "--set", f"podAnnotations.rev=r{r}"))


FIGHTS: dict[str, Scenario] = {
    "cainjector-helm3": Scenario(
        cainjector_helm3,
        "cainjector (server-side apply, force) against `helm upgrade --install` (Helm 3) of a chart with "
        '`caBundle: ""`',
        fight=True,
    ),
    "cainjector-helm4": Scenario(
        cainjector_helm4,
        "cainjector against Helm 4's server-side `upgrade --install --force-conflicts` of the same chart",
        fight=True,
    ),
    "helm3-reinstall": Scenario(
        helm3_reinstall,
        "as cainjector-helm3, with the cainjector restarted halfway and the release uninstalled and installed again "
        "(the webhook deleted and recreated under its name)",
        fight=True,
    ),
    "helm3-hpa": Scenario(
        helm3_hpa,
        "`helm upgrade` of a chart that pins `replicas: 1` against its HPA (minReplicas 3); a person scales it once",
        fight=True,
    ),
    "flux-hpa": Scenario(
        flux_hpa,
        "Flux's kustomize-controller applying `replicas: 1` against the HPA (minReplicas 3) it also applies",
        fight=True,
    ),
    "flux-curl": Scenario(
        flux_curl,
        "a legacy job's `curl -X PATCH` (no field manager) of a Flux-managed ConfigMap against Flux",
        fight=True,
    ),
    "replicaset-scale": Scenario(
        replicaset_scale,
        "a CronJob's `kubectl scale replicaset` every 2 s against the deployment controller that owns it",
        fight=True,
    ),
    "status-edit": Scenario(
        status_edit,
        "a person's `kubectl patch --subresource=status` of a Deployment against the deployment controller",
        fight=True,
    ),
    "root-ca-reapply": Scenario(
        root_ca_reapply,
        "a pipeline's `kubectl apply` of its own `kube-root-ca.crt` against the root-ca-cert-publisher",
        fight=True,
    ),
    "endpointslice-mirror": Scenario(
        endpointslice_mirror,
        "`kubectl patch` of a mirrored EndpointSlice against the endpointslice-mirroring controller",
        fight=True,
    ),
}
BENIGN: dict[str, Scenario] = {
    "helm4-apply-conflict": Scenario(
        helm4_apply_conflict,
        "Helm 4's server-side upgrade without force, rejected every time once the cainjector took the caBundle: an "
        "apply conflict in the audit log, no fight",
        fight=False,
    ),
    "benign-rollout": Scenario(
        benign_rollout,
        "`kubectl set image` three times and `kubectl rollout restart` once: the deployment and replicaset "
        "controllers at work",
        fight=False,
    ),
    "benign-flux-alone": Scenario(
        benign_flux_alone, "Flux reconciling an app every 10 s with no drift: its status only", fight=False
    ),
    "benign-flux-revert": Scenario(
        benign_flux_revert,
        "a person's one `kubectl scale` of a Flux-managed Deployment, which Flux reverts once",
        fight=False,
    ),
    "benign-flux-cainjector": Scenario(
        benign_flux_cainjector,
        'Flux applying a webhook configuration with `caBundle: ""` beside the cainjector: injected once, left alone',
        fight=False,
    ),
    "benign-cainjector-install": Scenario(
        benign_cainjector_install,
        "a chart installed and upgraded once, the cainjector injecting after each",
        fight=False,
    ),
    "benign-hpa-scaling": Scenario(
        benign_hpa_scaling,
        "a chart that leaves replicas to its HPA, upgraded five times: the HPA scales once",
        fight=False,
    ),
}
SCENARIOS: dict[str, Scenario] = {**FIGHTS, **BENIGN}
# The control plane's own background (leader-election Leases, kube-root-ca.crt, service accounts) is recorded from
# these namespaces as one more benign pattern.
BACKGROUND = "benign-control-plane"
BACKGROUND_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "default", "cert-manager", "flux-system")


async def play(stage: Stage, names: Sequence[str]) -> None:
    """Every scenario named, all at once (the charts written first)."""
    charts(stage.workdir / "charts")
    await asyncio.gather(*(SCENARIOS[name].play(stage, name) for name in names))


def scenario_of(namespace: str | None, name: str) -> str | None:
    """The scenario an object (or a request's object) belongs to: by its namespace, or a cluster-scoped object's name
    prefix; BACKGROUND for the control plane's namespaces."""
    if namespace:
        if namespace in SCENARIOS:
            return namespace
        return BACKGROUND if namespace in BACKGROUND_NAMESPACES else None
    return next((s for s in sorted(SCENARIOS, key=len, reverse=True) if name.startswith(s + "-")), None)


def shell(args: Sequence[str]) -> str:
    return shlex.join(args)
