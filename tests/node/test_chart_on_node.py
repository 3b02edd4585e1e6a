"""fightwatch as users run it: the image built here, the chart installed with `helm install` on a real node.

One cluster for the module (harness/node.py, harness/chart.py): etcd, kube-apiserver (its audit webhook backend pointed
at the chart's audit Service), kube-controller-manager, kube-scheduler, a kubelet with containerd and runc, the bridge
CNI and kube-proxy, all of the pinned current release. The image is the Dockerfile's, built by scripts/image.sh and
imported into containerd (no registry is reachable). The fighters are kubectl processes with identities of their own
(client certificates), applying their own value of the same label server-side, as two GitOps tools would.

What is checked is what a first install breaks on: pods Ready through the chart's own probes with no RBAC refusal,
a fight found by the pods and shown through the Service to a pod's projected token, its Event written as the chart's
service account, its metrics scraped by a real Prometheus through Kubernetes service discovery and its alert firing in
a real Alertmanager, the API server's audit events received through the audit Service and joined, `kubectl
fightwatch` from the machine, a leader's pod deleted and a rolling upgrade without a second Event, sharding, and a
missing image failing at once. Nothing here asserts how fast anything is: scripts/bench_node.py measures that.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import programs
from harness.chart import (
    AUDIT_POLICY,
    CHART,
    FIGHTS,
    NAMESPACE,
    PROMETHEUS_SA,
    READER_SA,
    RELEASE,
    SERVER_NAME,
    ChartError,
    Cluster,
    audit_webhook_kubeconfig,
    fight,
    finding_in,
    is_ready,
    pod_ips,
    poll,
    prepare,
    values,
)
from harness.image import build_image
from harness.monitoring import Monitor, run_prometheus, start_alertmanager
from harness.node import running_node

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, helm: str) -> Iterator[Cluster]:
    """The node, the image imported into it, and the secrets and accounts the chart's values name."""
    workdir = tmp_path_factory.mktemp("node")
    image = build_image()
    with running_node(workdir, audit_policy=AUDIT_POLICY, audit_webhook=audit_webhook_kubeconfig(workdir)) as node:
        yield prepare(node, helm, image.name, image.archive)


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Cluster:
    """`helm install` of the chart with the image just built: two replicas with leader election, the audit webhook on;
    every pod Ready through the chart's own probes."""
    cluster.helm_run("install", RELEASE, str(CHART), "-f", str(values(cluster)))
    cluster.rolled_out(f"deployment/{RELEASE}")
    return cluster


