"""The watcher's HTTP endpoints (aiohttp): /metrics, /healthz, /readyz and /api/v1/findings.

`/api/v1/findings` answers `{"findings": [...]}` with each finding in the JSON schema of `replay --output json`
(most severe first), filtered by `namespace` (empty: cluster-scoped objects), `kind`, `type` and `state` (repeat
a parameter or separate values with commas for several). The endpoints only read: the handlers get their data
through plain callables, so this module knows nothing of watches or the engine.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from watcher.model import Finding, FindingState, FindingType
from watcher.sinks.report import finding_json, severity_order

FILTERS = ("namespace", "kind", "type", "state")
_JSON = "application/json"


@dataclass(frozen=True)
class Sources:
    """Where the endpoints read from."""

    findings: Callable[[], list[Finding]]
    readiness: Callable[[], dict[str, Any]]  # has "ready": bool
    liveness: Callable[[], dict[str, Any]]  # has "alive": bool
    metrics: Callable[[str | None], tuple[bytes, str]]  # Accept header -> body, content type (`exposition`)


def make_app(sources: Sources) -> web.Application:
    app = web.Application()

    async def healthz(_: web.Request) -> web.Response:
        report = sources.liveness()
        return _json(report, status=200 if report["alive"] else 503)

    async def readyz(_: web.Request) -> web.Response:
        report = sources.readiness()
        return _json(report, status=200 if report["ready"] else 503)

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = sources.metrics(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def findings(request: web.Request) -> web.Response:
        try:
            wanted = parse_filters(request.query.items())
        except ValueError as exc:
            return _json({"error": str(exc)}, status=400)
        chosen = [f for f in sources.findings() if keep(f, wanted)]
        return _json({"findings": [finding_json(f) for f in severity_order(chosen)]})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/findings", findings)
    return app


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


def _json(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON)


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
