"""The build that ships compiles the per-event modules with mypyc (setup.py); pure Python runs the same source.
They must agree: the same findings, to the byte, on every real capture and the demo capture (and so must the
build's default engine, native where it is built)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import watcher
from tests.unit.captures import CAPTURES


def replay(*args: str, cwd: Path, pythonpath: Path | None = None) -> bytes:
    """`python -m watcher ARGS` run outside the source tree (`-m` puts the working directory first on the path)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    result = subprocess.run(
        [sys.executable, "-m", "watcher", *args], cwd=cwd, env=env, capture_output=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_compiled_and_pure_python_find_the_same(tmp_path: Path) -> None:
    package = Path(watcher.__file__).parent
    pure = tmp_path / "pure"
    shutil.copytree(package, pure / "watcher", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    where = "import watcher.detection.engine as e; print(e.__file__)"
    for pythonpath, engine in ((None, package / "detection" / "engine"), (pure, pure / "watcher/detection/engine")):
        env = {**os.environ, "PYTHONPATH": str(pythonpath or "")}
        found = subprocess.run([sys.executable, "-c", where], cwd=tmp_path, env=env, capture_output=True, check=True)
        assert found.stdout.decode().strip().startswith(f"{engine}.")  # engine.py, or engine.cpython-*.so

    assert b"(pure Python, engine: " in replay("--version", cwd=tmp_path, pythonpath=pure)
    assert b"(compiled with mypyc, engine: " in replay("--version", cwd=tmp_path)

    captures = sorted(str(path) for path in CAPTURES.glob("*.jsonl"))
    for command, *args in (("replay", "--output", "json", *captures), ("demo", "--output", "json")):
        python = (command, "--engine", "python", *args)
        pure_python = replay(*python, cwd=tmp_path, pythonpath=pure)
        assert pure_python.count(b'"type":"fight"') >= 10
        assert replay(*python, cwd=tmp_path) == pure_python  # the Python engine, compiled with mypyc
        assert replay(command, *args, cwd=tmp_path) == pure_python  # the build's default (native where built)
