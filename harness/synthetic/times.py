"""Stamp the synthetic cluster's times as the API server and a recording write them.

Stream times are seconds after `EPOCH`.
"""

from __future__ import annotations

import math
import time

EPOCH = 1614848400  # 2021-03-04T09:00:00Z; stream times are seconds after this


def server_time(t: float) -> str:
    """Stamp a managedFields time: RFC 3339, one-second resolution (what the API server writes)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH + math.floor(t)))


def observed_time(t: float) -> str:
    whole = math.floor(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(EPOCH + whole)) + f".{int((t - whole) * 1e6):06d}Z"


def nano_time(t: float) -> str:
    whole = math.floor(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(EPOCH + whole)) + f".{int((t - whole) * 1e9):09d}Z"
