"""Describe the machine a benchmark ran on, as its results record it.

The CPU, the cores it was pinned to, the interpreter and how it was built, and the versions of the decoding
libraries.
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
from importlib import metadata as pkg_metadata
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """Describe this machine: CPU, cores, interpreter, and the decoding libraries' versions."""
    model = "unknown"
    with Path("/proc/cpuinfo").open(encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    for package in ("orjson", "kubernetes_asyncio"):
        try:
            versions[package] = pkg_metadata.version(package)
        except pkg_metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "pinned_to": sorted(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        **interpreter_build(),
        **versions,
    }


def interpreter_build() -> dict[str, Any]:
    """Describe how the interpreter was built: it moves the replay by about a fifth on the same code.

    `libpython` is the shared library the interpreter runs from, or none when it is linked into the executable;
    `configure_flags` are the optimization flags its configure recorded (Debian's python3.11 records none although
    it is built with PGO and LTO: its packaging keeps them out of sysconfig).
    """
    with Path("/proc/self/maps").open(encoding="utf-8") as maps:
        shared = sorted({line.split()[-1] for line in maps if "/libpython" in line})
    configured = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    return {
        "executable": os.path.realpath(sys.executable),
        "libpython": shared[0] if shared else None,
        "configure_flags": [f for f in ("--enable-optimizations", "--with-lto") if f in configured],
    }
