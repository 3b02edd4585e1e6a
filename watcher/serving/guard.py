"""Who is calling, and what they may read: the two questions every protected endpoint asks.

`KubeGuard` answers them the Kubernetes way: a client certificate of the configured CA names its caller (common
name, organizations) as the API server's own x509 authenticator does; otherwise the `Authorization: Bearer` token
is reviewed (`TokenReview`); permissions are `SubjectAccessReview`s (`Access` caches both). `OpenGuard` is the
development mode's (`serve.insecure_http`): every caller is anonymous and may read everything.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from watcher.serving.access import Access, Caller, Resource, certificate_caller

ANONYMOUS = Caller(user="system:anonymous", groups=("system:unauthenticated",))


class Guard(Protocol):
    secure: bool  # False: the development mode, where nothing is checked

    async def caller(self, request: web.Request) -> Caller | None:
        """Return the authenticated caller; None when the request carries no credential the API server accepts.

        Raises AccessUnavailableError when the API server cannot say and nothing is cached.
        """
        ...

    async def allowed(self, caller: Caller, want: Resource) -> bool: ...


class KubeGuard:
    secure = True

    def __init__(self, access: Access, *, certificates: bool = False) -> None:
        """`certificates`: the TLS layer verifies client certificates against a CA (a verified one authenticates)."""
        self.access = access
        self._certificates = certificates

    async def caller(self, request: web.Request) -> Caller | None:
        peer = verified_certificate(request) if self._certificates else None
        if peer is not None:
            return certificate_caller(peer)
        token = bearer_token(request)
        return await self.access.authenticate(token) if token else None

    async def allowed(self, caller: Caller, want: Resource) -> bool:
        return await self.access.allowed(caller, want)


class OpenGuard:
    secure = False

    async def caller(self, _request: web.Request) -> Caller | None:
        return ANONYMOUS

    async def allowed(self, _caller: Caller, _want: Resource) -> bool:
        return True


def verified_certificate(request: web.Request) -> dict[str, Any] | None:
    """Return the client certificate of the request's TLS connection, as `ssl.SSLObject.getpeercert()` decodes it.

    Only ever one the handshake verified against the configured CA (None without one).
    """
    transport = request.transport
    peer = transport.get_extra_info("peercert") if transport is not None else None
    return peer or None


def bearer_token(request: web.Request) -> str:
    """Return the token of an `Authorization: Bearer` header, "" without one."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


__all__ = ["ANONYMOUS", "Guard", "KubeGuard", "OpenGuard", "bearer_token", "verified_certificate"]