def test_the_pods_are_ready_through_the_charts_probes_with_no_rbac_refusal(installed: Cluster) -> None:
    pods = installed.pods()
    assert len(pods) == 2
    assert all(is_ready(p) for p in pods), installed.node.describe(NAMESPACE)
    for pod in pods:
        spec = pod["spec"]["containers"][0]
        assert spec["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"startupProbe", "livenessProbe", "readinessProbe"} <= set(spec)
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        log = installed.node.pod_log(NAMESPACE, pod["metadata"]["name"], lines=100_000)
        assert "forbidden" not in log.lower(), log
        assert '"level": "error"' not in log, log
    assert installed.leader() in {p["metadata"]["name"] for p in pods}


def test_a_live_fight_is_found_shown_through_the_service_told_in_an_event_and_joined_with_the_audit_log(
    installed: Cluster,
) -> None:
    c = installed
    fight(c, "contested", range(8))
    ips = pod_ips(c)
    admin_token = c.token(NAMESPACE, READER_SA)

    def found_everywhere() -> list[dict[str, Any]] | None:
        findings = [finding_in(c.findings(ip, token=admin_token), "contested") for ip in ips.values()]
        return [f for f in findings if f is not None] if all(findings) else None

    by_pod = poll(found_everywhere, what="the fight found by both replicas", node=c.node)
    assert len({f["id"] for f in by_pod}) == 1  # both replicas name it alike
    for finding in by_pod:
        assert {w["manager"] for w in finding["writers"]} == {"alpha-gitops", "beta-gitops"}
        assert finding["fields"] == ["metadata.labels.owner"]

    # Through the Service, from a pod, with the pod's projected token (TokenReview + SubjectAccessReview).
    seen = _findings_from_a_pod(c)
    assert finding_in(seen, "contested") is not None

    # The Event, by the leader, as the chart's service account.
    leader = c.leader()
    event = poll(lambda: c.first_warning("contested"), what="the fight's Event", node=c.node)
    assert event["reportingInstance"] == leader
    assert "alpha-gitops" in event["note"]
    assert "beta-gitops" in event["note"]
    audit_log = c.node.control_plane.audit_log
    assert audit_log is not None
    creators = {
        e["user"]["username"]
        for e in map(json.loads, audit_log.read_text().splitlines())
        if e["verb"] == "create"
        and e["objectRef"].get("resource") == "events"
        and e["objectRef"].get("namespace") == FIGHTS
    }
    assert creators == {f"system:serviceaccount:{NAMESPACE}:{RELEASE}"}

    # The audit events, received through the audit Service, name the users behind the field managers.
    def joined() -> dict[str, Any] | None:
        for ip in ips.values():
            finding = finding_in(c.findings(ip, token=admin_token), "contested")
            if finding and all(w.get("users") for w in finding["writers"]):
                return finding
        return None

    finding = poll(joined, what="a finding joined with the API server's audit events", node=c.node)
    assert {u for w in finding["writers"] for u in w["users"]} == {"alpha", "beta"}


def _findings_from_a_pod(c: Cluster) -> list[dict[str, Any]]:
    """GET /api/v1/findings through the Service from a pod of the image, with its service account's projected token
    (the chart binds it to the findings reader), the certificate verified with the chart's CA."""
    script = (
        "import os, ssl, urllib.request\n"
        "token = open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()\n"
        f"request = urllib.request.Request('https://{SERVER_NAME}:8080/api/v1/findings',\n"
        "                                 headers={'Authorization': 'Bearer ' + token})\n"
        "context = ssl.create_default_context(cafile='/etc/fightwatch-ca/ca.crt')\n"
        "print(urllib.request.urlopen(request, context=context).read().decode())\n"
    )
    service_ip = c.get("service", RELEASE, "-n", NAMESPACE)["spec"]["clusterIP"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "findings-client", "namespace": NAMESPACE},
        "spec": {
            "serviceAccountName": READER_SA,
            "restartPolicy": "Never",
            "hostAliases": [{"ip": service_ip, "hostnames": [SERVER_NAME]}],  # no cluster DNS on this node
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "client",
                    "image": c.image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", script],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "ca", "mountPath": "/etc/fightwatch-ca", "readOnly": True}],
                }
            ],
            "volumes": [
                {
                    "name": "ca",
                    "secret": {"secretName": f"{RELEASE}-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
                }
            ],
        },
    }
    c.kubectl("apply", "-f", "-", input_text=json.dumps(pod))

    def finished() -> str | None:
        phase = c.get("pod", "findings-client", "-n", NAMESPACE)["status"].get("phase")
        if phase == "Failed":
            pytest.fail(f"the client pod failed:\n{c.node.describe(NAMESPACE)}")
        return phase if phase == "Succeeded" else None

    poll(finished, what="the client pod's answer", node=c.node)
    findings: list[dict[str, Any]] = json.loads(c.node.pod_output(NAMESPACE, "findings-client", "client"))["findings"]
    return findings


def test_prometheus_finds_the_pods_by_kubernetes_service_discovery_and_the_fight_alert_fires(
    installed: Cluster,
) -> None:
    """As kube-prometheus-stack's Prometheus runs: pods found through the Service's endpoints, scraped over HTTPS with
    its service account's token (the chart's default metricsReader subject), the chart's PrometheusRule loaded."""
    c = installed
    workdir = c.node.workdir / "monitoring"
    workdir.mkdir(exist_ok=True)
    token_file = workdir / "prometheus.token"
    token_file.write_text(c.token(*PROMETHEUS_SA))
    rules = _chart_rules(c, workdir)
    alertmanager = start_alertmanager(workdir / "alertmanager", name="alertmanager", webhook_url="http://127.0.0.1:9/")
    job = {
        "job_name": f"serviceMonitor/{NAMESPACE}/{RELEASE}/0",
        "scheme": "https",
        "kubernetes_sd_configs": [
            {
                "role": "endpointslice",
                "kubeconfig_file": str(c.node.control_plane.kubeconfig),
                "namespaces": {"names": [NAMESPACE]},
            }
        ],
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "tls_config": {"ca_file": str(c.ca()), "server_name": SERVER_NAME},
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_service_name"], "regex": RELEASE, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_endpointslice_port_name"], "regex": "https", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": RELEASE},
        ],
    }
    config = {
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.url.removeprefix("http://")]}]}]},
        "scrape_configs": [job],
    }
    prometheus = run_prometheus(workdir / "prometheus", config, binary=programs.binary("prometheus"))
    try:
        fight(c, "scraped", range(8))
        targets = poll(lambda: _healthy_targets(prometheus), what="two healthy targets in Prometheus", node=c.node)
        assert {t["labels"]["pod"] for t in targets} == {p["metadata"]["name"] for p in c.pods()}
        series = poll(
            lambda: _query(prometheus, 'fightwatch_finding_info{type="fight",name="scraped"}') or None,
            what="the fight's series in Prometheus",
            node=c.node,
        )
        assert {s["metric"]["pod"] for s in series} == {p["metadata"]["name"] for p in c.pods()}
        alert = poll(
            lambda: _alert(alertmanager, "ControllerFightDetected"), what="the alert in Alertmanager", node=c.node
        )
        assert "alpha-gitops" in alert["labels"]["writers"]
        assert "beta-gitops" in alert["labels"]["writers"]
        assert "fight over" in alert["annotations"]["summary"]
    finally:
        prometheus.stop()
        alertmanager.stop()


