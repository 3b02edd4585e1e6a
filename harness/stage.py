"""A stage for real programs: a control plane with its audit log and kube-controller-manager, the third-party
controllers running out of cluster with kubeconfigs of their own, and the clients' tools (helm, kubectl, curl), each
with an identity of its own.

    stage = await Stage.open(cp, workdir)      # identities, RBAC, CRDs, cainjector and kustomize-controller running
    await stage.helm(3, "upgrade", "--install", ...)
    await stage.kubectl(SCRIPT)("scale", ...)
    await stage.close()

Everything that acts is a real program: cert-manager's CA injector and Flux's kustomize-controller
(`harness.programs`, built from Go modules), kube-controller-manager's controllers (each with its own service account),
Helm 3 and Helm 4, the release's kubectl, and curl. The harness itself only sets the stage (namespaces, RBAC, the CA
Secret a certificate issuer would have made, the artifacts a Flux source would serve) as the admin, whose requests the
recordings leave out.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import io
import os
import subprocess
import tarfile
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import orjson
import yaml
from kubernetes_asyncio.client import ApiClient

from . import programs
from .control_plane import ControlPlane, free_port
from .identities import Identity, provision
from .kube import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CRDS,
    EXTERNAL_ARTIFACTS,
    JSON,
    KUSTOMIZATIONS,
    LEASES,
    ROLE_BINDINGS,
    ApiError,
    Kube,
    new_api_client,
)
from .kubectl import Kubectl, KubectlError

HARNESS_MANAGER = "fightwatch-harness"
READY_DEADLINE = 120.0  # seconds for a controller to take its Lease, a CRD to be established
POLL = 0.2  # seconds between two looks at something the stage waits for (never a readiness guess)
COMMAND_TIMEOUT = 120.0

T = TypeVar("T")


async def until(check: Callable[[], Awaitable[T | None]], *, what: str, deadline: float = READY_DEADLINE) -> T:
    """What `check()` returns once it is not None, looking every POLL seconds; TimeoutError naming `what` (what was
    waited for) after `deadline` seconds."""
    give_up = time.monotonic() + deadline
    while True:
        found = await check()
        if found is not None:
            return found
        if time.monotonic() > give_up:
            raise TimeoutError(f"{what}: not within {deadline:.0f}s")
        await asyncio.sleep(POLL)


# The programs' identities: the namespaces and service accounts their installs give them, a pod each.
CAINJECTOR = Identity("cert-manager", "cert-manager-cainjector", "cert-manager-cainjector-7d9f8b6c5-2xkqp")
KUSTOMIZE = Identity("flux-system", "kustomize-controller", "kustomize-controller-5b8c9d7f6-w4n2z")
# The clients: a CI pipeline that runs helm, one that applies manifests with kubectl in a loop, a CronJob's kubectl
# script, and a legacy sync job that PATCHes with curl. Each sends its own tool's User-Agent.
DEPLOYER = Identity("ci", "release-pipeline", "release-pipeline-29384710-k7x2m")
SYNC = Identity("ci", "config-sync", "config-sync-6f7d8c9b5-q2w8e")
SCRIPT = Identity("ops", "replica-tuner", "replica-tuner-29384720-4hq9d")
LEGACY = Identity("ops", "legacy-sync", "legacy-sync-5c6d7e8f9-r3t5y")
IDENTITIES = (CAINJECTOR, KUSTOMIZE, DEPLOYER, SYNC, SCRIPT, LEGACY)
# A person, with kubectl and a static token (as an OIDC user would be): cluster-admin.
PERSON = "jane@example.com"

# cert-manager's Helm chart gives the cainjector these permissions (its ClusterRole `cert-manager-cainjector`, and a
# Role for its leader-election Lease in kube-system).
CAINJECTOR_RULES = [
    {"apiGroups": ["cert-manager.io"], "resources": ["certificates"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "create", "update", "patch"]},
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
        "verbs": ["get", "list", "watch", "update", "patch"],
    },
    {
        "apiGroups": ["apiregistration.k8s.io"],
        "resources": ["apiservices"],
        "verbs": ["get", "list", "watch", "update", "patch"],
    },
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch", "update", "patch"],
    },
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update", "patch"]},
]
# The CRDs the programs need, from their modules (a glob in the module): cert-manager's Certificates (the cainjector
# watches them), and Flux's Kustomizations and every source kind (kustomize-controller watches them all).
CRD_FILES = (
    ("cainjector", "deploy/crds/cert-manager.io_certificates.yaml"),
    ("kustomize-controller", "config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"),
    ("source-controller", "config/crd/bases/source.toolkit.fluxcd.io_*.yaml"),
)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def self_signed_ca(workdir: Path, name: str) -> str:
    """A throw-away CA certificate (PEM), as an issuer would have made it."""
    key, cert = workdir / f"{name}.key", workdir / f"{name}.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "365",
         "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert.read_text()


class ArtifactServer:
    """What a Flux source serves: tarballs of manifests over HTTP, one per ExternalArtifact, on a loopback port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        handler = _quiet_handler(str(root))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="artifacts", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def publish(self, name: str, manifests: Sequence[JSON]) -> JSON:
        """Write a tarball of these manifests; return the `status.artifact` that names it."""
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w:gz") as tar:
            text = "---\n".join(yaml.safe_dump(m, sort_keys=False) for m in manifests).encode()
            info = tarfile.TarInfo("manifests.yaml")
            info.size, info.mtime = len(text), 0
            tar.addfile(info, io.BytesIO(text))
        blob = data.getvalue()
        digest = hashlib.sha256(blob).hexdigest()
        path = f"{name}-{digest[:12]}.tar.gz"
        (self.root / path).write_bytes(blob)
        return {
            "path": path,
            "url": f"{self.url}/{path}",
            "revision": f"latest@sha256:{digest}",
            "digest": f"sha256:{digest}",
            "lastUpdateTime": now_rfc3339(),
            "size": len(blob),
        }

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _quiet_handler(directory: str) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=directory, **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@dataclass
class Stage:
    cp: ControlPlane
    workdir: Path
    admin: Kube
    kubeconfigs: dict[str, Path]  # identity's user (or PERSON) -> its kubeconfig
    tokens: dict[Identity, str] = field(repr=False)
    artifacts: ArtifactServer
    helm_binaries: dict[int, Path]
    _clients: list[ApiClient] = field(default_factory=list, repr=False)

    # ----------------------------------------------------------------------------------------------- set-up

    @classmethod
    async def open(cls, cp: ControlPlane, workdir: Path) -> Stage:
        """Identities and their permissions, and the programs' CRDs; `start_controllers` starts the controllers."""
        helm = {3: programs.binary("helm-v3"), 4: programs.binary("helm-v4")}
        programs.binary("cainjector"), programs.binary("kustomize-controller")  # (built before anything starts)
        admin_client = await new_api_client(cp.kubeconfig)
        admin = Kube(admin_client)
        tokens = await provision(admin, IDENTITIES)
        kubeconfigs = {i.user: cp.kubeconfig_with_token(i.user, tokens[i]) for i in IDENTITIES}
        kubeconfigs[PERSON] = cp.kubeconfig_for(PERSON)
        stage = cls(
            cp, workdir, admin, kubeconfigs, tokens, ArtifactServer(workdir / "artifacts"), helm, [admin_client]
        )
        await stage._grant()
        await stage._install_crds()
        await stage._wait_aggregated("edit")
        return stage

    async def _wait_aggregated(self, role: str) -> None:
        """Wait until kube-controller-manager's clusterrole-aggregation controller has filled a default role."""

        async def rules() -> object | None:
            return (await self.admin.get(CLUSTER_ROLES.path(name=role))).get("rules") or None

        await until(rules, what=f"ClusterRole {role} aggregated")

    async def start_controllers(self) -> None:
        """Start cainjector and kustomize-controller, and wait until each works: the cainjector holds its Lease;
        kustomize-controller, which takes its Lease's namespace from the pod it runs in, runs without leader election
        out of cluster (as Flux's docs run it locally) and answers on /readyz."""
        cp, kubeconfigs = self.cp, self.kubeconfigs
        cp.start_program(
            "cainjector",
            [str(programs.binary("cainjector")), "--leader-election-namespace=kube-system"],
            env={"KUBECONFIG": str(kubeconfigs[CAINJECTOR.user])},
        )
        health = free_port()
        cp.start_program(
            "kustomize-controller",
            [
                str(programs.binary("kustomize-controller")),
                "--feature-gates=ExternalArtifact=true",
                "--metrics-addr=0",
                f"--health-addr=127.0.0.1:{health}",
                "--log-level=info",
            ],
            env={"KUBECONFIG": str(kubeconfigs[KUSTOMIZE.user]), "RUNTIME_NAMESPACE": KUSTOMIZE.namespace},
        )
        await self.wait_leading("cainjector", "kube-system", "cert-manager-cainjector-leader-election")
        await self.wait_ready("kustomize-controller", f"http://127.0.0.1:{health}/readyz")

    async def _grant(self) -> None:
        admin = self.admin
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "cert-manager-cainjector"},
            "rules": CAINJECTOR_RULES,
        }
        await admin.ensure(CLUSTER_ROLES.path(), role, manager=HARNESS_MANAGER)
        grants: list[tuple[str, str, str, str]] = [  # (binding, role, subject kind, subject)
            ("cert-manager-cainjector", "cert-manager-cainjector", "ServiceAccount", CAINJECTOR.user),
            ("cluster-reconciler-flux-system", "cluster-admin", "ServiceAccount", KUSTOMIZE.user),  # as Flux installs
            ("release-pipeline", "cluster-admin", "ServiceAccount", DEPLOYER.user),
            ("config-sync", "cluster-admin", "ServiceAccount", SYNC.user),
            ("jane", "cluster-admin", "User", PERSON),
        ]
        for name, role_name, kind, subject in grants:
            await admin.ensure(
                CLUSTER_ROLE_BINDINGS.path(),
                _binding("ClusterRoleBinding", name, role_name, kind, subject),
                manager=HARNESS_MANAGER,
            )

    async def grant_edit(self, identity: Identity, namespace: str) -> None:
        """The `edit` role in one namespace, as a CronJob's or a job's service account has it there."""
        binding = _binding("RoleBinding", f"{identity.name}-edit", "edit", "ServiceAccount", identity.user)
        binding["metadata"]["namespace"] = namespace
        await self.admin.ensure(ROLE_BINDINGS.path(namespace), binding, manager=HARNESS_MANAGER)

    async def _install_crds(self) -> None:
        files = [f for program, pattern in CRD_FILES for f in sorted(programs.module_dir(program).glob(pattern))]
        for file in files:
            for crd in yaml.safe_load_all(file.read_text()):
                if crd:
                    await self.admin.ensure(CRDS.path(), crd, manager=HARNESS_MANAGER)
                    await self._wait_established(crd["metadata"]["name"])

    async def _wait_established(self, name: str) -> None:
        async def established() -> bool | None:
            crd = await self.admin.get(CRDS.path(name=name))
            conditions = (crd.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions) or None

        await until(established, what=f"CRD {name} established")

    async def wait_leading(self, program: str, namespace: str, lease: str) -> None:
        """Wait until a controller holds its leader-election Lease (it then reconciles); raise if it exits first."""
        give_up = time.monotonic() + READY_DEADLINE
        while True:
            self.cp.check_program(program)
            try:
                found = await self.admin.get(LEASES.path(namespace, lease))
            except ApiError as exc:
                if exc.status != 404:
                    raise
            else:
                if found.get("spec", {}).get("holderIdentity"):
                    return
            if time.monotonic() > give_up:
                raise TimeoutError(f"{program} did not take Lease {namespace}/{lease} within {READY_DEADLINE:.0f}s")
            await asyncio.sleep(POLL)

    async def wait_ready(self, program: str, url: str) -> None:
        """Wait until a program's health endpoint answers 200; raise if it exits first."""
        give_up = time.monotonic() + READY_DEADLINE
        last = "no answer yet"
        while True:
            self.cp.check_program(program)
            try:
                status = await asyncio.to_thread(_status_of, url)
            except OSError as exc:
                last = str(exc)
            else:
                if status == 200:
                    return
                last = f"HTTP {status}"
            if time.monotonic() > give_up:
                raise TimeoutError(f"{program} not ready at {url} within {READY_DEADLINE:.0f}s ({last})")
            await asyncio.sleep(POLL)

    async def restart_cainjector(self) -> None:
        """Stop cainjector as a pod is stopped (SIGTERM: it releases its Lease) and start it again."""
        self.cp.stop_program("cainjector")
        self.cp.start_program(
            "cainjector",
            [str(programs.binary("cainjector")), "--leader-election-namespace=kube-system"],
            env={"KUBECONFIG": str(self.kubeconfigs[CAINJECTOR.user])},
        )
        await self.wait_leading("cainjector", "kube-system", "cert-manager-cainjector-leader-election")

    async def close(self) -> None:
        self.artifacts.close()
        for client in self._clients:
            await client.close()

    # ----------------------------------------------------------------------------------------------- tools

    def kubectl(self, who: Identity | str) -> Kubectl:
        """The release's kubectl, authenticated as an identity (or PERSON)."""
        user = who.user if isinstance(who, Identity) else who
        return Kubectl(self.cp.kubectl, self.kubeconfigs[user])

    async def helm(self, major: int, *args: str, who: Identity = DEPLOYER) -> str:
        """Run Helm 3 or 4 as `who` (its HOME directories in the workdir); its output; KubectlError-like on failure."""
        home = self.workdir / f"helm{major}"
        env = {
            "KUBECONFIG": str(self.kubeconfigs[who.user]),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        return await run(self.helm_binaries[major], *args, env=env)

    async def curl(self, who: Identity, method: str, path: str, body: JSON, content_type: str) -> str:
        """curl as a legacy job runs it: the cluster's CA, a bearer token read from a file (never on the command line),
        curl's own User-Agent, and no field manager."""
        headers = self.workdir / f"headers-{who.name}"
        if not headers.exists():
            headers.write_text(f"Authorization: Bearer {self.tokens[who]}\n")
            headers.chmod(0o600)
        return await run(
            Path("curl"),
            "--silent", "--show-error", "--fail-with-body", "--cacert", str(self.cp.ca_file),
            "-H", f"@{headers}", "-H", f"Content-Type: {content_type}",
            "-X", method, "--data-binary", orjson.dumps(body).decode(), f"{self.cp.url}{path}",
        )  # fmt: skip

    async def external_artifact(self, namespace: str, name: str, manifests: Sequence[JSON]) -> None:
        """An ExternalArtifact whose status serves these manifests, as a Flux source-controller (or another producer)
        publishes one."""
        obj = {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "ExternalArtifact",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }
        created = await self.admin.ensure(EXTERNAL_ARTIFACTS.path(namespace), obj, manager=HARNESS_MANAGER)
        artifact = self.artifacts.publish(f"{namespace}-{name}", manifests)
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "Succeeded",
            "message": f"stored artifact for revision '{artifact['revision']}'",
            "lastTransitionTime": now_rfc3339(),
            "observedGeneration": created["metadata"].get("generation", 1),
        }
        created["status"] = {"artifact": artifact, "conditions": [ready]}
        await self.admin.replace(EXTERNAL_ARTIFACTS.path(namespace, name, "status"), created, manager=HARNESS_MANAGER)

    async def kustomization(self, namespace: str, name: str, *, interval: str) -> None:
        """A Flux Kustomization that applies what the ExternalArtifact of the same name serves."""
        obj = {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "interval": interval,
                "sourceRef": {"kind": "ExternalArtifact", "name": name},
                "path": "./",
                "prune": True,
            },
        }
        await self.admin.ensure(KUSTOMIZATIONS.path(namespace), obj, manager=HARNESS_MANAGER)


def _status_of(url: str) -> int:
    """GET a loopback health endpoint of a program the stage runs; its HTTP status."""
    with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - a loopback URL of our own
        return int(answer.status)


def _binding(kind: str, name: str, role: str, subject_kind: str, subject: str) -> JSON:
    if subject_kind == "ServiceAccount":
        _, _, namespace, account = subject.split(":")
        who: JSON = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    else:
        who = {"apiGroup": "rbac.authorization.k8s.io", "kind": subject_kind, "name": subject}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [who],
    }


async def run(binary: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run a program to completion; its standard output. KubectlError (its arguments and stderr) when it fails."""
    proc = await asyncio.create_subprocess_exec(
        str(binary),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise KubectlError(f"{binary.name} {' '.join(args[:3])}: no answer after {COMMAND_TIMEOUT:.0f}s") from None
    if proc.returncode != 0:
        text = (err or out).decode(errors="replace").strip()
        raise KubectlError(f"{binary.name} {' '.join(args[:3])} exited {proc.returncode}: {text}")
    return out.decode()
