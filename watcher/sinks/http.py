"""The watcher's HTTP endpoints (aiohttp): /metrics, /healthz, /readyz and /api/v1/findings.

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

No credential, or one the API server does not accept: 401. Not allowed: 403. The API server unable to review a
request that no cached answer covers: 503. Tokens are never logged or kept (only their digest, in the cache).

`/api/v1/findings` answers `{"findings": [...]}` with each finding in the JSON schema of `replay --output json`
(most severe first), filtered by `namespace` (empty: cluster-scoped objects), `kind`, `type` and `state` (repeat
a parameter or separate values with commas for several). The endpoints only read: the handlers get their data
through plain callables, so this module knows nothing of watches or the engine.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from watcher.model import Finding, FindingState, FindingType, ObjectRef
from watcher.serving.access import AccessUnavailableError, Caller, Resource
from watcher.serving.guard import Guard
from watcher.sinks.report import finding_json, severity_order

FILTERS = ("namespace", "kind", "type", "state")
FINDINGS_PATH = "/api/v1/findings"
EVERY_FINDING = Resource("list", resource="findings", group="fightwatch.io")  # (cluster scope: all of them)
REVIEWS_AT_ONCE = 8  # SubjectAccessReviews in flight for one request
_JSON = "application/json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Sources:
    """Where the endpoints read from."""

    findings: Callable[[], list[Finding]]
    readiness: Callable[[], dict[str, Any]]  # has "ready": bool
    liveness: Callable[[], dict[str, Any]]  # has "alive": bool
    metrics: Callable[[str | None], tuple[bytes, str]]  # Accept header -> body, content type (`exposition`)
    resource: Callable[[ObjectRef], str]  # the plural resource of an object's kind, for authorization


@dataclass
class ServedRequests:
    """Requests answered, by endpoint and status code (for fightwatch_http_requests_total)."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)


def make_app(sources: Sources, guard: Guard, served: ServedRequests | None = None) -> web.Application:
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

    def protected(handler: Callable[[web.Request, Caller], Awaitable[web.Response]]) -> Handler:
        """The handler, for authenticated callers only (401 otherwise; 503 when that cannot be decided)."""

        async def guarded(request: web.Request) -> web.Response:
            try:
                caller = await guard.caller(request)
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

    async def details(request: web.Request) -> bool:
        """Whether the caller of an open endpoint may see its whole report (never an error: probes stay open)."""
        if not guard.secure:
            return True
        try:
            caller = await guard.caller(request)
            return caller is not None and await guard.allowed(caller, Resource("get", path=request.path))
        except AccessUnavailableError:
            return False

    async def healthz(request: web.Request) -> web.Response:
        report = sources.liveness()
        body = report if await details(request) else {"alive": report["alive"]}
        return _json(body, status=200 if report["alive"] else 503)

    async def readyz(request: web.Request) -> web.Response:
        report = sources.readiness()
        body = report if await details(request) else {"ready": report["ready"]}
        return _json(body, status=200 if report["ready"] else 503)

    async def metrics(request: web.Request, caller: Caller) -> web.Response:
        if not await guard.allowed(caller, Resource("get", path=request.path)):
            return _forbidden(caller, request.path)
        body, content_type = sources.metrics(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def findings(request: web.Request, caller: Caller) -> web.Response:
        try:
            wanted = parse_filters(request.query.items())
        except ValueError as exc:
            return _json({"error": str(exc)}, status=400)
        chosen = [f for f in sources.findings() if keep(f, wanted)]
        if not await guard.allowed(caller, EVERY_FINDING):
            chosen = await readable(chosen, caller, guard.allowed, sources.resource)
        return _json({"findings": [finding_json(f) for f in severity_order(chosen)]})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", protected(metrics))
    app.router.add_get(FINDINGS_PATH, protected(findings))
    return app


async def readable(
    findings: list[Finding],
    caller: Caller,
    allowed: Callable[[Caller, Resource], Awaitable[bool]],
    resource: Callable[[ObjectRef], str],
) -> list[Finding]:
    """The findings about objects the caller may `list`: on the object's resource in its namespace, or at cluster
    scope (which covers every namespace, and is asked first: one review per resource for a cluster-wide reader).
    Reviews run a few at a time; each (caller, resource, namespace) is asked once and cached by `allowed`."""
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


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON, headers=headers)


def _forbidden(caller: Caller, path: str) -> web.Response:
    """403, worded as the API server words it."""
    return _json({"error": f'Forbidden: User "{caller.user}" cannot get path "{path}"'}, status=403)
