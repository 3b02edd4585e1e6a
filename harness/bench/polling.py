"""Wait for a condition, as the live benchmarks wait for a watcher to be ready or to have received every write."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def poll(check: Callable[[], Awaitable[Any]], what: str, deadline: float) -> Any:
    """Await `check` every 0.25 s until it returns something true; TimeoutError after `deadline` seconds."""
    give_up = time.monotonic() + deadline
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > give_up:
            raise TimeoutError(f"waited {deadline:.0f} s for {what}")
        await asyncio.sleep(0.25)
