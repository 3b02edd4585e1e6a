"""fightwatch's chart installed as a user installs it, on a test node (harness/node.py), and what the tests and
scripts/bench_node.py do with it: helm, kubectl, rollouts that fail at once on a pod that cannot start, HTTPS to a pod
verified for its Service's name, the Lease's holder, fightwatch's Events, and two users fighting over a label.

    image = build_image()  # (harness/image.py)
    with running_node(workdir, audit_policy=AUDIT_POLICY, audit_webhook=audit_webhook_kubeconfig(workdir)) as node:
        cluster = prepare(node, helm, image.name, image.archive)
        cluster.helm_run("install", RELEASE, str(CHART), "-f", str(values(cluster)))
        cluster.rolled_out(f"deployment/{RELEASE}")

A wait that times out raises NodeError, helm that fails or a pod that cannot start ChartError, each with the namespace's
pods, events and logs.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from watcher.sources.audit_webhook import PATH as AUDIT_PATH

from . import REPO_ROOT, control_plane
from .node import Node

T = TypeVar("T")

CHART = REPO_ROOT / "helm" / "fightwatch"
NAMESPACE = "fightwatch"  # the release's
RELEASE = "fightwatch"
FIGHTS = "fights"  # where the fighters write
AUDIT_IP = "10.0.0.200"  # the audit Service's fixed cluster IP: the API server's webhook kubeconfig names it
AUDIT_PORT = 8443
PROMETHEUS_SA = ("monitoring", "kube-prometheus-stack-prometheus")  # the chart's default metricsReader subject
READER_SA = "findings-reader"
DEADLINE = 180.0
# A container waiting for one of these will not start by itself: fail at once rather than at a deadline.
FATAL_WAITING = {
    "CrashLoopBackOff",
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}
SERVER_NAME = f"{RELEASE}.{NAMESPACE}.svc"  # a name the chart's certificate is for (no cluster DNS here)

# Metadata of every request but reads and the API server's own lease renewals: the writes (and their 409s) the
# webhook joins, and who created fightwatch's Events.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "Metadata"},
    ],
}


class ChartError(AssertionError):
    """helm failed, or a pod cannot start: the message carries the pods' events and logs."""


def poll(
    check: Callable[[], T | None], *, what: str, node: Node, deadline: float = DEADLINE, namespace: str = NAMESPACE
) -> T:
    """Call `check` until it answers something other than None; on the deadline, fail with the pods' events and logs."""
    return node.wait(check, what=what, deadline=deadline, details=lambda: node.describe(namespace))


