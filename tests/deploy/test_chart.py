"""The Helm chart, rendered by a real helm (built from Go modules: scripts/helm.sh), checked for what it promises:
strict lint for every ci/*-values.yaml, least-privilege RBAC, secure pod defaults, HTTPS endpoints whose callers
fightwatch may review (and the certificate, from each tls.source, that scrapers verify), a config fightwatch itself
accepts, the values schema in step with the config model, and the built-in manifests accepted by a real
kube-apiserver (server-side dry run; the generated certificate kept across upgrades by a real `helm upgrade`).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from harness.control_plane import ControlPlane
from tests.deploy.generated import assert_up_to_date
from watcher.config import parse_config
from watcher.serving.endpoints import EVERY_FINDING

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "fightwatch"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
NAMESPACE = "fightwatch-system"
# Kinds that exist only with the Prometheus Operator or cert-manager installed: rendered and checked, but not sent
# to the server.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule", "Certificate"}
# The Service's names, the serving certificate's (release fw in NAMESPACE).
SERVICE_NAMES = [
    "fw-fightwatch",
    f"fw-fightwatch.{NAMESPACE}",
    f"fw-fightwatch.{NAMESPACE}.svc",
    f"fw-fightwatch.{NAMESPACE}.svc.cluster.local",
]
TLS_DIR = "/etc/fightwatch/tls"


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [helm, "template", "fw", str(CHART), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render_fails(helm: str, *args: str) -> str:
    """helm template's error (it must fail)."""
    done = subprocess.run(
        [helm, "template", "fw", str(CHART), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def alerts_of(prometheus_rule: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(group, rule) of each alerting rule, in order: the finding alerts have one rule of the same name in each of
    two groups (per incident, per finding)."""
    return [(g["name"], r) for g in prometheus_rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def rules(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc["kind"] in {"ClusterRole", "Role"}:
            for rule in doc["rules"]:
                yield doc["metadata"]["name"], rule


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    return next((d for d in of_kind(docs, kind) if d["metadata"]["name"] == name), None)


def config_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"]) or {}
    parse_config(config, source="config.yaml")  # fightwatch accepts it
    return config


def pod_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (workload,) = of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet")
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def endpoint_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    return dict(endpoint)


def service_ports(docs: list[dict[str, Any]], container: dict[str, Any], scheme: str) -> list[dict[str, Any]]:
    """The Service's ports, once the container serves 8080 on a port named for `scheme` (http or https) and its probes
    ask it over that scheme."""
    assert {"name": scheme, "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == scheme.upper(), probe
        assert container[probe]["httpGet"]["port"] == scheme, probe
    service = named(docs, "Service", "fw-fightwatch")
    assert service is not None
    ports: list[dict[str, Any]] = service["spec"]["ports"]
    return ports


def pem(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


SA_SUBJECT = {"kind": "ServiceAccount", "name": "fw-fightwatch", "namespace": NAMESPACE}
ACCESS_REVIEW_RULES = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_lint_strict(helm: str, values: Path) -> None:
    done = subprocess.run(
        [helm, "lint", "--strict", str(CHART), "-f", str(values)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_values_schema_is_generated_from_the_config_model() -> None:
    assert_up_to_date("chart_schema.py")


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        # (helm's message names the value by its JSON pointer)
        ("config.detection.fight.windw=2h", "additional properties 'windw' not allowed"),
        ("config.detection.fight.window=forever", "/config/detection/fight/window"),
        ("service.port=0", "/service/port"),
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
    if given.get("insecureHTTP"):  # development only: plain HTTP
        chosen = {**chosen, "serve": {**chosen.get("serve", {}), "insecure_http": True}}
    elif given.get("tls", {}).get("source", "helm") != "selfSigned":  # the mounted Secret's pair
        tls = {"cert_file": f"{TLS_DIR}/tls.crt", "key_file": f"{TLS_DIR}/tls.key"}
        serve = chosen.get("serve", {})
        chosen = {**chosen, "serve": {**serve, "tls": {**serve.get("tls", {}), **tls}}}
    if given.get("events", {}).get("enabled") is False:  # no RBAC for Events: fightwatch is told not to write them
        chosen = {**chosen, "delivery": {**chosen.get("delivery", {}), "events": {"enabled": False}}}
    if given.get("leaderElection", {}).get("enabled"):  # the Lease its Role grants, in the release namespace
        lease = {"enabled": True, "lease_name": "fw-fightwatch", "lease_namespace": NAMESPACE}
        chosen = {**chosen, "leader_election": {**chosen.get("leader_election", {}), **lease}}
    assert yaml.safe_load(text) == chosen


def test_default_rbac_is_read_only_plus_events_and_access_reviews(helm: str) -> None:
    docs = render(helm)
    granted = list(rules(docs))
    watch = [rule for name, rule in granted if name.endswith("-watch")]
    assert watch
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in watch)
    events = [rule for name, rule in granted if name.endswith("-events")]
    assert events == [
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "get", "list", "patch"]}
    ]  # get: a new leader reads the Event it finds already there (409); list: a restarted one finds the open Event
    assert not [rule for name, rule in granted if "leases" in rule.get("resources", [])]
    # Reviewing callers of /metrics and /api/v1/findings: create on the two review APIs, nothing broader.
    assert [rule for name, rule in granted if name == "fw-fightwatch-access-review"] == ACCESS_REVIEW_RULES
    assert {name for name, _ in granted} == {
        "fw-fightwatch-watch",
        "fw-fightwatch-events",
        "fw-fightwatch-access-review",
        "fw-fightwatch-metrics-reader",
        "fw-fightwatch-findings-reader",
    }
    for role in ("fw-fightwatch-watch", "fw-fightwatch-events", "fw-fightwatch-access-review"):
        binding = named(docs, "ClusterRoleBinding", role)
        assert binding is not None, role
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
        assert binding["subjects"] == [SA_SUBJECT]
    # fightwatch's ServiceAccount is bound to nothing else (the readers are for its callers).
    own = [b["roleRef"]["name"] for b in of_kind(docs, "ClusterRoleBinding") if SA_SUBJECT in b["subjects"]]
    assert sorted(own) == ["fw-fightwatch-access-review", "fw-fightwatch-events", "fw-fightwatch-watch"]


def test_events_disabled_grants_nothing_and_tells_fightwatch_not_to_write_them(helm: str) -> None:
    docs = render(helm, "--set", "events.enabled=false", "--set", "config.delivery.queue_size=10")
    assert not [name for name, _ in rules(docs) if name.endswith("-events")]
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    config = parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), source="config.yaml")
    assert config.delivery.events.enabled is False
    assert config.delivery.queue_size == 10  # the rest of the config as given


def test_namespaced_rbac_binds_only_in_those_namespaces(helm: str) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "namespaced-values.yaml"))
    # Neither watch nor events cluster-wide: only what is cluster-scoped by nature, the access reviews (fightwatch)
    # and /metrics (its scrapers).
    cluster_wide = {b["roleRef"]["name"] for b in of_kind(docs, "ClusterRoleBinding")}
    assert cluster_wide == {"fw-fightwatch-access-review", "fw-fightwatch-metrics-reader"}
    bindings = of_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    granted = [rule for name, rule in rules(docs) if name == "fw-fightwatch-watch"]
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in granted)
    assert {g for rule in granted for g in rule["apiGroups"]} == {"apps", ""}


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
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
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
    alerts = alerts_of(rule)
    # An override by name applies to the rule of that name in both finding groups (per incident and per finding).
    fights = [(group, r) for group, r in alerts if r["alert"] == "ControllerFightDetected"]
    assert [group for group, _ in fights] == ["fightwatch.incidents", "fightwatch.findings"]
    for _, fight in fights:
        assert fight["for"] == "10m"
        assert fight["labels"]["severity"] == "critical"
    assert [fight["labels"]["per"] for _, fight in fights] == ["incident", "finding"]  # (labels merged, not replaced)
    assert [r["for"] for _, r in alerts if r["alert"] == "ControllerHotLoop"] == ["1m", "1m"]
    source = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    shipped = [(g["name"], r["alert"]) for g in source["groups"] for r in g["rules"] if "alert" in r]
    assert [(group, r["alert"]) for group, r in alerts] == shipped


def test_with_the_watchers_address_each_finding_alert_links_to_its_page(helm: str) -> None:
    """A per-incident alert links to the incident's findings, a per-finding one to its object's namespace and kind;
    each rule keeps its `per` label and the gate on the processes that alert that way."""
    url = "https://fightwatch.example.com/"
    docs = render(helm, "--set", "prometheusRule.enabled=true", "--set", f"config.serve.external_url={url}")
    (rule,) = of_kind(docs, "PrometheusRule")
    alerts = alerts_of(rule)
    linked = [(group, r) for group, r in alerts if "page_url" in r.get("annotations", {})]
    names = [
        "ControllerFightDetected",
        "ControllerHotLoop",
        "KubernetesConflictStorm",
        "ServerSideApplyStuck",
        "ControllerNoopWrites",
    ]
    assert [(group, r["alert"]) for group, r in linked] == [
        *(("fightwatch.incidents", name) for name in names),
        *(("fightwatch.findings", name) for name in names),
    ]
    pages = {
        "incident": "https://fightwatch.example.com/findings?incident={{ $labels.incident }}",
        "finding": "https://fightwatch.example.com/findings?namespace={{ $labels.namespace }}&kind={{ $labels.kind }}",
    }
    for group, r in linked:
        per = r["labels"]["per"]
        assert group == {"incident": "fightwatch.incidents", "finding": "fightwatch.findings"}[per]
        assert r["annotations"]["page_url"] == pages[per], (group, r["alert"])
        assert f'fightwatch_alerting_info{{per="{per}"}}' in r["expr"], (group, r["alert"])
    (config,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    assert yaml.safe_load(config["data"]["config.yaml"])["serve"]["external_url"] == url
    plain = render(helm, "--set", "prometheusRule.enabled=true")
    (rule,) = of_kind(plain, "PrometheusRule")
    assert not [r for g in rule["spec"]["groups"] for r in g["rules"] if "page_url" in r.get("annotations", {})]


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
        [str(control_plane.kubectl), "--kubeconfig", str(control_plane.kubeconfig), "version", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    version = yaml.safe_load(server.stdout)["serverVersion"]["gitVersion"]
    rendered = render(helm, "-f", str(values), "--kube-version", version.lstrip("v"))
    docs = [d for d in rendered if d["kind"] not in OPERATOR_KINDS]
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    kubectl = [str(control_plane.kubectl), "--kubeconfig", str(control_plane.kubeconfig)]
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


def test_on_a_managed_cluster_the_receiver_takes_a_shippers_token_behind_a_cloud_load_balancer(helm: str) -> None:
    """No API server flag: a token for the shipper (or Firehose's access key), the Service exposed by the cloud."""
    docs = render(
        helm,
        *("--set", "auditWebhook.enabled=true", "--set", "auditWebhook.tlsSecret=fw-audit-tls"),
        *("--set", "auditWebhook.tokenSecret=fw-shipper-token", "--set", "auditWebhook.service.type=LoadBalancer"),
        *(
            "--set-string",
            "auditWebhook.service.annotations.service\\.beta\\.kubernetes\\.io/aws-load-balancer-type=nlb",
        ),
        *("--set", "auditWebhook.service.loadBalancerSourceRanges={203.0.113.0/24}"),
        *("--set", "auditWebhook.service.port=443"),  # (Firehose delivers to 443 only)
    )
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    settings = parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), source="config.yaml").audit_webhook
    assert settings.enabled
    assert settings.client_ca_file is None
    assert settings.token_file is not None
    audit_service = next(d for d in of_kind(docs, "Service") if d["metadata"]["name"].endswith("-audit"))
    assert audit_service["metadata"]["annotations"] == {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    assert audit_service["spec"]["type"] == "LoadBalancer"
    assert audit_service["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert audit_service["spec"]["ports"][0] | {"port": 443, "targetPort": "audit"} == audit_service["spec"]["ports"][0]


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


# ------------------------------------------------------------------------------------------ secure serving


def test_default_serves_https_with_a_generated_certificate_for_the_service(helm: str) -> None:
    docs = render(helm)
    (secret,) = of_kind(docs, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["name"] == "fw-fightwatch-tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    ca = x509.load_pem_x509_certificate(pem(secret, "ca.crt"))
    cert = x509.load_pem_x509_certificate(pem(secret, "tls.crt"))
    key = serialization.load_pem_private_key(pem(secret, "tls.key"), password=None)
    cert.verify_directly_issued_by(ca)  # raises unless the CA signs it
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert key.public_key() == cert.public_key()
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(names.get_values_for_type(x509.DNSName)) == sorted(SERVICE_NAMES)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc <= now
    assert abs((cert.not_valid_after_utc - now) - datetime.timedelta(days=365)) < datetime.timedelta(days=1)
    assert abs((ca.not_valid_after_utc - now) - datetime.timedelta(days=3650)) < datetime.timedelta(days=1)
    # ... when it is renewed (an upgrade, tls.helm.renewBeforeDays before this):
    not_after = datetime.datetime.fromisoformat(secret["metadata"]["annotations"]["fightwatch/certificate-not-after"])
    assert abs(not_after - cert.not_valid_after_utc) < datetime.timedelta(minutes=5)

    # The pod mounts the Secret's directory (no subPath: a renewal reaches it) where the config says the pair is.
    pod = pod_of(docs)
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TLS_DIR]
    assert mount["readOnly"] is True
    assert "subPath" not in mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "fw-fightwatch-tls"
    serve = config_of(docs)["serve"]
    assert serve == {"tls": {"cert_file": f"{TLS_DIR}/tls.crt", "key_file": f"{TLS_DIR}/tls.key"}}
    assert "insecure_http" not in serve

    # HTTPS everywhere: the port's name, the Service, the probes.
    assert service_ports(docs, container, "https") == [
        {"name": "https", "port": 8080, "targetPort": "https", "protocol": "TCP", "appProtocol": "https"}
    ]


def test_generated_certificate_validity_is_configurable(helm: str) -> None:
    docs = render(helm, "--set", "tls.helm.certValidityDays=90", "--set", "tls.helm.caValidityDays=180")
    (secret,) = of_kind(docs, "Secret")
    now = datetime.datetime.now(datetime.UTC)
    cert = x509.load_pem_x509_certificate(pem(secret, "tls.crt"))
    ca = x509.load_pem_x509_certificate(pem(secret, "ca.crt"))
    assert abs((cert.not_valid_after_utc - now) - datetime.timedelta(days=90)) < datetime.timedelta(days=1)
    assert abs((ca.not_valid_after_utc - now) - datetime.timedelta(days=180)) < datetime.timedelta(days=1)
    assert "must not exceed tls.helm.caValidityDays" in render_fails(
        helm, "--set", "tls.helm.certValidityDays=400", "--set", "tls.helm.caValidityDays=365"
    )
    assert "renewBeforeDays must be less than" in render_fails(helm, "--set", "tls.helm.renewBeforeDays=365")


def test_extra_dns_names_join_the_service_names(helm: str) -> None:
    docs = render(helm, "--set", "tls.extraDnsNames={fightwatch.example.com}")
    (secret,) = of_kind(docs, "Secret")
    cert = x509.load_pem_x509_certificate(pem(secret, "tls.crt"))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(names.get_values_for_type(x509.DNSName)) == sorted([*SERVICE_NAMES, "fightwatch.example.com"])


def test_cert_manager_issues_the_certificate_into_the_mounted_secret(helm: str) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "cert-manager-values.yaml"))
    assert not of_kind(docs, "Secret")  # cert-manager writes it
    (certificate,) = of_kind(docs, "Certificate")
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    assert certificate["metadata"]["namespace"] == NAMESPACE
    spec = certificate["spec"]
    assert spec["secretName"] == "fw-fightwatch-tls"
    assert spec["dnsNames"] == [*SERVICE_NAMES, "fightwatch.example.com"]
    assert spec["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert (spec["duration"], spec["renewBefore"]) == ("2160h", "360h")
    assert "server auth" in spec["usages"]
    pod = pod_of(docs)
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert secrets[mounts[TLS_DIR]] == spec["secretName"]
    assert config_of(docs)["serve"]["tls"]["cert_file"] == f"{TLS_DIR}/tls.crt"
    tls = endpoint_of(docs)["tlsConfig"]
    assert tls == {"ca": {"secret": {"name": "fw-fightwatch-tls", "key": "ca.crt"}}, "serverName": SERVICE_NAMES[2]}


def test_cert_manager_without_an_issuer_does_not_install(helm: str) -> None:
    problem = render_fails(helm, "--set", "tls.source=certManager")
    assert "tls.source=certManager needs tls.certManager.issuerRef.name" in problem


def test_an_existing_secret_is_mounted_and_verified_with_its_ca(helm: str) -> None:
    assert "tls.source=secret needs tls.secret.name" in render_fails(helm, "--set", "tls.source=secret")
    docs = render(
        helm, "--set", "tls.source=secret", "--set", "tls.secret.name=my-tls", "--set", "serviceMonitor.enabled=true"
    )
    assert not of_kind(docs, "Secret")
    assert not of_kind(docs, "Certificate")
    pod = pod_of(docs)
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "my-tls"]
    assert {"name": volume["name"], "mountPath": TLS_DIR, "readOnly": True} in pod["containers"][0]["volumeMounts"]
    assert config_of(docs)["serve"]["tls"] == {"cert_file": f"{TLS_DIR}/tls.crt", "key_file": f"{TLS_DIR}/tls.key"}
    assert endpoint_of(docs)["tlsConfig"]["ca"] == {"secret": {"name": "my-tls", "key": "ca.crt"}}


def test_self_signed_mounts_nothing_and_the_scraper_skips_verification(helm: str) -> None:
    docs = render(helm, "--set", "tls.source=selfSigned", "--set", "serviceMonitor.enabled=true")
    assert not of_kind(docs, "Secret")
    assert not of_kind(docs, "Certificate")
    pod = pod_of(docs)
    assert not [v for v in pod["volumes"] if "secret" in v]
    assert "serve" not in config_of(docs)  # fightwatch generates its own certificate, HTTPS still
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    endpoint = endpoint_of(docs)
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_unknown_tls_source_does_not_install(helm: str) -> None:
    assert "/tls/source" in render_fails(helm, "--set", "tls.source=letsencrypt")


def test_service_monitor_scrapes_https_with_a_token_and_verifies_the_server(helm: str) -> None:
    endpoint = endpoint_of(render(helm, "--set", "serviceMonitor.enabled=true"))
    assert endpoint["port"] == "https"
    assert endpoint["scheme"] == "https"
    assert endpoint["path"] == "/metrics"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "fw-fightwatch-tls", "key": "ca.crt"}},
        "serverName": f"fw-fightwatch.{NAMESPACE}.svc",
    }
    assert "insecureSkipVerify" not in json.dumps(endpoint)
    own = {"ca": {"configMap": {"name": "corp-ca", "key": "ca.crt"}}, "serverName": "fightwatch.example.com"}
    endpoint = endpoint_of(
        render(
            helm, "--set", "serviceMonitor.enabled=true", "--set-json", f"serviceMonitor.tlsConfig={json.dumps(own)}"
        )
    )
    assert endpoint["tlsConfig"] == own


