"""The C heap's free pages handed back to the system once a list is read (glibc's `malloc_trim`).

A list (or the objects a WatchList streams at the start of a watch) allocates and frees a burst of buffers and
decoded documents; glibc keeps the freed pages in its heap, where they stay resident until something reuses them.
Trimming after each list returns them, as a Go program's runtime does on its own. Where the C library has no
`malloc_trim` (musl, macOS), nothing is done.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _trim() -> Callable[[], object]:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


release_free_heap: Callable[[], object] = _trim()
"""Return the C heap's free pages to the system, where the C library can (glibc); else do nothing."""