@dataclass
class Cluster:
    node: Node
    helm: str
    image: str  # repository:tag

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        return self.node.kubectl(*args, input_text=input_text, check=check)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def helm_run(self, *args: str, namespace: str = NAMESPACE) -> None:
        """Run helm against the cluster as a user does."""
        done = subprocess.run(
            [self.helm, f"--kubeconfig={self.node.control_plane.kubeconfig}", *args, "-n", namespace],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ChartError(f"helm {' '.join(args)} failed:\n{done.stderr}\n{self.node.describe(namespace)}")

    def rolled_out(self, workload: str, namespace: str = NAMESPACE, deadline: float = DEADLINE) -> float:
        """Wait until a Deployment or StatefulSet (`deployment/NAME`) has all its replicas updated and Ready, as
        `kubectl rollout status` does; return how long that took. A pod whose image is missing, that cannot start or
        that crash-loops fails at once, with the pods' events and logs."""
        started = time.monotonic()
        kind, name = workload.split("/")

        def done() -> bool | None:
            obj = self.get(kind, name, "-n", namespace)
            selector = ",".join(f"{k}={v}" for k, v in obj["spec"]["selector"]["matchLabels"].items())
            for pod in self.pods(namespace, selector):
                for status in pod.get("status", {}).get("containerStatuses", []):
                    reason = (status.get("state", {}).get("waiting") or {}).get("reason", "")
                    if reason in FATAL_WAITING or status.get("restartCount", 0) > 0:
                        raise ChartError(
                            f"pod {pod['metadata']['name']}: {reason or 'restarted'}\n{self.node.describe(namespace)}"
                        )
            status, want = obj.get("status", {}), obj["spec"].get("replicas", 1)
            return (
                status.get("observedGeneration") == obj["metadata"]["generation"]
                and status.get("updatedReplicas") == want
                and status.get("readyReplicas") == want
                and status.get("replicas") == want
            ) or None

        poll(done, what=f"{workload} rolled out", node=self.node, deadline=deadline, namespace=namespace)
        return time.monotonic() - started

    def token(self, namespace: str, account: str) -> str:
        """A bound token of a service account (what the kubelet projects into its pods)."""
        return self.kubectl("create", "token", account, "-n", namespace, "--duration=1h").strip()

    def pods(self, namespace: str = NAMESPACE, selector: str = f"app.kubernetes.io/instance={RELEASE}") -> list[Any]:
        return [p for p in self.get("pods", "-n", namespace, "-l", selector)["items"] if not _terminating(p)]

    def ca(self, namespace: str = NAMESPACE, release: str = RELEASE) -> Path:
        """The CA of the chart's serving certificate (its Secret's ca.crt), in a file; read once (the chart keeps the
        Secret across upgrades)."""
        path = self.node.workdir / f"{namespace}-{release}-ca.crt"
        if not path.exists():
            secret = self.get("secret", f"{release}-tls", "-n", namespace)
            path.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
        return path

    def https(self, address: str, path: str, *, token: str, namespace: str = NAMESPACE, release: str = RELEASE) -> str:
        """GET https://ADDRESS:8080/PATH with a bearer token, the certificate verified for the Service's name."""
        context = ssl.create_default_context(cafile=str(self.ca(namespace, release)))
        conn = _Connection(address, 8080, context=context, server_name=f"{release}.{namespace}.svc")
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            body = response.read().decode()
        finally:
            conn.close()
        assert response.status == 200, f"GET {path} from {address}: HTTP {response.status}: {body[:500]}"
        return body

    def findings(self, address: str, *, token: str, namespace: str = NAMESPACE, release: str = RELEASE) -> list[Any]:
        """A pod's /api/v1/findings."""
        return list(
            json.loads(self.https(address, "/api/v1/findings", token=token, namespace=namespace, release=release))[
                "findings"
            ]
        )

    def leader(self, name: str = RELEASE, namespace: str = NAMESPACE) -> str | None:
        """The pod that holds the Lease (its identity is the pod's name, `_`, a random suffix)."""
        out = self.kubectl("get", "lease", name, "-n", namespace, "-o", "json", check=False)
        holder = json.loads(out)["spec"].get("holderIdentity") if out else None
        return holder.rsplit("_", 1)[0] if holder else None

    def first_warning(self, name: str) -> dict[str, Any] | None:
        return next(iter(self.warnings(name)), None)

    def warnings(self, name: str) -> list[dict[str, Any]]:
        """fightwatch's Warning Events about the object `name` in the fighters' namespace."""
        events = self.get("events.events.k8s.io", "-n", FIGHTS)["items"]
        return [
            e
            for e in events
            if e.get("reportingController") == "fightwatch"
            and e["regarding"]["name"] == name
            and e["type"] == "Warning"
        ]


class _Connection(http.client.HTTPSConnection):
    """HTTPS to an address, the certificate verified for another name (a Service's DNS name: no cluster DNS here)."""

    def __init__(self, host: str, port: int, *, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__(host, port, timeout=30, context=context)
        self._context, self._server_name = context, server_name

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self._server_name)


def _terminating(pod: dict[str, Any]) -> bool:
    return pod["metadata"].get("deletionTimestamp") is not None


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def audit_webhook_kubeconfig(workdir: Path) -> Path:
    """The API server's audit webhook kubeconfig: the chart's audit Service at its fixed cluster IP, whose certificate
    `prepare` has the cluster's CA sign, and which the chart's clientCASecret verifies the API server by."""
    return control_plane.audit_webhook_kubeconfig(workdir, f"https://{AUDIT_IP}:{AUDIT_PORT}{AUDIT_PATH}")


def values(c: Cluster, **extra: Any) -> Path:
    repository, tag = c.image.rsplit(":", 1)
    values: dict[str, Any] = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "replicaCount": 2,
        "leaderElection": {"enabled": True},
        "findingsReader": {"subjects": [{"kind": "ServiceAccount", "name": READER_SA, "namespace": NAMESPACE}]},
        "auditWebhook": {
            "enabled": True,
            "port": AUDIT_PORT,
            "tlsSecret": "audit-tls",
            "clientCASecret": "audit-ca",
            "service": {"clusterIP": AUDIT_IP},
        },
        "config": {"detection": {"resolve": {"after": "30m"}}},  # nothing resolves while the module runs
        **extra,
    }
    path = c.node.workdir / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def apply_label(c: Cluster, user: str, name: str, value: str) -> None:
    """`kubectl apply --server-side` of the ConfigMap `name` with label owner=VALUE, as `user` with its own field
    manager, taking the field from whoever holds it (--force-conflicts): what two GitOps tools do."""
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": FIGHTS, "labels": {"owner": value}},
        "data": {"a": "1"},
    }
    subprocess.run(
        [
            str(c.node.control_plane.kubectl),
            f"--kubeconfig={c.node.kubeconfig_for(user)}",
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={user}-gitops",
            "-f",
            "-",
        ],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        check=True,
    )


def fight(c: Cluster, name: str, writes: range) -> None:
    for n in writes:
        user = ("alpha", "beta")[n % 2]
        apply_label(c, user, name, user)
        time.sleep(0.3)  # the writers' pace, not a readiness wait


def finding_in(findings: list[dict[str, Any]], name: str, kind: str = "fight") -> dict[str, Any] | None:
    return next((f for f in findings if f["object"]["name"] == name and f["type"] == kind), None)


def pod_ips(c: Cluster, namespace: str = NAMESPACE, release: str = RELEASE) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["status"]["podIP"] for p in c.pods(namespace, f"app.kubernetes.io/instance={release}")
    }


def prepare(node: Node, helm: str, image: str, archive: Path) -> Cluster:
    """Import the image, and make what the chart's values name: the namespaces, Prometheus's and a findings reader's
    service accounts, the audit webhook's serving certificate (for its fixed cluster IP) and client CA, and the
    fighters' right to edit their namespace."""
    node.import_image(archive)
    c = Cluster(node=node, helm=helm, image=image)
    for namespace in (NAMESPACE, FIGHTS, PROMETHEUS_SA[0]):
        c.kubectl("create", "namespace", namespace)
    c.kubectl("create", "serviceaccount", PROMETHEUS_SA[1], "-n", PROMETHEUS_SA[0])
    c.kubectl("create", "serviceaccount", READER_SA, "-n", NAMESPACE)
    cert, key = node.control_plane.serving_certificate("audit-webhook", ips=[AUDIT_IP])
    c.kubectl("create", "secret", "tls", "audit-tls", f"--cert={cert}", f"--key={key}", "-n", NAMESPACE)
    ca = f"--from-file=ca.crt={node.control_plane.ca_file}"
    c.kubectl("create", "secret", "generic", "audit-ca", ca, "-n", NAMESPACE)
    c.kubectl("create", "rolebinding", "fighters", "--clusterrole=edit", "--user=alpha", "--user=beta", "-n", FIGHTS)
    return c
