"""The receiving end of the kube-apiserver's audit webhook backend (`--audit-webhook-config-file`).

The API server POSTs `audit.k8s.io/v1` `EventList`s (batch mode; one Event a list in blocking mode) to the URL of
its webhook kubeconfig. A managed cluster's API server cannot be pointed here, but a log shipper can forward its
cloud's audit stream in the cloud's envelope (`envelopes`): a body is read as a file is, whatever envelope it comes
in (a JSON document, JSON Lines, or values one after the other; `Content-Encoding: gzip` too). An Amazon Data
Firehose HTTP endpoint delivery (the `X-Amz-Firehose-Request-Id` header) is answered as Firehose expects, and
authenticated by the access key Firehose sends (`X-Amz-Firehose-Access-Key`), which must be the token. This
endpoint:

- serves TLS only, and takes a batch only from an authenticated sender: a client certificate signed by
  `client_ca_file`, or the token of `token_file` (compared in constant time) as a bearer token or Firehose's access
  key; anything else is a 401;
- bounds what it reads (`max_body_bytes`: a larger body is a 413 before it is read whole);
- decodes a batch into `Request`s at once (bodies are read for object metadata and a 409's message only, then
  dropped) and hands them to a bounded queue that detection drains on its own schedule: a batch is answered as
  soon as it is queued, never after detection, and requests that do not fit are dropped and counted (the API
  server's own batching retries on a failed POST, which a slow receiver must not cause);
- counts every batch by outcome, and the events it queued and dropped; an invalid event in a batch is counted
  and skipped, not the batch (the API server would send it again and again).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from watcher.config import AuditWebhookSettings
from watcher.detection.requests import Request
from watcher.serving.guard import bearer_token, verified_certificate
from watcher.serving.tls import ServingTls
from watcher.sources.audit import AuditStats, decode_audit

PATH = "/audit/v1/events"
FIREHOSE_REQUEST_ID = "X-Amz-Firehose-Request-Id"  # an Amazon Data Firehose HTTP endpoint delivery's
FIREHOSE_ACCESS_KEY = "X-Amz-Firehose-Access-Key"  # the access key its destination is configured with
OUTCOMES = ("accepted", "invalid", "unauthorized", "too_large", "overflow")


@dataclass(slots=True)
class ReceiverStats:
    batches: Counter[str] = field(default_factory=Counter)  # by outcome (OUTCOMES)
    queued: int = 0  # requests handed to detection's queue
    dropped: int = 0  # requests that did not fit in the queue
    audit: AuditStats = field(default_factory=AuditStats)  # what decoding found (stages skipped, ...)


class AuditReceiver:
    """The webhook endpoint and the queue of requests it fills; detection takes them with `drain`."""

    def __init__(self, settings: AuditWebhookSettings) -> None:
        self.settings = settings
        self.stats = ReceiverStats()
        self._queue: deque[Request] = deque()
        self.arrived = asyncio.Event()  # set when requests were queued
        self._token = _read_token(settings.token_file) if settings.token_file is not None else None

    def drain(self, limit: int = 10_000) -> list[Request]:
        """Up to `limit` queued requests, oldest first."""
        queue = self._queue
        return [queue.popleft() for _ in range(min(limit, len(queue)))]

    @property
    def pending(self) -> int:
        return len(self._queue)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_post(PATH, self._receive)
        return app

    def tls(self) -> ServingTls:
        """Make the server's TLS: its certificate, and client certificates checked against a CA.

        The certificate is re-read when it rotates on disk. With `client_ca_file`, client certificates are checked
        against that CA: required when there is no token to authenticate with instead. Raises CertificateError when the
        files cannot be used.
        """
        s = self.settings
        return ServingTls(
            cert_file=s.tls_cert_file,
            key_file=s.tls_key_file,
            client_ca_file=s.client_ca_file,
            client_auth="optional" if self._token is not None else "required",
        )

    async def _receive(self, request: web.Request) -> web.Response:
        stats = self.stats
        firehose = request.headers.get(FIREHOSE_REQUEST_ID)
        if not self._authenticated(request):
            stats.batches["unauthorized"] += 1
            return _status(
                401, "a client certificate of the configured CA or the bearer token is required", firehose=firehose
            )
        try:
            body = await request.read()  # (gunzipped by aiohttp where the body is gzipped, within client_max_size)
        except web.HTTPRequestEntityTooLarge:
            stats.batches["too_large"] += 1
            return _status(
                413, f"the body is larger than max_body_bytes ({self.settings.max_body_bytes})", firehose=firehose
            )
        try:
            requests = decode_audit(body.strip(), stats.audit, skip_bad_items=True)
        except ValueError as exc:
            stats.batches["invalid"] += 1
            return _status(400, f"not audit events, nor a cloud's envelope of them: {exc}", firehose=firehose)
        room = self.settings.max_pending_requests - len(self._queue)
        kept = requests[: max(room, 0)]
        self._queue.extend(kept)
        if kept:
            self.arrived.set()
        stats.queued += len(kept)
        stats.dropped += len(requests) - len(kept)
        stats.batches["overflow" if len(kept) < len(requests) else "accepted"] += 1
        return _status(200, "ok", firehose=firehose)

    def _authenticated(self, request: web.Request) -> bool:
        if verified_certificate(request) is not None:  # (of client_ca_file)
            return True
        if self._token is None:
            return False
        token = request.headers.get(FIREHOSE_ACCESS_KEY) or bearer_token(request)
        return hmac.compare_digest(token.encode(), self._token)


def _read_token(path: Path) -> bytes:
    token = path.read_bytes().strip()
    if not token:
        raise ValueError(f"{path}: the audit webhook token file is empty")
    return token


def _status(code: int, message: str, *, firehose: str | None = None) -> web.Response:
    """Make the answer: `{"status", "message"}`.

    To Firehose, what it expects: `{"requestId", "timestamp"}` (milliseconds), with `errorMessage` for a failure.
    """
    if firehose is None:
        answer: dict[str, object] = {"status": code, "message": message}
    else:
        answer = {"requestId": firehose, "timestamp": int(time.time() * 1000)}
        if code != 200:
            answer["errorMessage"] = message
    return web.Response(status=code, body=orjson.dumps(answer), content_type="application/json")


__all__ = ["OUTCOMES", "PATH", "AuditReceiver", "ReceiverStats"]
