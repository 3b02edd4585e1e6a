"""`kubectl fightwatch`: the real kubectl of the pinned release runs the plugin against a real API server.

Users of their own (static tokens): `scanner` may `view` the whole cluster, `tenant` only one namespace (a
RoleBinding to the built-in `view` ClusterRole). The API server's audit log (every request at Metadata level)
shows what each scan sent: lists, watches and access reviews, no write. A scan watches while a fight and a hot loop
run; a tenant's scan finds its namespace's fight and says what it could not watch; a scan in a real
pseudo-terminal shows a status line that updates, and ends cleanly on Ctrl-C with the summary.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

from harness import scenarios
from harness.control_plane import ADMIN_USER, ControlPlane
from harness.kube import CLUSTER_ROLE_BINDINGS, CONFIGMAPS, JSON, ROLE_BINDINGS, Kube, new_api_client
from tests.control_planes import running_control_plane

SCANNER, TENANT, NOBODY = "scanner", "tenant", "nobody"
TENANT_NS = "tenant-team"
POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}
BIN = Path(sys.executable).parent
DEADLINE = 120.0  # seconds for a scan to get ready, or to end once its time is up
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
REVIEWS = {"selfsubjectaccessreviews", "selfsubjectreviews"}  # answered, never stored
ESCAPE = "\x1b"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    # (kube-controller-manager's clusterrole-aggregation controller fills in `view`'s rules)
    yield from running_control_plane(
        tmp_path_factory, "scan", audit_policy=POLICY, users=(SCANNER, TENANT, NOBODY), controller_manager=True
    )


@pytest.fixture(scope="module")
async def admin(plane: ControlPlane) -> AsyncIterator[ApiClient]:
    client = await new_api_client(plane.kubeconfig)
    kube = Kube(client)
    await kube.ensure_namespace(TENANT_NS)
    await _bind_view(kube, SCANNER, None)
    await _bind_view(kube, TENANT, TENANT_NS)
    async with asyncio.timeout(DEADLINE):  # until `view` is aggregated and both bindings are in force
        while not all([await _may(kube, SCANNER, None), await _may(kube, TENANT, TENANT_NS)]):  # noqa: ASYNC110
            await asyncio.sleep(0.2)  # polling the authorizer for a known answer, not waiting blindly
    try:
        yield client
    finally:
        await client.close()


async def _bind_view(kube: Kube, user: str, namespace: str | None) -> None:
    """Bind the `view` ClusterRole to `user` as `<user>-view`: a RoleBinding in `namespace`, or a ClusterRoleBinding
    (everywhere)."""
    resource = CLUSTER_ROLE_BINDINGS if namespace is None else ROLE_BINDINGS
    binding = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": f"{user}-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    await kube.ensure(resource.path(namespace), binding, manager="test")


async def _may(kube: Kube, user: str, namespace: str | None) -> bool:
    """May `user` list ConfigMaps (in `namespace`, or everywhere)? A SubjectAccessReview, as the admin."""
    attributes = {"verb": "list", "resource": "configmaps", **({"namespace": namespace} if namespace else {})}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": attributes},
    }
    answer = await kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review, manager="test")
    return bool(answer.get("status", {}).get("allowed"))


@dataclass
class Scanned:
    status: int
    stdout: str
    stderr: str

    def findings(self) -> list[JSON]:
        return [orjson.loads(line) for line in self.stdout.splitlines() if line.strip()]


def _environment(kubeconfig: Path) -> dict[str, str]:
    """kubectl finds the plugin on PATH (the venv's bin), as after `pip install`."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(kubeconfig)}


async def _start(plane: ControlPlane, kubeconfig: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(plane.kubectl), "fightwatch", *args,
        env=_environment(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _until_ready(scan: asyncio.subprocess.Process, seen: list[str]) -> None:
    """Read the scan's standard error until it says every watch is open (writes from then on are seen live)."""
    assert scan.stderr is not None
    async with asyncio.timeout(DEADLINE):
        while True:
            line = (await scan.stderr.readline()).decode()
            if not line:
                raise AssertionError(f"the scan ended before it was ready: {''.join(seen)}")
            seen.append(line)
            if line.startswith("Watching "):
                return


async def _finish(scan: asyncio.subprocess.Process, seen: list[str]) -> Scanned:
    async with asyncio.timeout(DEADLINE + 60):
        stdout, stderr = await scan.communicate()
    assert scan.returncode is not None
    return Scanned(scan.returncode, stdout.decode(), "".join(seen) + stderr.decode())


def _writes_by(log: Path, user: str) -> tuple[list[str], int]:
    """(the requests of `user` that could write, as `verb resource`; how many list and watch requests it made)."""
    writes, reads = [], 0
    for line in log.read_bytes().splitlines():
        event = orjson.loads(line)
        if event["user"]["username"] != user or event["stage"] != "ResponseComplete":
            continue
        resource = (event.get("objectRef") or {}).get("resource", "")
        if event["verb"] in ("list", "watch"):
            reads += 1
        elif event["verb"] in WRITE_VERBS and resource not in REVIEWS:
            writes.append(f"{event['verb']} {resource}")
    return writes, reads


@dataclass
class Scans:
    """The two scans of one minute: `scanner`'s cluster-wide one (capture in `record`) and `tenant`'s."""

    cluster: Scanned
    tenant: Scanned
    record: Path
    report: Path


@pytest.fixture(scope="module")
async def scans(plane: ControlPlane, admin: ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Scans:
    """Both scans at once, through the real kubectl, while a fight and a hot loop run cluster-wide and a fight runs
    in the tenant's namespace."""
    out = tmp_path_factory.mktemp("scans")
    record, report = out / "scan.jsonl", out / "tenant.html"
    tenant_kubeconfig = plane.kubeconfig_for(TENANT)
    await asyncio.to_thread(  # as a tenant's kubeconfig names it: the context's namespace
        subprocess.run,
        [str(plane.kubectl), "config", "set-context", "--current", f"--namespace={TENANT_NS}",
         f"--kubeconfig={tenant_kubeconfig}"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert plane.audit_log is not None
    cluster_seen: list[str] = []
    tenant_seen: list[str] = []
    cluster = await _start(
        plane, plane.kubeconfig_for(SCANNER), "scan", "--for", "60s", "-o", "json", "--fail-on-findings",
        "--record", str(record), "--audit-follow", str(plane.audit_log),
    )  # fmt: skip
    tenant = await _start(plane, tenant_kubeconfig, "--for", "60s", "-o", "json", "--html", str(report))
    await asyncio.gather(_until_ready(cluster, cluster_seen), _until_ready(tenant, tenant_seen))
    await asyncio.gather(
        scenarios.fight_update_vs_update_label(admin),
        scenarios.hot_loop_timestamp(admin),
        _fight_in(Kube(admin), TENANT_NS),
    )
    cluster_result, tenant_result = await asyncio.gather(_finish(cluster, cluster_seen), _finish(tenant, tenant_seen))
    return Scans(cluster_result, tenant_result, record, report)


def _found(scanned: Scanned) -> set[tuple[str, str, str]]:
    return {(f["type"], f["object"]["namespace"], f["object"]["name"]) for f in scanned.findings()}


async def test_kubectl_fightwatch_finds_a_fight_and_a_hot_loop_and_writes_nothing(
    plane: ControlPlane, scans: Scans
) -> None:
    result = scans.cluster
    assert result.status == 3, result.stderr  # --fail-on-findings, and something was found
    found = _found(result)
    assert ("fight", "fight-update-vs-update-label", "settings") in found, result.stderr
    assert ("hot_loop", "hot-loop-timestamp", "reconcile-state") in found, result.stderr
    assert ("fight", TENANT_NS, "shared-settings") in found, result.stderr
    fight = next(f for f in result.findings() if f["object"]["name"] == "settings")
    assert {w["manager"] for w in fight["writers"]} >= {"team-a-operator", "team-b-operator"}
    # joined with the audit events as they were written: the users behind the managers
    assert {(c["manager"], c["user"]) for c in fight["clients"]} >= {
        ("team-a-operator", ADMIN_USER),
        ("team-b-operator", ADMIN_USER),
    }, fight["clients"]
    assert "found fight" in result.stderr  # told as it opened
    assert ESCAPE not in result.stderr + result.stdout  # off a terminal: plain lines
    # view may not read Secrets or RBAC objects: said, and the rest watched
    assert "Not watched" in result.stderr
    assert "secrets" in result.stderr

    assert plane.audit_log is not None
    writes, reads = _writes_by(plane.audit_log, SCANNER)
    assert reads > 0  # (it did watch, as SCANNER)
    assert writes == []


async def test_the_capture_replays_to_the_same_findings(scans: Scans) -> None:
    replayed = await asyncio.to_thread(
        subprocess.run,
        [str(BIN / "fightwatch"), "replay", str(scans.record), "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    again = {(f["type"], f["object"]["namespace"], f["object"]["name"]) for line in replayed.stdout.splitlines()
             if (f := orjson.loads(line))}  # fmt: skip
    watched = {f for f in _found(scans.cluster) if f[0] in ("fight", "hot_loop")}  # (not those of audit events)
    assert again == watched


async def test_a_tenant_scans_its_namespace_and_is_told_what_it_cannot_watch(plane: ControlPlane, scans: Scans) -> None:
    result = scans.tenant
    assert result.status == 0, result.stderr
    assert _found(result) == {("fight", TENANT_NS, "shared-settings")}, result.stderr  # its namespace's only
    assert f"Watched in namespace {TENANT_NS} only (not cluster-wide)" in result.stderr
    assert "Not watched" in result.stderr
    assert "nodes" in result.stderr  # cluster-scoped: nowhere to fall back
    assert "shared-settings" in scans.report.read_text()
    assert plane.audit_log is not None
    writes, reads = _writes_by(plane.audit_log, TENANT)
    assert reads > 0
    assert writes == []


async def test_exit_statuses(plane: ControlPlane, admin: ApiClient) -> None:
    kubeconfig = plane.kubeconfig_for(SCANNER)
    await Kube(admin).ensure_namespace("quiet")
    assert plane.audit_log is not None
    quiet = await _start(plane, kubeconfig, "-n", "quiet", "--resources", "cm,deploy", "--for", "2s",
                         "--fail-on-findings", "--audit", str(plane.audit_log))  # fmt: skip
    result = await _finish(quiet, [])
    assert result.status == 0, result.stderr
    assert "No fights, hot loops or conflicts found." in result.stdout
    audited = next(line for line in result.stdout.splitlines() if line.endswith(" audit events."))
    assert int(audited.split()[0].replace(",", "")) > 0  # the log was read and joined

    refused = await _finish(await _start(plane, kubeconfig, "--resources", "cm", "-l", "a=b=c", "--for", "30s"), [])
    assert refused.status == 2
    assert "-l a=b=c: found '='" in refused.stderr  # the API server's word, at start

    nobody = await _finish(await _start(plane, plane.kubeconfig_for(NOBODY), "--for", "30s"), [])
    assert nobody.status == 2
    assert "may not list and watch any resource" in nobody.stderr

    unknown = await _finish(await _start(plane, kubeconfig, "--resources", "cm,nosuchkind", "--for", "2s"), [])
    assert unknown.status == 2
    assert 'the server doesn\'t have a resource type "nosuchkind"' in unknown.stderr


async def _fight_in(kube: Kube, namespace: str, rounds: int = 4) -> None:
    path = CONFIGMAPS.path(namespace, "shared-settings")
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared-settings"}}
    await kube.ensure(CONFIGMAPS.path(namespace), manifest, manager="team-a-operator")
    for _ in range(rounds):
        for team in ("team-a", "team-b"):

            def label(obj: JSON, owner: str = team) -> None:
                obj["metadata"].setdefault("labels", {})["owner"] = owner

            await kube.read_modify_write(path, label, manager=f"{team}-operator")
            await asyncio.sleep(scenarios.STEP)  # the writers' pace (the fight's timing, not a wait for readiness)


def _pty_scan(plane: ControlPlane, kubeconfig: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    """The scan on a real pseudo-terminal (its controlling terminal, 100 columns): Ctrl-C typed there reaches it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))

    def controlling_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {k: v for k, v in _environment(kubeconfig).items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        [str(BIN / "kubectl-fightwatch"), *args],
        stdin=slave, stdout=slave, stderr=slave, env=env,
        start_new_session=True, preexec_fn=controlling_terminal,  # noqa: PLW1509 - (no threads yet: safe)
    )  # fmt: skip
    os.close(slave)
    return process, master


def _read_until(master: int, screen: bytearray, done: object, deadline: float) -> None:
    """Append what the terminal shows to `screen` until `done(screen)` (a callable) is true."""
    assert callable(done)
    while not done(screen):
        if time.monotonic() > deadline:
            raise AssertionError(f"the terminal did not show it in time: {bytes(screen[-2000:])!r}")
        try:
            screen += os.read(master, 4096)
        except OSError:  # (EIO: the process closed the terminal)
            return


async def test_status_line_on_a_terminal_and_ctrl_c(plane: ControlPlane, admin: ApiClient) -> None:
    kubeconfig = plane.kubeconfig_for(SCANNER)
    await Kube(admin).ensure_namespace("terminal")
    process, master = _pty_scan(plane, kubeconfig, "-n", "terminal", "--resources", "configmaps", "--for", "10m")
    screen = bytearray()
    try:
        deadline = time.monotonic() + DEADLINE

        def statuses(shown: bytearray) -> list[bytes]:
            return [bytes(s) for s in shown.split(b"\r\x1b[K") if b" left \xc2\xb7 " in s]

        await asyncio.to_thread(_read_until, master, screen, lambda s: len(set(statuses(s))) >= 3, deadline)
        drawn = statuses(screen)
        assert all(b"\n" not in s.rstrip(b"\r\n") for s in drawn)  # redrawn in place, not new lines
        assert all(len(s.decode(errors="replace").rstrip()) <= 100 for s in drawn)  # cut to the terminal
        os.write(master, b"\x03")  # Ctrl-C, typed
        await asyncio.to_thread(_read_until, master, screen, lambda s: b"watch events" in s, deadline)
        async with asyncio.timeout(DEADLINE):
            status = await asyncio.to_thread(process.wait)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    assert status == 0
    text = screen.decode(errors="replace")
    summary = text[text.rindex("\r\x1b[K") :]  # after the status line was erased for the last time
    assert "No controller fights or hot loops found." in summary
    assert " left · " not in summary.replace("\r\x1b[K", "", 1)
