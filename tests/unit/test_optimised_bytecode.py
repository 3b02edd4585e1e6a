"""The image runs with PYTHONOPTIMIZE=2 (Dockerfile: no docstrings, no asserts): the commands' output is the same as
without it, so nothing the user sees is read from a docstring or checked only by an assert."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COMMANDS = (
    ("--help",),
    ("run", "--help"),
    ("replay", "--help"),
    ("audit", "--help"),
    ("scan", "--help"),
    ("demo", "--help"),
    ("demo", "-o", "json"),
    ("demo",),
)


def _fightwatch(args: tuple[str, ...], *, optimize: str | None) -> subprocess.CompletedProcess[bytes]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONOPTIMIZE"}
    env |= {"PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "120"}
    if optimize is not None:
        env["PYTHONOPTIMIZE"] = optimize
    return subprocess.run(
        [sys.executable, "-m", "watcher", *args], env=env, capture_output=True, check=False, timeout=120
    )


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_output_is_the_same_with_optimised_bytecode(args: tuple[str, ...]) -> None:
    plain = _fightwatch(args, optimize=None)
    optimised = _fightwatch(args, optimize="2")
    assert plain.returncode == 0, plain.stderr.decode()
    assert plain.stdout, "no output to compare"
    assert (optimised.returncode, optimised.stdout, optimised.stderr) == (plain.returncode, plain.stdout, plain.stderr)
