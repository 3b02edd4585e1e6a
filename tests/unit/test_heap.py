"""The C heap's free pages returned to the system after a list (`watcher.sources.heap`)."""

from __future__ import annotations

import platform

from watcher.sources.heap import release_free_heap


def test_glibc_s_malloc_trim_is_what_releases_the_free_heap() -> None:
    """On glibc the call reaches `malloc_trim(0)` (1: pages were returned, 0: none were free); elsewhere nothing."""
    garbage = [bytes(4096) for _ in range(2_000)]  # (heap blocks, not mmap'd ones: freed, they stay in the heap)
    del garbage[::2]
    result = release_free_heap()
    if platform.libc_ver()[0] == "glibc":
        assert result in (0, 1)
    else:
        assert result is None
