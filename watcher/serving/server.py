"""An aiohttp application served on an address until stopped, with TLS or (development only) without."""

from __future__ import annotations

import ssl

from aiohttp import web


class HttpServer:
    """Serve an app on address:port (port 0: any free port) until stopped."""

    def __init__(self, app: web.Application, *, address: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        self._address = address
        self._port = port
        self._tls = tls

    async def start(self) -> str:
        """Listen; return the URL it listens on. Raises OSError when the address cannot be bound."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._address, self._port, ssl_context=self._tls)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        host, port = self._runner.addresses[0][:2]
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    async def stop(self) -> None:
        await self._runner.cleanup()
