"""The client-go informer of `bench_live.py` (scripts/informer), built with `go build` on first use.

The binary is cached by the sha256 of its sources (go.mod, go.sum, main.go) in
`${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-~/.cache}/fightwatch}/informer/DIGEST/informer`, as scripts/control-plane.sh
caches the control plane. It is built in a temporary directory and renamed into place, so that an interrupted build
leaves no cache entry behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "informer"
SOURCE_FILES = ("go.mod", "go.sum", "main.go")
LOG_TAIL_LINES = 40


def cache_root() -> Path:
    if os.environ.get("FIGHTWATCH_CACHE"):
        return Path(os.environ["FIGHTWATCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fightwatch"


def informer_binary() -> Path:
    """The informer built from the sources as they are now; RuntimeError with go's output if the build fails."""
    digest = hashlib.sha256(b"\0".join((SOURCE / name).read_bytes() for name in SOURCE_FILES)).hexdigest()
    cache = cache_root() / "informer"
    binary = cache / digest[:16] / "informer"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise RuntimeError(f"no go on PATH: Go is needed to build the client-go informer ({SOURCE})")
    print(f"building the client-go informer ({SOURCE}) into {binary.parent}", flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as build:
        built = Path(build) / "informer"
        done = subprocess.run(
            ["go", "build", "-trimpath", "-o", str(built), "."],
            cwd=SOURCE,
            env={**os.environ, "CGO_ENABLED": "0"},  # a static binary, as controller images ship
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise RuntimeError(f"go build of {SOURCE} failed (exit {done.returncode}):\n{tail}")
        binary.parent.mkdir(exist_ok=True)
        built.rename(binary)
    return binary
