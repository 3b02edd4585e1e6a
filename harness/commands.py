"""Run a command to its end and take its output, failing with what it said: etcdctl, openssl, `go mod download`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def output_of(
    argv: Sequence[str | Path], *, what: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> str:
    """Run `argv` (with `env` set beside this process's environment) and return its stdout.

    RuntimeError naming `what`, with the exit status and what the command printed, if it fails.
    """
    proc = subprocess.run(
        [str(arg) for arg in argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        said = " ".join(text for text in (proc.stdout.strip(), proc.stderr.strip()) if text)
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {said}")
    return proc.stdout
