"""Fixtures of the deployment tests: a real helm binary (scripts/helm.sh fetches and caches it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def helm() -> str:
    done = subprocess.run([str(REPO / "scripts" / "helm.sh")], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"no helm binary: {done.stderr}")
    return done.stdout.strip()