def _chart_rules(c: Cluster, workdir: Path) -> Path:
    """The chart's PrometheusRule (prometheusRule.enabled) as a Prometheus rule file, the fight alert's `for` cut to
    seconds as a user overrides it (prometheusRule.alerts)."""
    rendered = subprocess.run(
        [
            c.helm,
            "template",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "-f",
            str(values(c)),
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.alerts.ControllerFightDetected.for=4s",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (rule,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "PrometheusRule"]
    path = workdir / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def _get_json(url: str) -> Any:
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=10)
    try:
        conn.request("GET", urllib.parse.urlsplit(url).path + "?" + urllib.parse.urlsplit(url).query)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _healthy_targets(prometheus: Monitor) -> list[dict[str, Any]] | None:
    prometheus.check_running()
    active = _get_json(f"{prometheus.url}/api/v1/targets?state=active")["data"]["activeTargets"]
    healthy = [t for t in active if t["health"] == "up"]
    return healthy if len(healthy) == 2 else None


def _query(prometheus: Monitor, expr: str) -> list[dict[str, Any]]:
    return list(_get_json(f"{prometheus.url}/api/v1/query?query={urllib.parse.quote(expr)}")["data"]["result"])


def _alert(alertmanager: Monitor, name: str) -> dict[str, Any] | None:
    alerts = _get_json(f"{alertmanager.url}/api/v2/alerts")
    return next((a for a in alerts if a["labels"].get("alertname") == name and a["status"]["state"] == "active"), None)


def test_kubectl_fightwatch_on_the_machine_scans_the_cluster(installed: Cluster) -> None:
    c = installed
    writer = threading.Thread(target=fight, args=(c, "scanned", range(10)))
    writer.start()
    try:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "kubectl-fightwatch"),
                "scan",
                f"--kubeconfig={c.node.control_plane.kubeconfig}",
                "-n",
                FIGHTS,
                "--for=10s",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        writer.join()
    assert done.returncode == 0, done.stderr
    finding = finding_in([json.loads(line) for line in done.stdout.splitlines()], "scanned")  # a finding per line
    assert finding is not None, done.stdout
    assert {w["manager"] for w in finding["writers"]} == {"alpha-gitops", "beta-gitops"}


def test_the_leaders_pod_deleted_the_other_takes_over_without_a_second_event(installed: Cluster) -> None:
    c = installed
    fight(c, "failover", range(6))
    first = poll(lambda: c.first_warning("failover"), what="the fight's Event", node=c.node)
    leader = c.leader()
    assert leader is not None
    c.kubectl("delete", "pod", leader, "-n", NAMESPACE, "--wait=false")

    def another_leader() -> str | None:
        holder = c.leader()
        return holder if holder not in (None, leader) else None

    new_leader = poll(another_leader, what="a new leader", node=c.node)
    assert new_leader in {p["metadata"]["name"] for p in c.pods()}

    fight(c, "failover", range(6, 14))  # the fight goes on: the new leader updates the same Event

    def went_on() -> list[dict[str, Any]] | None:
        warnings = c.warnings("failover")
        return warnings if warnings and _count(warnings[0]) > _count(first) else None

    warnings = poll(went_on, what="the new leader updating the Event", node=c.node)
    assert [w["metadata"]["name"] for w in warnings] == [first["metadata"]["name"]]
    poll(lambda: _all_ready(c, 2), what="two Ready pods again", node=c.node)