def test_insecure_http_is_plain_http_everywhere_and_reviews_nobody(helm: str) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "insecure-http-values.yaml"))
    assert config_of(docs)["serve"] == {"insecure_http": True}
    assert not of_kind(docs, "Secret")
    assert named(docs, "ClusterRole", "fw-fightwatch-access-review") is None
    assert named(docs, "ClusterRoleBinding", "fw-fightwatch-access-review") is None
    pod = pod_of(docs)
    assert not [v for v in pod["volumes"] if "secret" in v]
    (container,) = pod["containers"]
    assert service_ports(docs, container, "http")[0]["targetPort"] == "http"
    endpoint = endpoint_of(docs)
    assert (endpoint["port"], endpoint["scheme"]) == ("http", "http")
    assert "tlsConfig" not in endpoint
    assert "bearerTokenFile" not in endpoint
    (policy,) = of_kind(docs, "NetworkPolicy")
    assert [p for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [{"port": "http", "protocol": "TCP"}]


def test_metrics_reader_grants_get_on_metrics_to_the_scrapers(helm: str) -> None:
    docs = render(helm)
    role = named(docs, "ClusterRole", "fw-fightwatch-metrics-reader")
    assert role is not None
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    binding = named(docs, "ClusterRoleBinding", "fw-fightwatch-metrics-reader")
    assert binding is not None
    assert binding["roleRef"]["name"] == "fw-fightwatch-metrics-reader"
    default_scraper = {"kind": "ServiceAccount", "name": "kube-prometheus-stack-prometheus", "namespace": "monitoring"}
    assert binding["subjects"] == [default_scraper]

    scrapers = [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
        {"kind": "User", "name": "vmagent"},
    ]
    docs = render(helm, "--set-json", f"metricsReader.subjects={json.dumps(scrapers)}")
    binding = named(docs, "ClusterRoleBinding", "fw-fightwatch-metrics-reader")
    assert binding is not None
    assert binding["subjects"] == scrapers

    docs = render(helm, "--set-json", "metricsReader.subjects=[]")
    assert named(docs, "ClusterRole", "fw-fightwatch-metrics-reader") is not None  # to bind yourself
    assert named(docs, "ClusterRoleBinding", "fw-fightwatch-metrics-reader") is None

    docs = render(helm, "--set", "metricsReader.create=false")
    assert named(docs, "ClusterRole", "fw-fightwatch-metrics-reader") is None
    assert named(docs, "ClusterRoleBinding", "fw-fightwatch-metrics-reader") is None


def test_findings_reader_is_bound_only_to_the_subjects_given(helm: str) -> None:
    docs = render(helm)
    role = named(docs, "ClusterRole", "fw-fightwatch-findings-reader")
    assert role is not None
    # list on findings.fightwatch.io, as fightwatch asks (not get on the path: system:discovery gives everyone that)
    assert role["rules"] == [{"apiGroups": ["fightwatch.io"], "resources": ["findings"], "verbs": ["list"]}]
    asked = (EVERY_FINDING.group, EVERY_FINDING.resource, EVERY_FINDING.verb, EVERY_FINDING.namespace)
    assert asked == ("fightwatch.io", "findings", "list", "")  # what fightwatch's SubjectAccessReview asks
    assert named(docs, "ClusterRoleBinding", "fw-fightwatch-findings-reader") is None
    docs = render(helm, "-f", str(CHART / "ci" / "cert-manager-values.yaml"))
    binding = named(docs, "ClusterRoleBinding", "fw-fightwatch-findings-reader")
    assert binding is not None
    assert binding["roleRef"]["name"] == "fw-fightwatch-findings-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "findings-bot", "namespace": "platform"},
        {"kind": "Group", "name": "platform-oncall"},
    ]


