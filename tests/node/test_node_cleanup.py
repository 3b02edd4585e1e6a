"""The test node leaves nothing behind even when its process is killed: the next run cleans up after it.

(A node that stops, also on an interrupt, checks that itself: `Node.stop` raises when `harness.node.leftovers` finds
anything, so every test module's node is checked as it ends.) The test runs a node with a pod in another process
(`python -m harness.node --up DIR`), as a test session would, and kills it. What the machine had before is what
`leftovers` compares with: processes, mounts, network namespaces, links, iptables rules, sysctls and cgroups.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.node import STATE_FILE, leftovers

pytestmark = pytest.mark.integration
READY_DEADLINE = 300.0  # seconds for the node and its pod (the binaries are built already: the chart tests ran)


@pytest.fixture
def node_process(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A node with one pod running, in a process of its own, once it says `ready`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.node", "--up", str(tmp_path / "node")],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a signal to the test's process group does not reach it
    )
    assert proc.stdout is not None
    try:
        line = _first_line(proc)
        if line != "ready":
            proc.kill()
            pytest.fail(f"the node did not come up: {line!r}\n{proc.communicate()[1][-4000:]}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # (and its pipes closed)
        subprocess.run([sys.executable, "-m", "harness.node", "--clean-up"], cwd=REPO_ROOT, check=False)


def _first_line(proc: subprocess.Popen[str]) -> str:
    """The process's first line of output (the node prints `ready`): '' if it exits first or says nothing by the
    deadline."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], READY_DEADLINE)
    return proc.stdout.readline().strip() if readable else ""


def _state() -> dict[str, object]:
    assert STATE_FILE.exists(), "a running node writes down the machine's state first"
    state: dict[str, object] = json.loads(STATE_FILE.read_text())
    return state


def test_a_killed_run_is_cleaned_up_after_by_the_next(node_process: subprocess.Popen[str]) -> None:
    state = _state()
    node_process.kill()  # SIGKILL: no clean-up at all; the components get SIGTERM from the kernel, the pod runs on
    node_process.wait()
    assert leftovers(state)
    done = subprocess.run(
        [sys.executable, "-m", "harness.node", "--clean-up"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert leftovers(state) == []
    assert not STATE_FILE.exists()