def _all_ready(c: Cluster, pods: int) -> bool | None:
    current = c.pods()
    return (len(current) == pods and all(is_ready(p) for p in current)) or None


def _count(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count") or 1)


def test_a_rolling_upgrade_that_changes_the_config_keeps_one_event(installed: Cluster) -> None:
    c = installed
    fight(c, "upgraded", range(6))
    first = poll(lambda: c.first_warning("upgraded"), what="the fight's Event", node=c.node)
    before = {p["metadata"]["name"] for p in c.pods()}
    changed = values(c, config={"detection": {"resolve": {"after": "31m"}}})
    c.helm_run("upgrade", RELEASE, str(CHART), "-f", str(changed))
    c.rolled_out(f"deployment/{RELEASE}")
    after = poll(
        lambda: {p["metadata"]["name"] for p in c.pods()} if len(c.pods()) == 2 else None,
        what="the old pods gone",
        node=c.node,
    )
    assert not after & before  # every pod replaced: the config's checksum rolled them
    leader = poll(lambda: c.leader() if c.leader() in after else None, what="a new pod leading", node=c.node)
    fight(c, "upgraded", range(6, 14))

    def went_on() -> list[dict[str, Any]] | None:
        warnings = c.warnings("upgraded")
        return warnings if warnings and _count(warnings[0]) > _count(first) else None

    warnings = poll(went_on, what="the upgraded leader updating the Event", node=c.node)
    assert [w["metadata"]["name"] for w in warnings] == [first["metadata"]["name"]]
    assert leader in after


def test_sharding_splits_the_resources_between_the_shards_as_the_chart_configures_it(installed: Cluster) -> None:
    """A second release with sharding on: a StatefulSet of two shards, each watching its part of the resources; the
    fight on ConfigMaps is found by the one shard that watches them."""
    c = installed
    namespace, release = "fightwatch-sharded", "sharded"
    fullname = f"{release}-fightwatch"
    c.kubectl("create", "namespace", namespace)
    repository, tag = c.image.rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "sharding": {"enabled": True, "shards": 2},
        "events": {"enabled": False},
        "config": {"detection": {"resolve": {"after": "30m"}}},
    }
    path = c.node.workdir / "sharded-values.yaml"
    path.write_text(yaml.safe_dump(values))
    c.helm_run("install", release, str(CHART), "-f", str(path), namespace=namespace)
    c.rolled_out(f"statefulset/{fullname}", namespace)
    c.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    c.kubectl(
        "create",
        "clusterrolebinding",
        "sharded-reader",
        f"--clusterrole={fullname}-findings-reader",
        f"--serviceaccount={namespace}:reader",
    )
    token = c.token(namespace, "reader")
    ips = pod_ips(c, namespace, release)
    assert len(ips) == 2
    fight(c, "sharded", range(8))

    def shard_findings() -> dict[str, list[dict[str, Any]]] | None:
        found = {pod: c.findings(ip, token=token, namespace=namespace, release=fullname) for pod, ip in ips.items()}
        return found if any(finding_in(f, "sharded") for f in found.values()) else None

    found = poll(shard_findings, what="the fight found by a shard", node=c.node)
    finders = [pod for pod, findings in found.items() if finding_in(findings, "sharded")]
    assert len(finders) == 1  # only the shard that watches ConfigMaps


def test_a_missing_image_fails_at_once_with_the_pods_events(installed: Cluster) -> None:
    """What a first install with a wrong image tag shows: not a wait to the deadline, the pod's events."""
    c = installed
    namespace = "fightwatch-missing"
    c.kubectl("create", "namespace", namespace)
    repository, _ = c.image.rsplit(":", 1)
    path = c.node.workdir / "missing-values.yaml"
    path.write_text(yaml.safe_dump({"image": {"repository": repository, "tag": "no-such-tag", "pullPolicy": "Never"}}))
    c.helm_run("install", "missing", str(CHART), "-f", str(path), namespace=namespace)
    with pytest.raises(ChartError) as failed:
        c.rolled_out("deployment/missing-fightwatch", namespace)
    assert "ErrImageNeverPull" in str(failed.value)
    assert "no-such-tag" in str(failed.value)  # the events, printed
    c.helm_run("uninstall", "missing", "--wait", namespace=namespace)
