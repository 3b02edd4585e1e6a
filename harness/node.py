"""A real single-node Kubernetes cluster on this machine, for the tests of the image and the chart.

etcd, kube-apiserver and kube-controller-manager (harness/control_plane.py), kube-scheduler, a kubelet with
containerd and runc, the bridge CNI plugin and kube-proxy in iptables mode: all of the pinned current release, built
from Go modules by ``scripts/control-plane.sh current node``; containerd, runc and the CNI plugins are Debian's
(``scripts/node.sh``, which also builds the pod sandbox image). Synchronous, like the control plane:

    node = start_node(workdir)
    try:
        node.import_image(archive)          # images come from files: no registry is reachable
        ...                                 # node.control_plane.kubeconfig, node.kubectl(...)
    finally:
        node.stop()                         # and everything it changed on the machine is undone

A node changes the machine: it loads br_netfilter, sets sysctls, adds iptables rules, a bridge, network namespaces,
mounts and cgroups. What was there before is written down first (``state.json`` in the cache), and ``stop()`` puts it
back: every process it started killed, with the containers; rules, links, namespaces, mounts and cgroups it added
removed; sysctls set back. A run that could not clean up (SIGKILL) leaves that file behind, and the next
``start_node`` (or ``python -m harness.node --clean-up``) cleans up after it first.

The workarounds this kind of machine needs (a VM without CAP_SYS_RESOURCE, cgroup v1 in hybrid mode, no AppArmor,
no registry) are each explained where they are set below.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from . import REPO_ROOT
from .control_plane import (
    LOG_TAIL_LINES,
    ControlPlane,
    _wait_healthy,
    free_port,
    start_control_plane,
    write_kubeconfig,
)

T = TypeVar("T")

NODE_NAME = "fightwatch-node"
POD_SUBNET = "10.244.0.0/24"
BRIDGE = "fwcni0"  # not cni0 or podman's cni-podman0: nothing else on the machine uses it
READY_DEADLINE = 120.0  # seconds for the node to report Ready
CONTROL_PLANE_SCRIPT = REPO_ROOT / "scripts" / "control-plane.sh"
NODE_SCRIPT = REPO_ROOT / "scripts" / "node.sh"
STATE_FILE = Path(os.environ.get("FIGHTWATCH_CACHE") or Path.home() / ".cache" / "fightwatch") / "node" / "state.json"

# The sysctls a node sets (here, the kubelet's defaults and kube-proxy's): each is set back at stop.
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/ipv4/conf/all/route_localnet",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
NETNS_DIR = Path("/run/netns")  # (/var/run links to /run, and mountinfo names the target)
CONTAINERD_RUN = Path("/run/containerd")  # containerd 1.6 puts its shims' sockets there, whatever its state dir


class NodeError(RuntimeError):
    """The node did not come up, or something on it failed; the message carries what its components logged."""


@functools.cache
def node_tools() -> dict[str, list[str]]:
    """What scripts/node.sh provides: {"containerd": [DIR], "cni": [DIR], "pause": [ARCHIVE, NAME]}."""
    done = subprocess.run(["bash", str(NODE_SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise NodeError(f"{NODE_SCRIPT} failed (exit {done.returncode}):\n{done.stderr.strip()[-3000:]}")
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line.strip()}


@functools.cache
def node_bin_dir() -> Path:
    """kubelet, kube-scheduler and kube-proxy of the current release, built once (scripts/control-plane.sh)."""
    done = subprocess.run(
        ["bash", str(CONTROL_PLANE_SCRIPT), "current", "node"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise NodeError(f"{CONTROL_PLANE_SCRIPT} current node failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def machine_address() -> str:
    """The machine's own address (the source of its default route): what pods reach the API server at."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the kernel only picks a route
        return str(probe.getsockname()[0])


def _run(*argv: str, input_text: str | None = None, check: bool = True) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, input=input_text, check=False)
    if check and done.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


# --- what the machine looked like before ------------------------------------------------------------------------


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


