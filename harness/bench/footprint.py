"""What a watcher process holds, by part: its resident memory by mapping, and fightwatch's own view from inside.

From outside, any process: `/proc/PID/smaps` summed by what each mapping is (`MAPPINGS`): the interpreter, the
fightwatch checkout's compiled modules (mypyc and the native engine), the libraries' and the system's shared objects
(text and data, file-backed), the main heap, glibc's per-thread arenas, other anonymous memory (CPython's object
arenas, large blocks, thread stacks).

From inside, a fightwatch process started through `PROBE`: on SIGUSR2 it writes its threads, the native engine's
allocation count (`watcher._native.allocated()`), the number of objects the garbage collector tracks and, when it
runs with tracemalloc (`python -X tracemalloc`), the bytes Python holds by package.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from harness.bench.polling import poll
from harness.bench.process import status_values

THREAD_ARENA = 1 << 26  # glibc maps each thread arena's heap at a multiple of its 64 MiB maximum (HEAP_MAX_SIZE)
MAPPINGS = (
    "interpreter",  # the python executable and libpython
    "fightwatch .so",  # the checkout's compiled modules: mypyc's and the native engine
    "library .so",  # site-packages' extension modules (pydantic-core, orjson, uvloop, aiohttp's parsers, ...)
    "system .so",  # libc, libssl, libcrypto, the dynamic loader, locale data
    "heap",  # [heap]: glibc's main arena (the main thread's malloc below its mmap threshold)
    "thread arenas",  # glibc's arenas of the other threads (executor, DNS, the native engine's)
    "anonymous",  # CPython's object arenas, blocks above the mmap threshold, thread stacks
    "stack",  # the main thread's stack
)

PROBE = """
import gc, json, os, signal, sys, threading, tracemalloc

def _package(filename):
    for marker in ("site-packages/", "/watcher/"):
        if marker in filename:
            rest = filename.split(marker, 1)[1]
            head = rest.split("/", 1)[0].removesuffix(".py")
            return head if marker == "site-packages/" else "watcher." + head
    if filename.startswith("<frozen importlib"):
        return "(module code: import)"
    return "(standard library)" if "/lib/python3" in filename else filename

def _dump(signum, frame):
    report = {"threads": threading.active_count(), "gc_objects": len(gc.get_objects())}
    native = sys.modules.get("watcher._native")
    if native is not None:
        report["native_allocated"] = native.allocated()
    if tracemalloc.is_tracing():
        by = {}
        for stat in tracemalloc.take_snapshot().statistics("filename"):
            key = _package(stat.traceback[0].filename)
            by[key] = by.get(key, 0) + stat.size
        report["traced"] = tracemalloc.get_traced_memory()[0]
        report["traced_by_package"] = by
    path = os.environ["FIGHTWATCH_PROBE_OUT"]
    with open(path + ".tmp", "w") as out:
        json.dump(report, out)
    os.replace(path + ".tmp", path)

signal.signal(signal.SIGUSR2, _dump)
sys.argv[0] = "fightwatch"
from watcher.cli import run
run()
"""


def mapping_kind(path: str, start: int) -> str:
    """Tell which of `MAPPINGS` a mapping is, from its path (blank: anonymous) and start address."""
    if path == "[heap]":
        return "heap"
    if path == "[stack]":
        return "stack"
    if not path or path.startswith("["):
        return "thread arenas" if start % THREAD_ARENA == 0 else "anonymous"
    name = path.rsplit("/", 1)[-1]
    if name.startswith(("python", "libpython")):
        return "interpreter"
    if "/watcher/" in path or name.startswith("watcher__mypyc"):
        return "fightwatch .so"
    return "library .so" if "site-packages/" in path else "system .so"


def resident_by_mapping(pid: int) -> dict[str, float]:
    """Return a process's resident memory (Rss of `/proc/PID/smaps`) by `MAPPINGS`, in MiB."""
    sizes: Counter[str] = Counter()
    kind = "anonymous"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode path
            kind = mapping_kind(head[5] if len(head) > 5 else "", int(head[0].split("-")[0], 16))
        elif head[0] == "Rss:":
            sizes[kind] += int(head[1])
    return {k: round(sizes[k] / 1024, 2) for k in MAPPINGS}


def status_of(pid: int) -> dict[str, int]:
    """Return VmRSS, RssAnon and RssFile (KiB) and the number of threads of a process."""
    return status_values(pid, ("VmRSS", "Threads", "RssAnon", "RssFile"))


async def probe(pid: int, out: Path) -> dict[str, Any]:
    """Have a process started through `PROBE` (its FIGHTWATCH_PROBE_OUT: `out`) report from inside; its report."""
    _ask(pid, out)

    async def written() -> dict[str, Any] | None:
        return _report(out)

    report: dict[str, Any] = await poll(written, f"the probe of {pid}", 30.0)
    return report


def _ask(pid: int, out: Path) -> None:
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)


def _report(out: Path) -> dict[str, Any] | None:
    """The report written to `out` (whole: it is renamed into place), or None before."""
    return json.loads(out.read_bytes()) if out.exists() else None
