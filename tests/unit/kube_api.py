"""A KubeApi with no API server behind it, for the parts of sources/ tested without one: a watch fed lines by hand,
permission checks answered by a test."""

from __future__ import annotations

from typing import Any

import aiohttp

from watcher.sources.kube import KubeApi


class NoServer(KubeApi):
    """Fails the test on every request, but those a subclass answers."""

    def __init__(self) -> None:
        """Make it without the ApiClient a KubeApi sends requests through: there is none."""

    async def create(self, path: str, body: dict[str, Any]) -> Any:  # noqa: ARG002
        raise AssertionError(f"POST {path}: no API server here")

    async def open(self, path: str, **_: object) -> aiohttp.ClientResponse:
        raise AssertionError(f"GET {path}: no API server here")