def _mount_points() -> list[str]:
    """Mount points, in the order they were mounted (/proc/self/mountinfo's order)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.encode().decode("unicode_escape"))  # \040 for a space, as the kernel escapes it
    return points


def _links() -> list[str]:
    return [entry.name for entry in Path("/sys/class/net").iterdir()]


def _cgroup_dirs(name: str) -> list[str]:
    """The `name` cgroup in every hierarchy (cgroup v1: one per controller; the unified one) that has it."""
    return [str(path) for path in CGROUP_ROOT.glob(f"*/{name}") if path.is_dir()]


def _snapshot(workdir: Path) -> dict[str, Any]:
    tables = {}
    for tool in ("iptables", "ip6tables"):
        tables[tool] = _run(f"{tool}-save", check=False)
    return {
        "workdir": str(workdir),
        "sysctls": {name: _sysctl_path(name).read_text().strip() for name in SYSCTLS if _sysctl_path(name).exists()},
        "br_netfilter_loaded": Path("/proc/sys/net/bridge").exists(),
        "iptables": tables,
        "links": _links(),
        "netns": sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else [],
        "mounts": _mount_points(),
        "kubepods_cgroups": _cgroup_dirs("kubepods"),
        "containerd_run_existed": CONTAINERD_RUN.exists(),
    }


# --- putting it back --------------------------------------------------------------------------------------------


def _processes_of(predicate: Any) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid() or not _alive(int(entry.name)):
            continue
        with contextlib.suppress(OSError):
            if predicate(entry):
                pids.append(int(entry.name))
    return pids


def _in_pod_cgroup(proc: Path) -> bool:
    return "/kubepods" in (proc / "cgroup").read_text()


def _started_from(workdir: str) -> Any:
    def predicate(proc: Path) -> bool:
        return workdir.encode() in (proc / "cmdline").read_bytes()

    return predicate


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    give_up = time.monotonic() + 10
    for pid in pids:
        while _alive(pid) and time.monotonic() < give_up:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)  # poll interval for the kernel to end it


def _alive(pid: int) -> bool:
    """Whether a process still runs: not gone, and not a zombie (a container's processes, whose shim was killed, are
    reparented to PID 1, which reaps them when it will)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _restore_tables(tool: str, before: str) -> list[str]:
    """Put an iptables (ip6tables) ruleset back as `before` (iptables-save's output) had it."""
    problems = []
    after = _run(f"{tool}-save", check=False)
    tables_before = set(re.findall(r"^\*(\S+)$", before, re.MULTILINE))
    for table in set(re.findall(r"^\*(\S+)$", after, re.MULTILINE)) - tables_before:
        # A table that was not loaded before: empty it (it cannot be unloaded while nftables holds it).
        for args in (["-F"], ["-X"]):
            done = subprocess.run([tool, "-t", table, *args], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                problems.append(f"{tool} -t {table} {' '.join(args)}: {done.stderr.strip()}")
    if before.strip():
        done = subprocess.run([f"{tool}-restore"], input=before, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            problems.append(f"{tool}-restore: {done.stderr.strip()}")
    return problems


def clean_up(state: Mapping[str, Any]) -> list[str]:
    """Undo what a node changed on the machine, from the state written before it started; return what could not be
    undone (empty: everything was)."""
    workdir = state["workdir"]
    # Every process the node started (their command lines name its workdir), then what runs in pods.
    _kill(_processes_of(_started_from(workdir)))
    _kill(_processes_of(_in_pod_cgroup))
    problems = _unmount(state, workdir)
    problems += _remove_network(state)
    for name, value in state["sysctls"].items():
        try:
            _sysctl_path(name).write_text(value + "\n")
        except OSError as exc:
            if _sysctl_path(name).exists():
                problems.append(f"sysctl {name}={value}: {exc}")
    if not state["br_netfilter_loaded"] and shutil.which("modprobe"):
        subprocess.run(["modprobe", "--remove", "br_netfilter"], capture_output=True, check=False)
    # The pods' cgroups (deepest first: a cgroup is removed once it has no children and no processes).
    for top in set(_cgroup_dirs("kubepods")) - set(state["kubepods_cgroups"]):
        for path in sorted(Path(top).glob("**/"), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir()
        if Path(top).exists():
            problems.append(f"cgroup {top} is still there")
    if not state["containerd_run_existed"]:
        subprocess.run(["rm", "-rf", str(CONTAINERD_RUN)], check=False)
    return problems or leftovers(state)


BUILT_IN_CHAINS = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}


def _rules(saved: str) -> set[str]:
    """The rules and non-built-in chains of an iptables-save output, by table (counters left out)."""
    found, table = set(), ""
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith("-A"):
            found.add(f"{table} {line}")
        elif line.startswith(":") and line[1:].split()[0] not in BUILT_IN_CHAINS:
            found.add(f"{table} {line.split()[0]}")
    return found


def leftovers(state: Mapping[str, Any]) -> list[str]:
    """What the machine still has of a node, against the state written before it started (empty: nothing)."""
    found = []
    if pids := _processes_of(_started_from(state["workdir"])) + _processes_of(_in_pod_cgroup):
        found.append(f"processes {pids}")
    before_mounts = set(state["mounts"])
    mounts = [m for m in _mount_points() if m not in before_mounts and m.startswith((state["workdir"], str(NETNS_DIR)))]
    if mounts:
        found.append(f"mounts {mounts}")
    if NETNS_DIR.is_dir() and (netns := sorted({p.name for p in NETNS_DIR.iterdir()} - set(state["netns"]))):
        found.append(f"network namespaces {netns}")
    if links := sorted(set(_links()) - set(state["links"])):
        found.append(f"links {links}")
    for tool, before in state["iptables"].items():
        if rules := sorted(_rules(_run(f"{tool}-save", check=False)) - _rules(before)):
            found.append(f"{tool} rules {rules[:10]}")
    changed = {n: v for n, v in state["sysctls"].items() if _sysctl_path(n).read_text().strip() != v}
    if changed:
        found.append(f"sysctls {sorted(changed)}")
    if cgroups := sorted(set(_cgroup_dirs("kubepods")) - set(state["kubepods_cgroups"])):
        found.append(f"cgroups {cgroups}")
    return found


def _unmount(state: Mapping[str, Any], workdir: str) -> list[str]:
    """Unmount what was mounted since (containers' root filesystems, volumes, network namespaces), newest first."""
    problems = []
    before = set(state["mounts"])
    for point in reversed(_mount_points()):
        if point not in before and point.startswith((workdir, str(NETNS_DIR))):
            done = subprocess.run(["umount", "--lazy", point], capture_output=True, text=True, check=False)
            if done.returncode != 0 and point in _mount_points():
                problems.append(f"umount {point}: {done.stderr.strip()}")
    return problems


def _remove_network(state: Mapping[str, Any]) -> list[str]:
    """Remove the network namespaces and links added since, and put the iptables rules back."""
    problems = []
    if NETNS_DIR.is_dir():
        for entry in NETNS_DIR.iterdir():
            if entry.name not in state["netns"]:
                with contextlib.suppress(OSError):
                    entry.unlink()
    for link in set(_links()) - set(state["links"]):
        done = subprocess.run(["ip", "link", "delete", link], capture_output=True, text=True, check=False)
        if done.returncode != 0 and link in _links():
            problems.append(f"ip link delete {link}: {done.stderr.strip()}")
    for tool, before_rules in state["iptables"].items():
        problems += _restore_tables(tool, before_rules)
    return problems


def clean_up_leftovers() -> None:
    """Clean up after a node that could not (killed): its state file is still there."""
    if not STATE_FILE.exists():
        return
    state = json.loads(STATE_FILE.read_text())
    problems = clean_up(state)
    if problems:
        raise NodeError("cleaning up after an earlier node left: " + "; ".join(problems))
    STATE_FILE.unlink()


# --- the node ---------------------------------------------------------------------------------------------------


@dataclass
class Node:
    """A running node and its control plane. Stop it with stop() (or use it as a context manager)."""

    control_plane: ControlPlane
    address: str  # the machine's address: the node's InternalIP, and the API server's for pods
    workdir: Path
    containerd_socket: Path
    ctr: Path
    pod_logs: Path
    _state: dict[str, Any] = field(repr=False)
    _names: list[str] = field(default_factory=list, repr=False)  # the programs started, in order
    _stopped: bool = field(default=False, repr=False)

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        """Run the release's kubectl as the cluster's admin; return stdout, raise NodeError with stderr on failure."""
        cp = self.control_plane
        return _run(str(cp.kubectl), f"--kubeconfig={cp.kubeconfig}", *args, input_text=input_text, check=check)

    def import_image(self, archive: Path) -> None:
        """Make an image (a docker-archive or OCI tar) available to pods: no registry is reachable here, so pods
        use it with `imagePullPolicy: Never` (or IfNotPresent)."""
        ctr = [str(self.ctr), f"--address={self.containerd_socket}", "--namespace=k8s.io"]
        _run(*ctr, "images", "import", str(archive))

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig that authenticates as `user` (in `groups`) with a client certificate the cluster's CA signs."""
        return _client_kubeconfig(self.control_plane, user, groups, self.workdir / "users" / f"{user}.kubeconfig")

    def pod_output(self, namespace: str, pod: str, container: str) -> str:
        """What a container of a pod wrote on its standard output, from the kubelet's CRI log file (lines of
        `TIME STREAM P|F TEXT`: P is part of a line, F ends one)."""
        out = []
        for log in sorted(self.pod_logs.glob(f"{namespace}_{pod}_*/{container}/*.log")):
            for line in log.read_text(errors="replace").splitlines():
                _time, stream, tag, text = [*line.split(" ", 3), "", "", ""][:4]
                if stream == "stdout":
                    out.append(text if tag == "P" else text + "\n")
        return "".join(out)

    def pod_log(self, namespace: str, pod: str, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of every container log of a pod, every restart's, read from the kubelet's log directory."""
        parts = []
        for log in sorted(self.pod_logs.glob(f"{namespace}_{pod}_*/*/*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.parent.name} ({log.name}):\n" + "\n".join(text))
        return "\n".join(parts) or f"(no container log for {namespace}/{pod})"

    def describe(self, namespace: str, selector: str = "") -> str:
        """Pods, their events and their logs in a namespace: what a failing test prints."""
        args = ["-l", selector] if selector else []
        out = [self.kubectl("get", "pods", "-n", namespace, "-o", "wide", *args, check=False)]
        out.append(self.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False))
        pods = json.loads(self.kubectl("get", "pods", "-n", namespace, "-o", "json", *args, check=False) or "{}")
        out += [self.pod_log(namespace, pod["metadata"]["name"]) for pod in pods.get("items", [])]
        return "\n".join(out)

    def start(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        """Start a component of the node (logging to `name`.log in the workdir); check_running watches it."""
        self.control_plane.start_program(name, argv, env=env)
        self._names.append(name)

    def wait(
        self,
        check: Callable[[], T | None],
        *,
        what: str,
        deadline: float,
        interval: float = 0.5,
        details: Callable[[], str] | None = None,
    ) -> T:
        """What `check()` answers once it is not None, asked every `interval` seconds while the node's components run;
        NodeError naming `what`, with `details()`, after `deadline` seconds."""
        give_up = time.monotonic() + deadline
        while True:
            self.check_running()
            found = check()
            if found is not None:
                return found
            if time.monotonic() > give_up:
                raise NodeError(f"no {what} after {deadline:.0f}s" + (f"\n{details()}" if details else ""))
            time.sleep(interval)  # poll interval, not a readiness guess

    def check_running(self) -> None:
        """Raise NodeError, with its log's tail, if a component of the node has exited."""
        for name in self._names:
            try:
                self.control_plane.check_program(name)
            except RuntimeError as exc:
                raise NodeError(str(exc)) from None

    def stop(self) -> None:
        """Stop every component and container and undo what the node changed on the machine."""
        if self._stopped:
            return
        self._stopped = True
        # Killed, not stopped gracefully: the cluster is thrown away with its state (a graceful stop waits for grace
        # periods: containerd's, the kubelet's, the API server's flush of its audit webhook to pods already gone).
        # Newest first: the kubelet before containerd, so that it restarts nothing meanwhile.
        self.control_plane.kill()
        errors = clean_up(self._state)
        if errors:
            raise NodeError("stopping the node: " + "; ".join(errors))
        STATE_FILE.unlink(missing_ok=True)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _containerd_config(workdir: Path, socket_path: Path, cni_bin: str, cni_conf: Path, pause: str) -> str:
    return f"""\
version = 2
root = "{workdir / "containerd" / "root"}"
state = "{workdir / "containerd" / "state"}"
# containerd's own oom_score_adj is left alone: this process lacks CAP_SYS_RESOURCE, which lowering it takes.
oom_score = 0

[grpc]
  address = "{socket_path}"

[ttrpc]
  address = "{socket_path}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{workdir / "containerd" / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  # No registry is reachable: the sandbox image is the one scripts/node.sh builds and start_node imports.
  sandbox_image = "{pause}"
  # Without CAP_SYS_RESOURCE, a container's oom_score_adj cannot be set below the runtime's own: with the default
  # (false) every pod sandbox fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  # This kind of machine has no AppArmor, and SELinux is off.
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # runc (crun refuses cgroups in hybrid mode), with cgroupfs: there is no systemd to delegate cgroups to.
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
"""


def _cni_config(workdir: Path) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "fightwatch",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,  # the machine routes to the pods through the bridge (the API server's webhooks)
                "ipMasq": True,
                "hairpinMode": True,  # a pod reaches itself through its Service
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(workdir / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _kubelet_config(workdir: Path, socket_path: Path, healthz_port: int, port: int, ca_file: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This kind of machine mounts cgroup v1 (hybrid), which the kubelet refuses unless told; cgroupfs, as
        # containerd's runc is told: no systemd runs here.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        # The kubelet's own default (-999) needs CAP_SYS_RESOURCE, which this process lacks.
        "oomScoreAdj": 0,
        "containerRuntimeEndpoint": f"unix://{socket_path}",
        "address": "0.0.0.0",  # noqa: S104 (the API server reaches the kubelet at the node's address)
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(workdir / "pod-logs"),
        "serializeImagePulls": False,
        "registerNode": True,
        # No cluster DNS runs: pods get the machine's resolv.conf, and Services by their environment variables.
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
        "protectKernelDefaults": False,
        # Test-sized: images are imported from files, never pulled, and garbage collection would delete them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }


def _kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # Leave the machine's conntrack limits and timeouts alone (0: do not set them).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        # -999 needs CAP_SYS_RESOURCE.
        "oomScoreAdj": 0,
        "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
    }


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _client_kubeconfig(cp: ControlPlane, user: str, groups: tuple[str, ...], path: Path) -> Path:
    cert, key = cp.client_certificate(user, groups)
    credentials = {"client-certificate": str(cert), "client-key": str(key)}
    return write_kubeconfig(path, server=cp.url, ca_file=cp.ca_file, user=user, credentials=credentials)


def _prepare_machine() -> None:
    # Service traffic between pods on one bridge must pass through iptables (kube-proxy's DNAT): br_netfilter.
    if not Path("/proc/sys/net/bridge").exists():
        _run("modprobe", "br_netfilter")
    for name in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
        _sysctl_path(name).write_text("1\n")


def _wait_node_ready(node: Node, deadline: float = READY_DEADLINE) -> None:
    last = ["not registered yet"]  # the Ready condition last seen, for the error

    def ready() -> bool | None:
        out = node.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if not out:
            return None
        conditions = {c["type"]: c for c in json.loads(out)["status"].get("conditions", [])}
        condition = conditions.get("Ready", {})
        last[0] = f"Ready={condition.get('status')}: {condition.get('message', '')}"
        return condition.get("status") == "True" or None

    def kubelet_log() -> str:
        lines = node.control_plane.log_path("kubelet").read_text(errors="replace").splitlines()
        return f"({last[0]}); kubelet log:\n" + "\n".join(lines[-LOG_TAIL_LINES:])

    node.wait(ready, what=f"node {NODE_NAME} Ready", deadline=deadline, details=kubelet_log)


def start_node(workdir: Path, *, apiserver_flags: Sequence[str] = (), audit_policy: Mapping[str, Any] | None = None,
               audit_webhook: Path | None = None) -> Node:  # fmt: skip
    """Start a one-node cluster in `workdir` and wait until the node is Ready and the `default` service account exists.

    `audit_policy`, `audit_webhook` and `apiserver_flags` go to the control plane (start_control_plane)."""
    if os.geteuid() != 0:
        raise NodeError("a node runs as root (containerd, the kubelet and kube-proxy change the machine)")
    clean_up_leftovers()
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    tools = node_tools()
    node_bin_dir()  # built before anything starts
    (containerd_dir,), (cni_bin,), (pause_archive, pause_name) = tools["containerd"], tools["cni"], tools["pause"]
    address = machine_address()

    state = _snapshot(workdir)
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps(state))
    cp: ControlPlane | None = None
    node: Node | None = None
    try:
        _prepare_machine()
        cp = start_control_plane(
            workdir, node_address=address, apiserver_flags=apiserver_flags, audit_policy=audit_policy,
            audit_webhook=audit_webhook,
        )  # fmt: skip
        socket_path = workdir / "containerd.sock"
        cni_conf = workdir / "cni" / "net.d"
        _write(cni_conf / "10-fightwatch.conflist", json.dumps(_cni_config(workdir), indent=2))
        config = _write(
            workdir / "containerd" / "config.toml",
            _containerd_config(workdir, socket_path, cni_bin, cni_conf, pause_name),
        )
        node = Node(
            control_plane=cp,
            address=address,
            workdir=workdir,
            containerd_socket=socket_path,
            ctr=Path(containerd_dir) / "ctr",
            pod_logs=workdir / "pod-logs",
            _state=state,
        )
        path = f"{containerd_dir}:{os.environ.get('PATH', '')}"  # containerd finds its shim on PATH
        node.start("containerd", [f"{containerd_dir}/containerd", f"--config={config}"], env={"PATH": path})
        _wait_for_socket(node, socket_path)
        node.import_image(Path(pause_archive))
        _start_node_components(node, node_bin_dir(), path)
        _wait_node_ready(node)
        _wait_default_service_account(node)
    except BaseException:
        if node is not None:
            with contextlib.suppress(NodeError):
                node.stop()
        else:
            if cp is not None:
                cp.stop()
            clean_up(state)
            STATE_FILE.unlink(missing_ok=True)
        raise
    return node


def _start_node_components(node: Node, bin_dir: Path, path: str) -> None:
    """Start the kubelet, kube-proxy, kube-scheduler and kube-controller-manager, and wait until each is healthy."""
    cp, workdir, socket_path = node.control_plane, node.workdir, node.containerd_socket
    kubelet_kubeconfig = _client_kubeconfig(cp, f"system:node:{NODE_NAME}", ("system:nodes",),
                                            workdir / "kubelet" / "kubeconfig")  # fmt: skip
    healthz = free_port()
    kubelet_config = _write(
        workdir / "kubelet" / "config.yaml",
        yaml.safe_dump(_kubelet_config(workdir, socket_path, healthz, free_port(), cp.ca_file)),
    )
    node.start(
        "kubelet",
        [
            str(bin_dir / "kubelet"),
            f"--config={kubelet_config}",
            f"--kubeconfig={kubelet_kubeconfig}",
            f"--root-dir={workdir / 'kubelet' / 'root'}",
            f"--cert-dir={workdir / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={node.address}",
        ],
        env={"PATH": path},
    )

    proxy_kubeconfig = _client_kubeconfig(cp, "system:kube-proxy", (), workdir / "kube-proxy" / "kubeconfig")
    proxy_healthz = free_port()
    proxy_config = _write(
        workdir / "kube-proxy" / "config.yaml",
        yaml.safe_dump(_kube_proxy_config(proxy_kubeconfig, proxy_healthz, free_port())),
    )
    node.start("kube-proxy", [str(bin_dir / "kube-proxy"), f"--config={proxy_config}"])

    scheduler_kubeconfig = _client_kubeconfig(cp, "system:kube-scheduler", (),
                                              workdir / "kube-scheduler" / "kubeconfig")  # fmt: skip
    cert, key = cp.watcher_serving_pair
    scheduler_port = free_port()
    node.start(
        "kube-scheduler",
        [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={scheduler_kubeconfig}",
            f"--authentication-kubeconfig={scheduler_kubeconfig}",
            f"--authorization-kubeconfig={scheduler_kubeconfig}",
            "--authentication-skip-lookup",
            "--bind-address=127.0.0.1",
            f"--secure-port={scheduler_port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            "--leader-elect=false",
        ],
    )
    cp.start_controller_manager()
    for name, port, path_, tls in (
        ("kube-scheduler", scheduler_port, "/healthz", cp.tls_context()),
        ("kubelet", healthz, "/healthz", None),
        ("kube-proxy", proxy_healthz, "/livez", None),
    ):
        _wait_healthy(cp._process(name), port=port, path=path_, tls=tls)


def _wait_for_socket(node: Node, socket_path: Path, deadline: float = 30.0) -> None:
    def answers() -> bool | None:
        version = [str(node.ctr), f"--address={socket_path}", "version"]
        return subprocess.run(version, capture_output=True, check=False).returncode == 0 or None

    node.wait(answers, what=f"containerd answering on {socket_path}", deadline=deadline, interval=0.2)


def _wait_default_service_account(node: Node, deadline: float = 60.0) -> None:
    def made() -> str | None:
        return node.kubectl("get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False) or None

    node.wait(made, what="`default` service account from the controller manager", deadline=deadline, interval=0.2)


@contextlib.contextmanager
def running_node(workdir: Path, **kwargs: Any) -> Iterator[Node]:
    """start_node, stopped (and the machine cleaned up) on leaving, also on SIGTERM."""
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    ours = previous in (signal.SIG_DFL, None)  # (a handler someone else set is theirs to keep)
    if ours:
        signal.signal(signal.SIGTERM, on_term)
    try:
        node = start_node(workdir, **kwargs)
        try:
            yield node
        finally:
            node.stop()
    finally:
        if ours:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _up(workdir: Path) -> None:
    """Start a node with one pod running, say `ready` on stdout, and keep it until SIGINT or SIGTERM (then clean up)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": "default"},
        "spec": {"containers": [{"name": "pause", "image": node_tools()["pause"][1], "imagePullPolicy": "Never"}]},
    }
    with running_node(workdir) as node:
        node.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
        node.kubectl("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")
        print("ready", flush=True)
        signal.pause()


if __name__ == "__main__":
    if sys.argv[1:] == ["--clean-up"]:
        clean_up_leftovers()
    elif sys.argv[1:2] == ["--up"] and len(sys.argv) == 3:
        with contextlib.suppress(KeyboardInterrupt):
            _up(Path(sys.argv[2]))
    else:
        sys.exit(
            "usage: python -m harness.node --clean-up   undo what a node that was killed left on this machine\n"
            "       python -m harness.node --up DIR     run a node with one pod until SIGINT or SIGTERM"
        )
