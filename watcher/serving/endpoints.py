"""The watcher's HTTP endpoints (aiohttp): /metrics, /healthz, /readyz, /api/v1/findings and the page /findings.

Who may read what (docs/security.md), decided by the `Guard` (the API server's TokenReview and
SubjectAccessReview, cached):

- `/healthz` and `/readyz` are open (kubelet probes): anyone gets the status; the report behind it (resources,
  discovery, errors) only a caller allowed to `get` that path.
- `/metrics`: an authenticated caller allowed to `get` the non-resource path `/metrics` (as kube-prometheus and
  kubebuilder scrape).
- `/api/v1/findings`: every authenticated caller, who sees the findings about objects it could `list` itself: on
  the object's resource in its namespace (at cluster scope for a cluster-scoped object). `list` on `findings` in
  the API group `fightwatch.io` at cluster scope grants all of them (for tools' service accounts): a resource no
  API serves, only RBAC names. (Not a non-resource permission on the path: the built-in `system:discovery` role
  grants `get` on `/api/*` to every authenticated user.)

- `/api/v1/incidents`: the incidents (`detection.incidents`) of the findings `/api/v1/findings` gives the caller,
  with the same filters: an incident as made of the objects the caller may read.
- `/findings`: the page (`rendering.page`) of the findings `/api/v1/findings` would give the caller, each with its
  timeline. A request without credentials (a browser) gets the page without findings, whose script asks for a
  token (kept in the tab's session storage) and fetches them with it (`/findings?fragment=1`, guarded as the API).
  Its headers keep it to itself: a Content-Security-Policy admitting only its own nonce'd script and style.

No credential, or one the API server does not accept: 401. Not allowed: 403. The API server unable to review a
request that no cached answer covers: 503. Tokens are never logged or kept (only their digest, in the cache).

`/api/v1/findings` answers `{"findings": [...]}` with each finding in the JSON schema of `replay --output json`
(most severe first), filtered by `namespace` (empty: cluster-scoped objects), `kind`, `type` and `state` (repeat
a parameter or separate values with commas for several). The endpoints only read: the handlers get their data
through plain callables, so this module knows nothing of watches or the engine.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from watcher.detection.incidents import assign, group
from watcher.model import Finding, FindingState, FindingType, ObjectRef
from watcher.rendering.output import finding_json, incident_json, severity_order
from watcher.serving.access import AccessUnavailableError, Caller, Resource
from watcher.serving.guard import Guard

FILTERS = ("namespace", "kind", "type", "state", "incident")
_INCIDENT_ID = re.compile(r"[0-9a-f]{16}")
FINDINGS_PATH = "/api/v1/findings"
INCIDENTS_PATH = "/api/v1/incidents"
PAGE_PATH = "/findings"
FRAGMENT_URL = f"{PAGE_PATH.lstrip('/')}?fragment=1"  # (relative: the page's script asks for its findings part)
TITLE = "fightwatch: findings"
EVERY_FINDING = Resource("list", resource="findings", group="fightwatch.io")  # (cluster scope: all of them)
REVIEWS_AT_ONCE = 8  # SubjectAccessReviews in flight for one request
_JSON = "application/json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class StateReaders:
    """How the endpoints read the service's state: each a function, called per request."""

    findings: Callable[[], list[Finding]]
    readiness: Callable[[], dict[str, Any]]  # has "ready": bool
    liveness: Callable[[], dict[str, Any]]  # has "alive": bool
    metrics: Callable[[str | None], tuple[bytes, str]]  # Accept header -> body, content type (`exposition`)
    resource: Callable[[ObjectRef], str]  # the plural resource of an object's kind, for authorization


