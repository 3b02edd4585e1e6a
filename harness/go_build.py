"""Build the Go programs the benchmarks and tests run, with `go build` on first use.

They are the client-go informer of scripts/bench_live.py and scripts/load_test.py (scripts/informer), krew
(scripts/krew) for tests/deploy/test_krew.py, and the third-party programs that play the real fights
(scripts/programs, `harness.programs`).

A binary is cached by the sha256 of its module's sources (go.mod, go.sum, main.go) in
`${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-~/.cache}/fightwatch}/MODULE/DIGEST/NAME`, as scripts/control-plane.sh
caches the control plane. It is built in a temporary directory and renamed into place, so that an interrupted build
leaves no cache entry behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import REPO_ROOT

SOURCE = REPO_ROOT / "scripts" / "informer"
SOURCE_FILES = ("go.mod", "go.sum", "main.go")
LOG_TAIL_LINES = 40


def cache_root() -> Path:
    if os.environ.get("FIGHTWATCH_CACHE"):
        return Path(os.environ["FIGHTWATCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fightwatch"


def informer_binary() -> Path:
    """Build the informer from its sources as they are now (cached); RuntimeError with go's output if it fails."""
    return go_binary(SOURCE, ".", "informer", SOURCE_FILES)


def informer_binary_or_exit(program: str) -> Path:
    """Build the informer, or exit with go's output under the name of `program` (a benchmark, which builds it before
    it starts a control plane: a build that fails stops it at once)."""
    try:
        return informer_binary()
    except RuntimeError as error:
        sys.exit(f"{program}: {error}")


def go_binary(
    source: Path,
    package: str,
    name: str,
    files: tuple[str, ...] = ("go.mod", "go.sum"),
    *,
    ldflags: tuple[str, ...] = (),
) -> Path:
    """Build `package` of the Go module at `source` as `name`, or take it from the cache.

    The module's `files` and the `ldflags` (version stamps, `-X path.var=value`) make the cache key; RuntimeError with
    go's output if the build fails.
    """
    parts = [(source / f).read_bytes() for f in files] + [" ".join(ldflags).encode()]
    digest = hashlib.sha256(b"\0".join(parts)).hexdigest()
    cache = cache_root() / source.name
    binary = cache / digest[:16] / name
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise RuntimeError(f"no go on PATH: Go is needed to build {package} ({source})")
    print(f"building {package} ({source}) into {binary.parent}", flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as build:
        built = Path(build) / name
        done = subprocess.run(
            ["go", "build", "-trimpath", "-ldflags", " ".join(("-s", "-w", *ldflags)), "-o", str(built), package],
            cwd=source,
            env={**os.environ, "CGO_ENABLED": "0"},  # a static binary, as controller images ship
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise RuntimeError(f"go build of {package} in {source} failed (exit {done.returncode}):\n{tail}")
        binary.parent.mkdir(parents=True, exist_ok=True)
        built.rename(binary)
    return binary
