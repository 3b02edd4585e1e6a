"""The Helm chart, rendered by a real helm (v3.17.2, see scripts/helm.sh) and checked for what it promises:
strict lint for every ci/*-values.yaml, least-privilege RBAC, secure pod defaults, a config fightwatch itself
accepts, the values schema in step with the config model, and the built-in manifests accepted by a real
kube-apiserver (server-side dry run).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.control_plane import ControlPlane
from watcher.config import parse_config

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "fightwatch"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
NAMESPACE = "fightwatch-system"
# Kinds that exist only with the Prometheus Operator installed: rendered and checked, but not sent to the server.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [helm, "template", "fw", str(CHART), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def rules(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc["kind"] in {"ClusterRole", "Role"}:
            for rule in doc["rules"]:
                yield doc["metadata"]["name"], rule


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_lint_strict(helm: str, values: Path) -> None:
    done = subprocess.run(
        [helm, "lint", "--strict", str(CHART), "-f", str(values)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_values_schema_is_generated_from_the_config_model() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "chart_schema.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("config.detection.fight.windw=2h", "Additional property windw is not allowed"),
        ("config.detection.fight.window=forever", "config.detection.fight.window"),
        ("service.port=0", "service.port"),
        ("logLevel=loud", "logLevel"),
        ("prometheusRule.alerts.ControllerFightDetected.severity=page", "severity"),
    ],
)
def test_bad_values_fail_at_install_time(helm: str, setting: str, problem: str) -> None:
    done = subprocess.run(
        [helm, "template", "fw", str(CHART), "--set", setting], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert problem in done.stderr


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_config_map_holds_a_config_fightwatch_accepts(helm: str, values: Path) -> None:
    docs = render(helm, "-f", str(values))
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    text = config_map["data"]["config.yaml"]
    parse_config(yaml.safe_load(text), source=f"{values.name}: config.yaml")
    given = yaml.safe_load(values.read_text()) or {}
    chosen = given.get("config") or {}
    if given.get("events", {}).get("enabled") is False:  # no RBAC for Events: fightwatch is told not to write them
        chosen = {**chosen, "delivery": {**chosen.get("delivery", {}), "events": {"enabled": False}}}
    if given.get("leaderElection", {}).get("enabled"):  # the Lease its Role grants, in the release namespace
        lease = {"enabled": True, "lease_name": "fw-fightwatch", "lease_namespace": NAMESPACE}
        chosen = {**chosen, "leader_election": {**chosen.get("leader_election", {}), **lease}}
    assert yaml.safe_load(text) == chosen


def test_default_rbac_is_read_only_plus_events(helm: str) -> None:
    docs = render(helm)
    granted = list(rules(docs))
    watch = [rule for name, rule in granted if name.endswith("-watch")]
    assert watch
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in watch)
    events = [rule for name, rule in granted if name.endswith("-events")]
    assert events == [
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "get", "patch"]}
    ]  # get: a restarted fightwatch reads the Event it finds already there (409) to continue its series
    assert not [rule for name, rule in granted if "leases" in rule["resources"]]
    assert {name for name, _ in granted} == {"fw-fightwatch-watch", "fw-fightwatch-events"}
    (binding,) = [b for b in of_kind(docs, "ClusterRoleBinding") if b["roleRef"]["name"] == "fw-fightwatch-watch"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fw-fightwatch", "namespace": NAMESPACE}]


def test_events_disabled_grants_nothing_and_tells_fightwatch_not_to_write_them(helm: str) -> None:
    docs = render(helm, "--set", "events.enabled=false", "--set", "config.delivery.queue_size=10")
    assert not [name for name, _ in rules(docs) if name.endswith("-events")]
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    config = parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), source="config.yaml")
    assert config.delivery.events.enabled is False
    assert config.delivery.queue_size == 10  # the rest of the config as given


def test_namespaced_rbac_binds_only_in_those_namespaces(helm: str) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "namespaced-values.yaml"))
    assert not of_kind(docs, "ClusterRoleBinding")  # neither watch nor events cluster-wide
    bindings = of_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    granted = list(rules(docs))
    assert all(rule["verbs"] == ["get", "list", "watch"] for _, rule in granted)
    assert {g for _, rule in granted for g in rule["apiGroups"]} == {"apps", ""}


def test_leader_election_adds_a_lease_role_in_the_release_namespace_only(helm: str) -> None:
    docs = render(helm, "--set", "leaderElection.enabled=true")
    (role,) = of_kind(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    ]


def test_several_replicas_need_leader_election(helm: str) -> None:
    for extra in ((), ("--set", "sharding.enabled=true")):
        done = subprocess.run(
            [helm, "template", "fw", str(CHART), "--set", "replicaCount=2", *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode != 0
        assert "replicaCount > 1 needs leaderElection.enabled=true" in done.stderr


def test_sharding_runs_a_statefulset_whose_pod_ordinals_are_the_shards(helm: str) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "sharded-values.yaml"))
    assert not of_kind(docs, "Deployment")
    (stateful,) = of_kind(docs, "StatefulSet")
    assert stateful["spec"]["replicas"] == 4  # 2 shards x 2 replicas
    assert stateful["spec"]["podManagementPolicy"] == "Parallel"
    (container,) = stateful["spec"]["template"]["spec"]["containers"]
    assert "--shard=$(POD_NAME)" in container["args"]  # fightwatch takes the ordinal modulo the shards
    assert "--total-shards=2" in container["args"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    config = parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), source="config.yaml")
    assert config.leader_election.enabled
    assert config.sharding.assign == {"configmaps": 0}
    (role,) = of_kind(docs, "Role")
    assert role["rules"][0]["resources"] == ["leases"]


def test_pod_runs_locked_down(helm: str) -> None:
    (deployment,) = of_kind(render(helm), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int)
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]) == {"requests", "limits"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert not any("token" in arg.lower() or "url" in arg.lower() for arg in container["args"])


def test_every_object_carries_the_standard_labels(helm: str) -> None:
    for doc in render(helm, "-f", str(CHART / "ci" / "full-values.yaml")):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "fightwatch", doc["kind"]
        assert labels["app.kubernetes.io/instance"] == "fw", doc["kind"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", doc["kind"]


def test_operator_objects_take_the_additional_labels_and_overrides(helm: str) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "full-values.yaml"))
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (rule,) = of_kind(docs, "PrometheusRule")
    for doc in (monitor, rule):
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True  # the finding's `namespace` label is kept
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerts["ControllerFightDetected"]["for"] == "10m"
    assert alerts["ControllerFightDetected"]["labels"]["severity"] == "critical"
    source = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert sorted(alerts) == sorted(r["alert"] for g in source["groups"] for r in g["rules"] if "alert" in r)


def test_dashboards_ship_as_sidecar_config_maps(helm: str) -> None:
    docs = render(helm, "--set", "dashboards.enabled=true")
    shipped = {name: doc for doc in of_kind(docs, "ConfigMap") for name in doc["data"] if name.endswith(".json")}
    assert set(shipped) == {p.name for p in (REPO / "dashboards").glob("*.json")}
    for name, doc in shipped.items():
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert doc["data"][name].strip() == (REPO / "dashboards" / name).read_text().strip()


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_real_apiserver_accepts_the_manifests(
    helm: str, control_plane: ControlPlane, values: Path, tmp_path: Path
) -> None:
    server = subprocess.run(
        ["kubectl", "--kubeconfig", str(control_plane.kubeconfig), "version", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    version = yaml.safe_load(server.stdout)["serverVersion"]["gitVersion"]
    rendered = render(helm, "-f", str(values), "--kube-version", version.lstrip("v"))
    docs = [d for d in rendered if d["kind"] not in OPERATOR_KINDS]
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    kubectl = ["kubectl", "--kubeconfig", str(control_plane.kubeconfig)]
    namespaces = {NAMESPACE} | {d["metadata"].get("namespace") for d in docs} - {None}
    for namespace in namespaces:  # dry-run objects need their namespace to exist
        subprocess.run([*kubectl, "create", "namespace", namespace], capture_output=True, check=False)
    done = subprocess.run(
        [*kubectl, "apply", "--dry-run=server", "-f", str(manifest)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(docs)


def test_audit_webhook_serves_tls_from_secrets_and_tells_fightwatch_where_they_are(helm: str) -> None:
    docs = render(
        helm,
        *("--set", "auditWebhook.enabled=true", "--set", "auditWebhook.tlsSecret=fw-audit-tls"),
        *("--set", "auditWebhook.clientCASecret=fw-apiserver-ca", "--set", "auditWebhook.tokenSecret=fw-audit-token"),
        *("--set", "auditWebhook.service.type=NodePort", "--set", "auditWebhook.service.nodePort=30443"),
        *("--set", "networkPolicy.enabled=true"),
    )
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    settings = parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), source="config.yaml").audit_webhook
    assert settings.enabled
    assert settings.port == 8443
    (deployment,) = of_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    for path, secret in (
        (settings.tls_cert_file, "fw-audit-tls"),
        (settings.client_ca_file, "fw-apiserver-ca"),
        (settings.token_file, "fw-audit-token"),
    ):
        assert path is not None
        assert secrets[mounts[str(path.parent)]] == secret
    assert {"name": "audit", "containerPort": 8443, "protocol": "TCP"} in container["ports"]
    audit_service = next(d for d in of_kind(docs, "Service") if d["metadata"]["name"].endswith("-audit"))
    assert audit_service["spec"]["type"] == "NodePort"
    assert (
        audit_service["spec"]["ports"][0] | {"nodePort": 30443, "targetPort": "audit"}
        == audit_service["spec"]["ports"][0]
    )
    (policy,) = of_kind(docs, "NetworkPolicy")
    assert {"port": "audit", "protocol": "TCP"} in [p for rule in policy["spec"]["ingress"] for p in rule["ports"]]


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (("auditWebhook.enabled=true",), "needs auditWebhook.tlsSecret"),
        (("auditWebhook.enabled=true", "auditWebhook.tlsSecret=t"), "needs auditWebhook.clientCASecret or"),
    ],
)
def test_audit_webhook_without_tls_or_authentication_does_not_install(
    helm: str, settings: tuple[str, ...], problem: str
) -> None:
    args = [a for s in settings for a in ("--set", s)]
    done = subprocess.run([helm, "template", "fw", str(CHART), *args], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert problem in done.stderr
