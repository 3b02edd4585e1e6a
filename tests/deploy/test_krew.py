"""The krew plugin, installed as users install it: krew (built from Go modules, scripts/krew) validates the manifest
and installs the archive scripts/krew_package.py builds; the pinned release's kubectl then finds
`kubectl-fightwatch` on krew's PATH, and its launcher installs fightwatch into an environment of its own on the
first run (from this checkout, instead of PyPI) and runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from harness.control_plane import control_plane_bin_dir
from harness.go_build import go_binary
from tests.deploy.generated import assert_up_to_date

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "scripts" / "krew_package.py"  # run as users run it: `python scripts/krew_package.py`
LAUNCHER = REPO / "deploy" / "krew" / "kubectl-fightwatch"
VERSION = metadata.version("fightwatch")


@pytest.fixture(scope="module")
def krew() -> Path:
    return go_binary(REPO / "scripts" / "krew", "sigs.k8s.io/krew/cmd/krew", "krew")


def test_the_committed_manifest_matches_the_archive_built_now() -> None:
    """Byte for byte the same archive on every machine: the manifest's sha256 holds until the launcher changes."""
    assert_up_to_date(PACKAGE.name)


def test_krew_validates_and_installs_the_plugin_and_kubectl_runs_it(krew: Path, tmp_path: Path) -> None:
    validator = go_binary(
        REPO / "scripts" / "krew", "sigs.k8s.io/krew/cmd/validate-krew-manifest", "validate-krew-manifest"
    )
    manifest = REPO / "deploy" / "krew" / "fightwatch.yaml"
    checked = subprocess.run(
        [str(validator), "-manifest", str(manifest), "-skip-install"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    assert "structural validation OK" in checked.stderr

    built = subprocess.run(
        [sys.executable, str(PACKAGE), "--out", str(tmp_path / "dist")], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    archive = tmp_path / "dist" / f"kubectl-fightwatch-v{VERSION}.tar.gz"
    root = tmp_path / "krew"
    env = {**os.environ, "KREW_ROOT": str(root)}
    installed = subprocess.run(
        [str(krew), "install", f"--manifest={manifest}", f"--archive={archive}"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    assert (root / "bin" / "kubectl-fightwatch").exists()

    kubectl = control_plane_bin_dir() / "kubectl"
    run_env = {
        **env,
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "FIGHTWATCH_HOME": str(tmp_path / "home"),
        "FIGHTWATCH_INSTALL_FROM": str(REPO),  # (not yet on PyPI: this checkout)
        "FIGHTWATCH_PURE_PYTHON": "1",  # (no compiling in a test: the same findings)
        "FIGHTWATCH_PYTHON": sys.executable,
    }
    version = [str(kubectl), "fightwatch", "--version"]
    first = subprocess.run(version, env=run_env, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"fightwatch {VERSION} ")
    assert "installing fightwatch" in first.stderr
    again = subprocess.run(version, env=run_env, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert "installing" not in again.stderr  # installed once

    demo = subprocess.run(
        [str(kubectl), "fightwatch", "demo", "-o", "json"], env=run_env, capture_output=True, check=False
    )
    assert demo.returncode == 0, demo.stderr
    assert b'"type":"fight"' in demo.stdout


def test_the_launcher_says_what_is_missing(tmp_path: Path) -> None:
    launcher = tmp_path / "kubectl-fightwatch"
    launcher.write_text(LAUNCHER.read_text().replace("@VERSION@", "0.0.0"))
    launcher.chmod(0o755)
    env = {**os.environ, "FIGHTWATCH_HOME": str(tmp_path / "home"), "FIGHTWATCH_PYTHON": str(tmp_path / "nope")}
    done = subprocess.run([str(launcher), "--version"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "needs Python 3.11 or newer" in done.stderr
