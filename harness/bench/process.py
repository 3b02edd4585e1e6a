"""Read a process's CPU time and resident memory from /proc, as the live benchmarks sample their watchers."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """Return the user + system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def reset_peak(pid: int) -> None:
    """Reset a process's peak resident memory (VmHWM) to its resident memory now (`/proc/PID/clear_refs`)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def status_values(pid: int, keys: tuple[str, ...]) -> dict[str, int]:
    """Return these fields of `/proc/PID/status` (memory in KiB, `Threads` a count), each as its number."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            values[key] = int(rest.split()[0])
    return values


def memory_kib(pid: int) -> dict[str, int]:
    """Return the resident memory of a process, now (VmRSS) and at its peak (VmHWM), in KiB."""
    return status_values(pid, ("VmRSS", "VmHWM"))
