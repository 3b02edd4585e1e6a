"""The HTTP client side shared by the Alertmanager and webhook sinks.

One aiohttp session per sink, TLS set up once from the config (verification on unless turned off), and answers turned
into loggable DeliveryErrors.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from watcher.delivery.dispatch import DeliveryError


def ssl_context(*, ca_file: Path | None, verify: bool) -> ssl.SSLContext | bool:
    """Return what aiohttp's `ssl=` takes.

    A context trusting `ca_file` (or the system CAs), or False (no checks).
    """
    if not verify:
        return False
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)


class JsonPoster:
    """POST JSON to one URL. Errors name what failed (`HTTP 503`, `ClientConnectorError`), never the URL."""

    def __init__(self, url: str, *, headers: dict[str, str], tls: ssl.SSLContext | bool) -> None:
        self._url = url
        self._headers = {"Content-Type": "application/json", **headers}
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None

    async def post(self, payload: Any) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                self._url, data=orjson.dumps(payload), headers=self._headers, ssl=self._tls
            ) as response:
                if response.status < 300:
                    await response.read()
                    return
                retry = response.status >= 500 or response.status in {408, 429}
                raise DeliveryError(f"HTTP {response.status}", retry=retry)
        except aiohttp.ClientError as exc:
            # (str(exc) of some aiohttp errors carries the URL, which can be a credential: the type only.)
            raise DeliveryError(type(exc).__name__) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
