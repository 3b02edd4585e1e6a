"""What the harness runs for the length of an `async with` block: started on entering it, stopped on leaving it."""

from __future__ import annotations

from typing import Self


class Started:
    """Started on entering an `async with` block (`start`), stopped on leaving it (`stop`), however it leaves."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> object:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
