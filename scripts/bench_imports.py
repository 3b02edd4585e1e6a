#!/usr/bin/env python3
"""What `fightwatch run` holds before its first event: resident memory (VmRSS) after each import, in the order the
watcher imports them, in a fresh interpreter.

    "$(scripts/runtime-venv.sh)" scripts/bench_imports.py      # as the image installs it (no test extras)
    "$(scripts/runtime-venv.sh)" scripts/bench_imports.py --above-floor
    .venv/bin/python scripts/bench_imports.py [MODULE ...]

Each line: the module, what its import added, and the total so far (MiB). `--above-floor` first does what the live
benchmark's floor-libraries watcher does before it watches (scripts/bench_floor_watch.py --with-libraries: the
transport, and every other required library imported and used once), then imports fightwatch's modules: what each
adds above that floor, and which modules came with it.
"""

from __future__ import annotations

import gc
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
    "watcher.service",
)


def resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def floor() -> None:
    """Import and use what the floor-libraries watcher does before it watches."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_floor_watch  # noqa: PLC0415 - (it imports the transport, as the floor watcher does)

    bench_floor_watch.use_libraries()
    gc.collect()


def main(argv: list[str]) -> None:
    above_floor = "--above-floor" in argv
    modules = [a for a in argv if a != "--above-floor"] or MODULES
    if above_floor:
        floor()
        modules = [m for m in modules if m.startswith("watcher.") or m == "aiohttp.web"]
    previous = resident_mib()
    print(f"{'floor-libraries' if above_floor else 'python':40s} {previous:6.1f} {previous:6.1f}")
    for module in modules:
        before = set(sys.modules)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            print(f"{module:40s} not installed ({exc})")
            continue
        gc.collect()
        now = resident_mib()
        came = sorted(set(sys.modules) - before - {module})
        print(f"{module:40s} {now - previous:+6.1f} {now:6.1f}  {' '.join(came) if above_floor else ''}".rstrip())
        previous = now


if __name__ == "__main__":
    main(sys.argv[1:])