def test_a_service_account_subject_needs_its_namespace(helm: str) -> None:
    problem = render_fails(helm, "--set-json", 'metricsReader.subjects=[{"kind": "ServiceAccount", "name": "p"}]')
    assert "namespace" in problem


def test_rbac_create_false_creates_no_rbac_at_all(helm: str) -> None:
    docs = render(
        helm, "--set", "rbac.create=false", "--set-json", 'findingsReader.subjects=[{"kind": "User", "name": "u"}]'
    )
    assert not [d for d in docs if d["apiVersion"].startswith("rbac.authorization.k8s.io/")]


def test_network_policy_admits_the_serving_and_audit_ports(helm: str) -> None:
    scrapers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    senders = [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    docs = render(
        helm,
        *("--set", "networkPolicy.enabled=true", "--set-json", f"networkPolicy.metricsFrom={json.dumps(scrapers)}"),
        *(
            "--set",
            "auditWebhook.enabled=true",
            "--set",
            "auditWebhook.tlsSecret=t",
            "--set",
            "auditWebhook.tokenSecret=k",
        ),
        *("--set-json", f"auditWebhook.from={json.dumps(senders)}"),
    )
    (policy,) = of_kind(docs, "NetworkPolicy")
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": "https", "protocol": "TCP"}], "from": scrapers},
        {"ports": [{"port": "audit", "protocol": "TCP"}], "from": senders},
    ]
    ports = {p["name"] for p in pod_of(docs)["containers"][0]["ports"]}
    assert ports == {"https", "audit"}  # the names the policy admits


