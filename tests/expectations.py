"""What each recorded scenario must yield: shared by the unit tests (recorded captures) and the live tests.

`FINDINGS` and `BENIGN` are what the current releases give (the current and the oldest supported one, live, and the
current one's recordings); `FINDINGS_V1_20` and `BENIGN_V1_20` what the v1.20 recordings, kept as compatibility
fixtures, give: their scenarios were recorded with the clients of their day (`fight-scale-vs-apply`'s applier was
`kubectl` server-side, and v1.20 records no managedFields entry for its scaler)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from watcher.detection.incidents import group
from watcher.model import Finding, FindingType, Incident


@dataclass(frozen=True)
class Expected:
    kind: str
    name: str
    fields: frozenset[str]
    managers: frozenset[str | None]
    hint: str  # a phrase the hint must contain
    type: FindingType = FindingType.FIGHT
    # A hot loop driven from outside: the writer named first, with these fields (then `fields` are among its own).
    driver: str | None = None
    # The phrase of the hint from a metadata-only watch, where it differs (what the values were is not seen there).
    metadata_hint: str | None = None


def fight(kind: str, name: str, fields: set[str], managers: set[str | None], hint: str) -> Expected:
    return Expected(kind, name, frozenset(fields), frozenset(managers), hint)


FINDINGS_V1_20 = {
    "fight-apply-vs-update-replicas": fight(
        "Deployment", "web", {"spec.replicas"}, {"argocd-controller", "custom-autoscaler"}, "autoscaler"
    ),
    "fight-update-vs-update-label": fight(
        "ConfigMap", "settings", {"metadata.labels.owner"}, {"team-a-operator", "team-b-operator"}, "Decide which"
    ),
    "fight-apply-vs-apply-annotation": fight(
        "ConfigMap",
        "app-config",
        {"metadata.annotations[example.com/config-hash]"},
        {"flux-kustomize", "helm-controller"},
        "Decide which",
    ),
    "fight-data": fight(
        "ConfigMap", "service-endpoints", {"data.endpoint"}, {"gitops-sync", "config-injector"}, "server-side apply"
    ),
    "fight-status": fight(
        "Widget", "gizmo", {"status.phase"}, {"widget-operator", "legacy-widget-controller"}, "Decide which"
    ),
    "fight-cabundle": fight(
        "ValidatingWebhookConfiguration",
        "fightwatch-test-validate",
        {"webhooks[name=validate.example.com].clientConfig.caBundle"},
        {"helm", "cainjector"},
        "injector",
    ),
    "fight-three-writers": fight(
        "ConfigMap",
        "placement",
        {"metadata.labels.tier"},
        {"alpha-controller", "beta-controller", "gamma-controller"},
        "Decide which",
    ),
    "fight-slow": fight(
        "ConfigMap",
        "runtime-mode",
        {"metadata.annotations[example.com/mode]"},
        {"argocd-controller", "mode-operator"},
        "server-side apply",
    ),
    "fight-shared-manager": fight(
        "ConfigMap", "shared", {"metadata.labels.owner"}, {"manager"}, "distinct field manager"
    ),
    "fight-scale-vs-apply": fight("Deployment", "api", {"spec.replicas"}, {"kubectl", None}, "scale subresource"),
    "hot-loop-timestamp": Expected(
        "ConfigMap",
        "reconcile-state",
        frozenset({"metadata.annotations[example.com/last-reconciled]"}),
        frozenset({"reconciler"}),
        "timestamp",
        FindingType.HOT_LOOP,
    ),
}


def status_hot_loop() -> Expected:
    """A controller rewriting status through the status subresource 5/s: its managedFields entry keeps its first
    write's time (v1.20 stamps no new time when a writer rewrites fields it already owns), so the writer is named
    as the one owner of the status values it changes."""
    return Expected(
        "Widget",
        "sprocket",
        frozenset({"status.lastReconciled"}),
        frozenset({"widget-status-reconciler"}),
        "A timestamp is written",
        FindingType.HOT_LOOP,
        metadata_hint="Status is rewritten on every reconcile",
    )


FINDINGS_V1_20["hot-loop-status"] = status_hot_loop()

FINDINGS = {
    **FINDINGS_V1_20,
    # `kubectl apply` against `kubectl scale`, both the release's own kubectl: the scale writer is named.
    "fight-scale-vs-apply": fight(
        "Deployment", "api", {"spec.replicas"}, {"kubectl-client-side-apply", "kubectl"}, "scale subresource"
    ),
    # The real HorizontalPodAutoscaler against a `kubectl apply` loop, from the watch alone.
    "fight-hpa-vs-apply": fight(
        "Deployment",
        "web",
        {"spec.replicas"},
        {"kube-controller-manager", "kubectl-client-side-apply"},
        "HorizontalPodAutoscaler",
    ),
    # A ConfigMap of 13 update managers: the first taker of `tier` takes it from the API server's merged entry.
    "fight-ancient-changes": fight(
        "ConfigMap",
        "crowded",
        {"metadata.labels.tier"},
        # (ancient-changes, which held the label merged from tier-operator's old entry, lost it once: no fighter)
        {"team-b-operator", "tier-operator"},
        "Decide which",
    ),
    "fight-before-first-apply": fight(
        "ConfigMap", "legacy", {"data.mode"}, {"gitops-sync", "legacy-operator"}, "server-side apply"
    ),
    # `kubectl rollout restart` in a loop: kubectl-rollout drives it, the deployment controller reacts.
    "hot-loop-rollout-restart": Expected(
        "Deployment",
        "app",
        frozenset({"spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]"}),
        frozenset({"kubectl-rollout", "kube-controller-manager"}),
        "driven from outside the controller",
        FindingType.HOT_LOOP,
        driver="kubectl-rollout",
    ),
}

BENIGN_V1_20 = [
    "benign-different-fields",
    "benign-status-vs-spec",
    "benign-one-correction",
    "benign-normal-rate",
    "benign-leader-election",
]
BENIGN = [*BENIGN_V1_20, "benign-hpa-scaling"]

# What each release's recordings give (tests.unit.captures.RELEASES).
RELEASE_FINDINGS = {"current": FINDINGS, "v1.20": FINDINGS_V1_20}
RELEASE_BENIGN = {"current": BENIGN, "v1.20": BENIGN_V1_20}


def status_as_one(fields: Iterable[str]) -> frozenset[str]:
    """Fields with every status field as one `status`: what a metadata-only watch can name of a writer of status (the
    fields its managedFields entry owns), and a full-object watch names field by field."""
    return frozenset("status" if f == "status" or f.startswith(("status.", "status[")) else f for f in fields)


def assert_found(scenario: str, findings: list[Finding], release: str = "current") -> Finding:
    """Exactly the injected fight or hot loop, with its writers, fields and hint (a hot loop driven from outside:
    its driver first, with the expected fields among its own; the writers that react after it)."""
    expected = RELEASE_FINDINGS[release][scenario]
    assert len(findings) == 1, [f.summary for f in findings]
    found = findings[0]
    assert found.type is expected.type
    assert (found.object.kind, found.object.name) == (expected.kind, expected.name)
    if expected.driver is None:
        assert set(found.fields) == expected.fields
    else:
        first = found.writers[0]
        assert first.writer.manager == expected.driver
        assert not first.reacts
        assert set(first.fields) == expected.fields
        assert found.fields[: len(expected.fields)] == tuple(sorted(expected.fields))
        assert all(c.reacts for c in found.writers[1:])
    assert {c.writer.manager for c in found.writers} == expected.managers
    assert expected.hint in found.hint
    if found.type is FindingType.FIGHT:
        assert found.handovers >= 3
        assert found.first_seen <= found.detected_at <= found.last_seen
    return found


@dataclass(frozen=True)
class ExpectedIncident:
    """One root cause on many objects: a finding of the same type, fields, writers and hint on each, one incident."""

    type: FindingType
    kind: str
    objects: frozenset[tuple[str, str]]  # (namespace, name)
    fields: frozenset[str]
    writers: frozenset[tuple[str, str]]  # (manager, operation)
    hint: str  # a phrase each finding's hint must contain


# The separate scenarios (harness.scenarios.Scenario.separate, recorded only when named): several findings each, so
# not in FINDINGS, whose every scenario makes exactly one.
INCIDENTS = {
    "incident-replicas": ExpectedIncident(
        FindingType.FIGHT,
        "Deployment",
        frozenset(
            (f"incident-replicas-{suffix}", name)
            for suffix, names in (("a", ("web", "api")), ("b", ("cart", "search")), ("c", ("auth", "pay")))
            for name in names
        ),
        frozenset({"spec.replicas"}),
        frozenset({("gitops-sync", "Apply"), ("replica-autoscaler", "Update")}),
        "autoscaler",
    ),
    "incident-hot-loop": ExpectedIncident(
        FindingType.HOT_LOOP,
        "Widget",
        frozenset(
            (f"incident-hot-loop-{suffix}", name)
            for suffix, names in (("a", ("cog", "gear")), ("b", ("rotor", "spindle")))
            for name in names
        ),
        frozenset({"metadata.annotations[example.com/last-reconciled]"}),
        frozenset({("widget-reconciler", "Update")}),
        "timestamp",
    ),
}


def assert_incident(scenario: str, findings: list[Finding]) -> Incident:
    """Exactly one finding on each of the scenario's objects, each with its writers, fields and hint, and all of
    them one incident."""
    expected = INCIDENTS[scenario]
    assert sorted((f.object.namespace, f.object.name) for f in findings) == sorted(expected.objects), [
        f.summary for f in findings
    ]
    for found in findings:
        assert found.type is expected.type
        assert found.object.kind == expected.kind
        assert set(found.fields) == expected.fields
        assert {(c.writer.manager, c.writer.operation) for c in found.writers} == expected.writers
        assert expected.hint in found.hint
        if found.type is FindingType.FIGHT:
            assert found.handovers >= 3
            assert found.first_seen <= found.detected_at <= found.last_seen
    (incident,) = group(findings)
    assert incident.type is expected.type
    assert incident.objects == len(expected.objects)
    assert incident.namespaces == tuple(sorted({namespace for namespace, _ in expected.objects}))
    assert incident.kinds == (expected.kind,)
    assert incident.fields == tuple(sorted(expected.fields))
    assert {(c.writer.manager, c.writer.operation) for c in incident.writers} == expected.writers
    assert set(incident.findings) == {f.id for f in findings}
    return incident


# ---------------------------------------------------------------------------------------------------- real fights
# tests/fixtures/real: fights and benign patterns played by real programs (harness/real_fights.py), with the watch and
# the audit log of the same run. A writer is (manager, operation, subresource); None: the unattributed writer.
Party = tuple[str | None, str, str]
UNNAMED: Party = (None, "", "")
CAINJECTOR: Party = ("cert-manager-cainjector", "Apply", "")
HELM_UPDATE: Party = ("helm", "Update", "")
HPA: Party = ("kube-controller-manager", "Update", "scale")
KCM: Party = ("kube-controller-manager", "Update", "")
KCM_STATUS: Party = ("kube-controller-manager", "Update", "status")


@dataclass(frozen=True)
class RealFight:
    """What a platform engineer is to be told of a real fight.

    `watch`: its writers from the watch alone (managedFields); `audited`: with the audit log joined; `restores`: the
    writer that maintains the object (`diagnosis.restorers`), `drives` the one that drives it; `hint`: a phrase of the
    hint, matched against the fix the project documents; `never`: phrases no hint of it may hold (advice for another
    cause, or to change Kubernetes' own controllers)."""

    kind: str
    name: str
    fields: frozenset[str]
    watch: frozenset[Party]
    audited: frozenset[Party]
    hint: str
    restores: Party | None = None
    drives: Party | None = None
    ignored: bool = False  # over what a default ignore rule leaves out: reported, marked
    findings: int = 1  # the object deleted and recreated: one finding per object
    never: tuple[str, ...] = ()


_CABUNDLE = "webhooks[name=validate.{0}.example.com].clientConfig.caBundle"
_NOT_FOR_BUILTIN = ("time.Now()", "Decide which one owns", "stop the other controller", "ignoreDifferences")

REAL_FIGHTS = {
    "cainjector-helm3": RealFight(
        "ValidatingWebhookConfiguration",
        "cainjector-helm3-validate",
        frozenset({_CABUNDLE.format("cainjector-helm3")}),
        frozenset({UNNAMED, CAINJECTOR}),  # Helm 3's three-way merge only removes the field: no entry stamped
        frozenset({HELM_UPDATE, CAINJECTOR}),
        "remove caBundle from the chart",
    ),
    "cainjector-helm4": RealFight(
        "ValidatingWebhookConfiguration",
        "cainjector-helm4-validate",
        frozenset({_CABUNDLE.format("cainjector-helm4")}),
        frozenset({("helm", "Apply", ""), CAINJECTOR}),
        frozenset({("helm", "Apply", ""), CAINJECTOR}),
        "remove caBundle from the chart",
    ),
    "helm3-reinstall": RealFight(
        "ValidatingWebhookConfiguration",
        "helm3-reinstall-validate",
        frozenset({_CABUNDLE.format("helm3-reinstall")}),
        frozenset({UNNAMED, CAINJECTOR}),
        frozenset({HELM_UPDATE, CAINJECTOR}),
        "remove caBundle from the chart",
        findings=2,
    ),
    "helm3-hpa": RealFight(
        "Deployment",
        "web",
        frozenset({"spec.replicas"}),
        frozenset({HELM_UPDATE, HPA}),
        frozenset({HELM_UPDATE, HPA}),
        "drop `replicas` from the manifest/Helm values",
    ),
    "flux-hpa": RealFight(
        "Deployment",
        "web",
        frozenset({"spec.replicas"}),
        frozenset({("kustomize-controller", "Apply", ""), HPA}),
        frozenset({("kustomize-controller", "Apply", ""), HPA}),
        "Flux: remove the field from the kustomization",
    ),
    "flux-curl": RealFight(
        "ConfigMap",
        "app-settings",
        frozenset({"data.mode"}),
        frozenset({("curl", "Update", ""), ("kustomize-controller", "Apply", "")}),
        frozenset({("curl", "Update", ""), ("kustomize-controller", "Apply", "")}),
        "remove the field from the applied manifest",
    ),
    "replicaset-scale": RealFight(
        "ReplicaSet",
        "",  # (its name is the Deployment's and a hash)
        frozenset({"spec.replicas"}),
        frozenset({("kubectl", "Update", "scale"), KCM}),
        frozenset({("kubectl", "Update", "scale"), KCM}),
        "Scale the Deployment instead",
        restores=KCM,
        drives=("kubectl", "Update", "scale"),
        never=(*_NOT_FOR_BUILTIN, "Let the autoscaler own it"),
    ),
    "status-edit": RealFight(
        "Deployment",
        "api",
        frozenset({"status.readyReplicas", "status.availableReplicas"}),
        # (the controller's status updates only remove the hand-set fields: most leave no entry stamped)
        frozenset({("kubectl-patch", "Update", "status"), KCM_STATUS, UNNAMED}),
        frozenset({("kubectl-patch", "Update", "status"), KCM_STATUS}),
        "do not edit it by hand",
        restores=KCM_STATUS,
        drives=("kubectl-patch", "Update", "status"),
        never=_NOT_FOR_BUILTIN,
    ),
    "root-ca-reapply": RealFight(
        "ConfigMap",
        "kube-root-ca.crt",
        frozenset({"data[ca.crt]"}),
        frozenset({("kubectl-client-side-apply", "Update", ""), KCM}),
        frozenset({("kubectl-client-side-apply", "Update", ""), KCM}),
        "maintained by Kubernetes itself",
        restores=KCM,
        drives=("kubectl-client-side-apply", "Update", ""),
        never=_NOT_FOR_BUILTIN,
    ),
    "endpointslice-mirror": RealFight(
        "EndpointSlice",
        "",  # (generated: legacy-db-xxxxx)
        frozenset({"endpoints"}),
        frozenset({("kubectl-patch", "Update", ""), KCM}),
        frozenset({("kubectl-patch", "Update", ""), KCM}),
        "Change Endpoints legacy-db instead",
        restores=KCM,
        drives=("kubectl-patch", "Update", ""),
        ignored=True,
        never=_NOT_FOR_BUILTIN,
    ),
}
# Benign patterns of real clusters: nothing from the watch; the audit log finds only what is listed.
REAL_BENIGN = {
    "benign-rollout": (),
    "benign-flux-alone": (),
    "benign-flux-revert": (),
    "benign-flux-cainjector": (),
    "benign-cainjector-install": (),
    "benign-hpa-scaling": (),
    "benign-control-plane": (),
    "helm4-apply-conflict": (FindingType.APPLY_CONFLICT,),  # a stuck applier, no fight
}
