#!/usr/bin/env python3
"""What `fightwatch run` holds before its first event: resident memory (VmRSS) after each import, in the order the
watcher imports them, in a fresh interpreter.

    "$(scripts/runtime-venv.sh)" scripts/bench_imports.py      # as the image installs it (no test extras)
    .venv/bin/python scripts/bench_imports.py [MODULE ...]

Each line: the module, what its import added, and the total so far (MiB).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

# the libraries first, in the order the watcher imports them, then the watcher's own modules
MODULES = (
    "ssl",
    "asyncio",
    "uvloop",
    "orjson",
    "yaml",
    "pydantic",
    "aiohttp",
    "aiohttp.web",
    "prometheus_client",
    "structlog",
    "watcher.sources",
    "kubernetes_asyncio.client.api_client",
    "kubernetes_asyncio.config",
    "watcher.model",
    "watcher.config",
    "watcher.detection.engine",
    "watcher.detection.native",
    "watcher.cli",
    "watcher.metrics.exporter",
    "watcher.serving.endpoints",
    "watcher.delivery.dispatch",
    "watcher.delivery.outlets",
    "watcher.sources.cluster",
    "watcher.leadership.lease",
    "watcher.service",
)


def resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(argv: list[str]) -> None:
    previous = resident_mib()
    print(f"{'python':40s} {previous:6.1f} {previous:6.1f}")
    for module in argv or MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            print(f"{module:40s} not installed ({exc})")
            continue
        now = resident_mib()
        print(f"{module:40s} {now - previous:+6.1f} {now:6.1f}")
        previous = now


if __name__ == "__main__":
    main(sys.argv[1:])
