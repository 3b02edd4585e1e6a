"""What each recorded scenario must yield: shared by the unit tests (recorded captures) and the live tests."""

from __future__ import annotations

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


def fight(kind: str, name: str, fields: set[str], managers: set[str | None], hint: str) -> Expected:
    return Expected(kind, name, frozenset(fields), frozenset(managers), hint)


FINDINGS = {
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
    )


FINDINGS["hot-loop-status"] = status_hot_loop()

# Captures derived from recorded ones (see tests/fixtures/captures/README.md): not scenarios of their own.
DERIVED = {"derived-newer-server-status-subresource": status_hot_loop()}

BENIGN = [
    "benign-different-fields",
    "benign-status-vs-spec",
    "benign-one-correction",
    "benign-normal-rate",
    "benign-leader-election",
]


def assert_found(scenario: str, findings: list[Finding]) -> Finding:
    """Exactly the injected fight or hot loop, with its writers, fields and hint."""
    expected = FINDINGS.get(scenario) or DERIVED[scenario]
    assert len(findings) == 1, [f.summary for f in findings]
    found = findings[0]
    assert found.type is expected.type
    assert (found.object.kind, found.object.name) == (expected.kind, expected.name)
    assert set(found.fields) == expected.fields
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
    assert set(incident.fields) == expected.fields
    assert {(c.writer.manager, c.writer.operation) for c in incident.writers} == expected.writers
    assert set(incident.findings) == {f.id for f in findings}
    return incident
