"""The audit webhook's intake for `fightwatch run`: the listener the API server posts its audit events to.

With `audit_webhook.enabled`, the API server posts its audit events to a listener of the watcher's own. The
requests they carry (the failed writes, the writes that changed nothing, the user behind each manager) go to the
pipeline's request path (`pipeline.Pipeline.request`), joined with the watch there. The receiver is imported only
then (its parsers cost memory). Disabled, the intake listens to nothing, runs no task and has no samples.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from watcher.config import AuditWebhookSettings
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request
from watcher.metrics.exporter import Samples
from watcher.metrics.samples import audit_samples
from watcher.serving.security import ServingSecurity
from watcher.serving.server import HttpServer

if TYPE_CHECKING:
    from watcher.sources.audit_webhook import AuditReceiver

AUDIT_SLICE = 1_000  # requests analysed between two yields to the event loop


class AuditIntake:
    """The audit webhook's listener, as `run` wires it (nothing at all where the webhook is off)."""

    def __init__(self, settings: AuditWebhookSettings) -> None:
        """Read the webhook's token file, where it is enabled (a missing one fails here, at start)."""
        self.settings = settings
        self.receiver: AuditReceiver | None = None
        if settings.enabled:
            from watcher.sources.audit_webhook import AuditReceiver  # noqa: PLC0415 - (only with the webhook on)

            self.receiver = AuditReceiver(settings)
        self.url: str | None = None
        self._server: HttpServer | None = None

    async def start(self, security: ServingSecurity) -> str | None:
        """Listen for the API server's audit events, over TLS that `security` keeps current; return the URL.

        Raises OSError or CertificateError when it cannot.
        """
        if self.receiver is None:
            return None
        tls = self.receiver.tls()
        security.add("audit_webhook", tls)
        server = HttpServer(
            self.receiver.app(), address=self.settings.address, port=self.settings.port, tls=tls.context
        )
        self.url = await server.start()
        self._server = server
        return self.url

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            await self._server.stop()
            self._server = None

    def tasks(self, analyse: Callable[[Request], None]) -> list[asyncio.Task[Any]]:
        """Start handing the requests the webhook queues to `analyse` (none where the webhook is off)."""
        if self.receiver is None:
            return []
        return [asyncio.create_task(self._drain(self.receiver, analyse), name="audit")]

    @staticmethod
    async def _drain(receiver: AuditReceiver, analyse: Callable[[Request], None]) -> None:
        """Take the requests the webhook queued, a slice at a time; the event loop serves the rest between slices.

        Runs until cancelled.
        """
        while True:
            await receiver.arrived.wait()
            receiver.arrived.clear()
            while batch := receiver.drain(AUDIT_SLICE):
                for request in batch:
                    analyse(request)
                await asyncio.sleep(0)

    def samples(self, requests: RequestEngine | None) -> Samples:
        """Read the webhook's batches and requests, and what the request engine made of them."""
        if self.receiver is None or requests is None:
            return {}
        return audit_samples(self.receiver, requests)
