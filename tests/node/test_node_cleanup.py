"""The test node leaves nothing behind: stopped by an interrupt, or killed and cleaned up after by the next run.

Each test runs a node with a pod in another process (`python -m harness.node --up DIR`), as a test session would,
and ends it the way a session can end. What the machine had before is what `harness.node.leftovers` compares with:
processes, mounts, network namespaces, links, iptables rules, sysctls and cgroups.
"""

from __future__ import annotations

import json
import select
import signal
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


def test_an_interrupted_run_cleans_up_before_it_exits(node_process: subprocess.Popen[str]) -> None:
    state = _state()
    assert leftovers(state)  # the node did change the machine: there is something to clean up
    node_process.send_signal(signal.SIGINT)
    _, err = node_process.communicate(timeout=120)
    assert node_process.returncode == 0, err[-4000:]
    assert leftovers(state) == []
    assert not STATE_FILE.exists()


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