@dataclass
class ServedRequests:
    """Requests answered, by endpoint and status code (for fightwatch_http_requests_total)."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)


def make_app(
    state: StateReaders, guard: Guard, served: ServedRequests | None = None, *, refresh: float = 30.0
) -> web.Application:
    """Make the application that serves the endpoints.

    `refresh`: how often the page fetches the findings again (seconds).
    """
    counts = (served or ServedRequests()).counts

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.resource
        endpoint = route.canonical if route is not None else "other"
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            counts[(endpoint, str(exc.status))] += 1
            raise
        counts[(endpoint, str(response.status))] += 1
        return response

    app = web.Application(middlewares=[count])
    endpoints = Endpoints(state, guard, refresh=refresh)
    app.router.add_get("/healthz", endpoints.healthz)
    app.router.add_get("/readyz", endpoints.readyz)
    app.router.add_get("/metrics", endpoints.protected(endpoints.metrics))
    app.router.add_get(FINDINGS_PATH, endpoints.protected(endpoints.findings))
    app.router.add_get(INCIDENTS_PATH, endpoints.protected(endpoints.incidents))
    app.router.add_get(PAGE_PATH, endpoints.page)
    app.router.add_get("/", endpoints.home)
    return app


class Endpoints:
    """The handlers, over the service state they read and the guard that admits callers."""

    def __init__(self, state: StateReaders, guard: Guard, *, refresh: float) -> None:
        self.state = state
        self.guard = guard
        self.refresh = refresh

    def protected(self, handler: Callable[[web.Request, Caller], Awaitable[web.Response]]) -> Handler:
        """Wrap a handler for authenticated callers only (401 otherwise; 503 when that cannot be decided)."""

        async def guarded(request: web.Request) -> web.Response:
            try:
                caller = await self.guard.caller(request)
                if caller is None:
                    return _json(
                        {"error": "Unauthorized: send a bearer token the Kubernetes API server accepts"},
                        status=401,
                        headers={"WWW-Authenticate": 'Bearer realm="fightwatch"'},
                    )
                return await handler(request, caller)
            except AccessUnavailableError as exc:
                return _json({"error": f"Service Unavailable: {exc}"}, status=503, headers={"Retry-After": "5"})

        return guarded

    async def _details(self, request: web.Request) -> bool:
        """Whether the caller of an open endpoint may see its whole report (never an error: probes stay open)."""
        if not self.guard.secure:
            return True
        try:
            caller = await self.guard.caller(request)
            return caller is not None and await self.guard.allowed(caller, Resource("get", path=request.path))
        except AccessUnavailableError:
            return False

    async def healthz(self, request: web.Request) -> web.Response:
        report = self.state.liveness()
        body = report if await self._details(request) else {"alive": report["alive"]}
        return _json(body, status=200 if report["alive"] else 503)

    async def readyz(self, request: web.Request) -> web.Response:
        report = self.state.readiness()
        body = report if await self._details(request) else {"ready": report["ready"]}
        return _json(body, status=200 if report["ready"] else 503)

    async def metrics(self, request: web.Request, caller: Caller) -> web.Response:
        if not await self.guard.allowed(caller, Resource("get", path=request.path)):
            return _forbidden(caller, request.path)
        body, content_type = self.state.metrics(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _visible(self, request: web.Request, caller: Caller) -> list[Finding]:
        """Return the findings the query's filters choose that the caller may see, most severe first.

        A bad filter is a 400 that says why.
        """
        try:
            wanted = parse_filters((k, v) for k, v in request.query.items() if k != "fragment")
        except ValueError as exc:
            raise web.HTTPBadRequest(text=orjson.dumps({"error": str(exc)}).decode(), content_type=_JSON) from None
        incidents = wanted.pop("incident", None)
        chosen = [f for f in self.state.findings() if keep(f, wanted)]
        if not await self.guard.allowed(caller, EVERY_FINDING):
            chosen = await readable(chosen, caller, self.guard.allowed, self.state.resource)
        if incidents is not None:  # (of the findings the caller may see: a consequence is in its root's incident)
            incident_of = assign(chosen)
            chosen = [f for f in chosen if incident_of[f.id] in incidents]
        return severity_order(chosen)

    async def findings(self, request: web.Request, caller: Caller) -> web.Response:
        chosen = await self._visible(request, caller)
        incident_of = assign(chosen)
        return _json({"findings": [finding_json(f, incident_of[f.id]) for f in chosen]})

    async def incidents(self, request: web.Request, caller: Caller) -> web.Response:
        """Serve the incidents of the findings the caller may see: an incident with the objects it may read."""
        chosen = await self._visible(request, caller)
        return _json({"incidents": [incident_json(i) for i in group(chosen)]})

    async def _fragment(self, request: web.Request, caller: Caller) -> web.Response:
        """Serve the findings part of the page, for its script to show and refresh (with the token it was given)."""
        from watcher.rendering import page  # noqa: PLC0415 - (see `page`)

        chosen = await self._visible(request, caller)
        return _html(page.render_findings(chosen, now=time.time()), nonce="")

    async def page(self, request: web.Request) -> web.StreamResponse:
        """Serve the page, with the findings for a request with credentials.

        For a request with credentials, the page holds the findings the caller may see with their timelines; for one
        without (a browser), the page without them, whose script asks for a token and fetches them with it.
        """
        if "fragment" in request.query:
            return await self.protected(self._fragment)(request)
        try:
            caller = await self.guard.caller(request)  # (None without credentials: no review asked)
            chosen = await self._visible(request, caller) if caller is not None else None
        except AccessUnavailableError:  # the page's script asks again, and the API server may answer then
            chosen = None
        # (imported at the first page served: with its timelines' modules, 0.4 MiB a watcher whose page nobody
        # opens would hold for nothing)
        from watcher.rendering import page  # noqa: PLC0415

        nonce = secrets.token_urlsafe(16)
        live = page.LivePage(fragment_url=FRAGMENT_URL, refresh_seconds=self.refresh, signed_in=chosen is not None)
        body = page.render_findings(chosen, now=time.time()) if chosen is not None else None
        return _html(page.render_page(body, title=TITLE, nonce=nonce, live=live), nonce=nonce)

    async def home(self, _request: web.Request) -> web.Response:
        raise web.HTTPFound(PAGE_PATH)


async def readable(
    findings: list[Finding],
    caller: Caller,
    allowed: Callable[[Caller, Resource], Awaitable[bool]],
    resource: Callable[[ObjectRef], str],
) -> list[Finding]:
    """Return the findings about objects the caller may `list`.

    The `list` review is on the object's resource in its namespace, or at cluster scope (which covers every
    namespace, and is asked first: one review per resource for a cluster-wide reader). Reviews run a few at a time;
    each (caller, resource, namespace) is asked once and cached by `allowed`.
    """
    if not findings:
        return []
    limit = asyncio.Semaphore(REVIEWS_AT_ONCE)

    async def may_list(keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], bool]:
        async def ask(key: tuple[str, str, str]) -> bool:
            group, plural, namespace = key
            async with limit:
                return await allowed(caller, Resource("list", resource=plural, group=group, namespace=namespace))

        keys = list(keys)
        return dict(zip(keys, await asyncio.gather(*(ask(k) for k in keys)), strict=True))

    where = [(f.object.group, resource(f.object), f.object.namespace or "") for f in findings]
    cluster_wide = await may_list(dict.fromkeys((g, r, "") for g, r, _ in where))
    per_namespace = await may_list(dict.fromkeys(k for k in where if k[2] and not cluster_wide[(k[0], k[1], "")]))
    return [
        f
        for f, (g, r, namespace) in zip(findings, where, strict=True)
        if cluster_wide[(g, r, "")] or per_namespace.get((g, r, namespace), False)
    ]


def parse_filters(query: Any) -> dict[str, set[str]]:
    """Query parameters -> {filter: accepted values}; unknown parameters and values are errors."""
    wanted: dict[str, set[str]] = {}
    for key, value in query:
        if key not in FILTERS:
            raise ValueError(f"unknown query parameter {key!r} (filters: {', '.join(FILTERS)})")
        values = {v.strip() for v in value.split(",") if v.strip() or key == "namespace"}  # "": cluster-scoped
        allowed = {"type": {t.value for t in FindingType}, "state": {s.value for s in FindingState}}.get(key)
        if allowed is not None and values - allowed:
            raise ValueError(f"{key}: unknown value {sorted(values - allowed)} (one of {', '.join(sorted(allowed))})")
        if key == "incident" and (bad := sorted(v for v in values if not _INCIDENT_ID.fullmatch(v))):
            raise ValueError(f"incident: {bad} is not an incident id (16 hex digits)")
        if key == "kind":
            values = {v.lower() for v in values}
        wanted.setdefault(key, set()).update(values)
    return wanted


def keep(finding: Finding, wanted: dict[str, set[str]]) -> bool:
    ref = finding.object
    checks = {
        "namespace": ref.namespace or "",
        "kind": ref.kind.lower(),
        "type": finding.type.value,
        "state": finding.state.value,
    }
    return all(checks[key] in values for key, values in wanted.items())


def _html(body: str, *, nonce: str) -> web.Response:
    """Return a page (or a part of one) with headers that keep it to itself.

    Its own scripts and styles only, no frames, no caching, no referrer.
    """
    from watcher.rendering.page import content_security_policy  # noqa: PLC0415 - (see `Endpoints.page`)

    headers = {
        "Content-Security-Policy": content_security_policy(nonce, live=True),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
    }
    return web.Response(text=body, content_type="text/html", charset="utf-8", headers=headers)


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON, headers=headers)


def _forbidden(caller: Caller, path: str) -> web.Response:
    """403, worded as the API server words it."""
    return _json({"error": f'Forbidden: User "{caller.user}" cannot get path "{path}"'}, status=403)
