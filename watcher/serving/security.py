"""The security of what the watcher serves, as `serve` configures it, and word when part of it stops working.

Over TLS (the default), callers are authenticated and authorized by the API server (`KubeGuard`, with `Access`
reviewing through the watcher's own API client); over plain HTTP, in the development mode, everyone may read
everything (`OpenGuard`), with a warning. Every second `check` has the certificates served (the endpoints', the
audit webhook's) re-read when they rotate on disk, and logs once when a reload or the access reviews start or
stop failing: one warning per episode, not one a second.
"""

from __future__ import annotations

import ssl
from typing import Any

import structlog

from watcher.config import ServeSettings
from watcher.serving.access import Access, Post, missing_permissions
from watcher.serving.guard import Guard, KubeGuard, OpenGuard
from watcher.serving.tls import ServingTls

SERVE_TLS = "serve.tls"  # (each certificate served is kept under the config key it comes from)

log = structlog.get_logger("fightwatch")


class ServingSecurity:
    """The endpoints' TLS and guard, and every certificate served, kept current."""

    def __init__(self, settings: ServeSettings, post: Post) -> None:
        """Protect the endpoints as `settings` say; `post` sends the reviews to the API server.

        Raises CertificateError when the serving certificate's files cannot be used.
        """
        self.tls: dict[str, ServingTls] = {}  # by the config key it comes from: serve.tls, audit_webhook
        self.access: Access | None = None  # (None: serve.insecure_http)
        self._post = post
        self._logged: dict[str, str] = {}  # the last error logged of each (certificate reloads, access reviews)
        self.guard = self._guard(settings)

    @property
    def context(self) -> ssl.SSLContext | None:
        """The TLS context the endpoints listen with (None: plain HTTP)."""
        tls = self.tls.get(SERVE_TLS)
        return tls.context if tls is not None else None

    def _guard(self, serve: ServeSettings) -> Guard:
        """Choose who may read the endpoints.

        Callers the API server authenticates and authorizes, over TLS; everyone, over plain HTTP, in the development
        mode.
        """
        if serve.insecure_http:
            log.warning(
                "serving plain HTTP without authentication or authorization: development only",
                config="serve.insecure_http",
            )
            return OpenGuard()
        tls = self.tls[SERVE_TLS] = ServingTls(
            cert_file=serve.tls.cert_file,
            key_file=serve.tls.key_file,
            client_ca_file=serve.tls.client_ca_file,
            min_version=serve.tls.min_version,
        )
        if tls.certificate.self_signed:
            log.warning(
                "serving a self-signed certificate",
                fingerprint=tls.certificate.fingerprint,
                hint="give serve.tls.cert_file and key_file (the chart does) so that clients can verify it",
            )
        auth = serve.auth
        self.access = Access(
            self._post,
            audiences=auth.audiences,
            allowed_ttl=auth.allowed_ttl,
            denied_ttl=auth.denied_ttl,
            size=auth.cache_size,
            max_stale=auth.max_stale,
        )
        return KubeGuard(self.access, certificates=tls.verifies_clients)

    def add(self, key: str, tls: ServingTls) -> None:
        """Keep another server's certificate current too (the audit webhook's, under its config key)."""
        self.tls[key] = tls

    def certificate(self, key: str = SERVE_TLS) -> dict[str, Any] | None:
        """Describe a certificate for the log: where it comes from, until when, its fingerprint (never the key)."""
        tls = self.tls.get(key)
        if tls is None:
            return None
        c = tls.certificate
        return {"source": c.source, "not_after": c.not_after.isoformat(), "fingerprint": c.fingerprint}

    def check(self) -> None:
        """Serve certificates rotated on disk; say when a rotation or access reviews start or stop failing (once)."""
        for key, tls in self.tls.items():
            if tls.refresh():
                log.info("serving certificate loaded", config=key, certificate=self.certificate(key))
            self._note(
                key,
                tls.last_error,
                failing="serving certificate not loaded: the previous one is served still",
                recovered="serving certificate loadable again",
                config=key,
            )
        if self.access is not None:
            self._note(
                "access",
                self.access.stats.last_error,
                failing="cannot review access",
                recovered="access reviews work again",
                hint="fightwatch needs create on tokenreviews and subjectaccessreviews (the chart's RBAC grants it); "
                "callers with cached answers are served meanwhile",
            )

    async def check_review_permissions(self) -> None:
        """Say at start, not at the first caller, when fightwatch may not have callers reviewed."""
        try:
            missing = await missing_permissions(self._post)
        except Exception as exc:  # (the API server unreachable: the watches say so, and reviews will)
            log.info("review permissions not checked", error=str(exc)[:300])
            return
        if missing:
            log.warning(
                "callers cannot be reviewed: every request to /metrics and /api/v1/findings will answer 503",
                missing=missing,
                hint="grant fightwatch's service account create on tokenreviews and subjectaccessreviews "
                "(the chart's RBAC does)",
            )

    def _note(self, key: str, error: str, *, failing: str, recovered: str, **context: Any) -> None:
        """Log an error when it is new, and its recovery once."""
        if error == self._logged.get(key, ""):
            return
        self._logged[key] = error
        if error:
            log.warning(failing, error=error, **context)
        else:
            log.info(recovered)


__all__ = ["SERVE_TLS", "ServingSecurity"]