def test_helm_upgrade_keeps_the_generated_certificate_until_it_is_due(
    helm: str, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """`lookup` (helm install/upgrade against a real kube-apiserver): an upgrade serves on with the certificate the
    install generated, and issues a new one once it expires within tls.helm.renewBeforeDays or its names change."""
    release, namespace = "fwtls", "fightwatch-tls-upgrade"
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig), "HELM_CACHE_HOME": str(tmp_path / "cache")}
    env |= {"HELM_CONFIG_HOME": str(tmp_path / "config"), "HELM_DATA_HOME": str(tmp_path / "data")}
    kubectl = [str(control_plane.kubectl), "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace]

    def run(*args: str) -> str:
        done = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def secret() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(run(*kubectl, "get", "secret", f"{release}-fightwatch-tls", "-o", "json"))
        return found

    # Cluster-scoped objects of this release only: nothing else in the suite is called fwtls-fightwatch-*.
    run(
        helm,
        "install",
        release,
        str(CHART),
        "-n",
        namespace,
        "--create-namespace",
        "--set",
        "metricsReader.create=false",
    )
    try:
        installed = secret()
        run(helm, "upgrade", release, str(CHART), "-n", namespace, "--reuse-values", "--set", "logLevel=debug")
        assert secret()["data"] == installed["data"]  # kept: scrapers' CA and the pod's files stay valid

        soon = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
        run(
            *kubectl,
            "annotate",
            "--overwrite",
            "secret",
            f"{release}-fightwatch-tls",
            f"fightwatch/certificate-not-after={soon}",
        )
        run(helm, "upgrade", release, str(CHART), "-n", namespace, "--reuse-values")
        renewed = secret()
        assert renewed["data"]["tls.crt"] != installed["data"]["tls.crt"]  # due within renewBeforeDays (30)
        assert renewed["metadata"]["annotations"]["fightwatch/certificate-not-after"] != soon

        run(
            helm,
            "upgrade",
            release,
            str(CHART),
            "-n",
            namespace,
            "--reuse-values",
            "--set",
            "tls.extraDnsNames={fw.example.com}",
        )
        changed = secret()
        assert changed["data"]["tls.crt"] != renewed["data"]["tls.crt"]
        cert = x509.load_pem_x509_certificate(pem(changed, "tls.crt"))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "fw.example.com" in names.get_values_for_type(x509.DNSName)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(pem(changed, "ca.crt")))
    finally:
        run(helm, "uninstall", release, "-n", namespace)
