"""The audit webhook's intake for `fightwatch run`: its receiver, the request engine, and their join with the watch.

With `audit_webhook.enabled`, the API server posts its audit events to a listener of the watcher's own. The
requests they carry (the failed writes, the writes that changed nothing, the user behind each manager) go to the
request engine, and the join (`detection.join.Joined`) puts both streams' findings together: every watch event then
goes to the join instead of the plain engine. The receiver is imported only then (its parsers cost memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from watcher.config import AuditWebhookSettings, DetectionSettings
from watcher.detection.engine import Engine
from watcher.detection.join import Joined
from watcher.detection.request_engine import RequestEngine
from watcher.model import FindingChange, ObjectRef
from watcher.samples import audit_samples
from watcher.serving.security import ServingSecurity
from watcher.serving.server import HttpServer
from watcher.sinks.metrics import Samples

if TYPE_CHECKING:
    from watcher.sources.audit_webhook import AuditReceiver

AUDIT_SLICE = 1_000  # requests analysed between two yields to the event loop


class AuditIntake:
    """The audit webhook's listener, request engine and join, as `run` wires them."""

    def __init__(
        self,
        settings: AuditWebhookSettings,
        detection: DetectionSettings,
        engine: Engine,
        *,
        on_conflict: Callable[[str, str], None],
        resource: Callable[[ObjectRef], str],
    ) -> None:
        """Read the webhook's token file (a missing one fails here, at start) and join `engine` with requests.

        `on_conflict` counts each conflict (the metrics); `resource` names an object's resource as discovery serves it.
        """
        from watcher.sources.audit_webhook import AuditReceiver  # noqa: PLC0415 - (only with the webhook on)

        self.settings = settings
        self.receiver: AuditReceiver = AuditReceiver(settings)
        self.requests = RequestEngine(detection, on_conflict=on_conflict)
        self.joined = Joined(engine, self.requests, resource=resource)
        self.url: str | None = None
        self._server: HttpServer | None = None

    async def start(self, security: ServingSecurity) -> str:
        """Listen for the API server's audit events, over TLS that `security` keeps current; return the URL.

        Raises OSError or CertificateError when it cannot.
        """
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

    async def analyse(self, hand_over: Callable[[list[FindingChange]], None]) -> None:
        """Take the requests the webhook queued, a slice at a time, and hand their finding changes over.

        The event loop serves the watches and the webhook between two slices. Runs until cancelled.
        """
        receiver, joined = self.receiver, self.joined
        while True:
            await receiver.arrived.wait()
            receiver.arrived.clear()
            while batch := receiver.drain(AUDIT_SLICE):
                for request in batch:
                    hand_over(joined.process_request(request))
                await asyncio.sleep(0)

    def samples(self) -> Samples:
        """Read the webhook's batches and requests, and what the request engine made of them."""
        return audit_samples(self.receiver, self.requests)
