"""The connection to the API server: credentials, and raw JSON requests without model deserialization.

Credentials come from a kubeconfig (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`, with `--context`) or from
the pod's service account, through kubernetes-asyncio's loaders, so exec plugins, token files and rotated
service-account tokens work as they do for other clients. Requests go through its `ApiClient` with
`_preload_content=False`: the answer is the raw aiohttp response, read as bytes and decoded with orjson, because
deserializing every watched object into generated models would cost more than the whole analysis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config
from kubernetes_asyncio.config.kube_config import refresh_token

from watcher import __version__

ACCEPT_JSON = "application/json"
USER_AGENT = f"fightwatch/{__version__}"
Query = Sequence[tuple[str, str]]


class ConnectError(Exception):
    """No usable credentials; the message says which file or setting is the problem."""


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status reason and message."""

    def __init__(
        self, status: int, path: str, body: bytes, retry_after: float | None = None, *, method: str = "GET"
    ) -> None:
        self.status = status
        self.path = path
        self.retry_after = retry_after
        try:
            decoded = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            decoded = None
        status_object: dict[str, Any] = decoded if isinstance(decoded, dict) else {}
        self.reason = str(status_object.get("reason") or "")
        self.message = str(status_object.get("message") or body[:200].decode(errors="replace").strip())
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


@dataclass
class Connection:
    """An ApiClient and where its credentials came from (for logs: never the credentials themselves)."""

    api_client: ApiClient
    server: str
    source: str
    namespace: str | None = None  # the context's namespace (kubectl's default), or the service account's
    _refresher: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        await self.api_client.close()


async def connect(
    *,
    kubeconfig: Path | None,
    context: str | None,
    service_account_dir: Path,
    environ: Mapping[str, str] = os.environ,
) -> Connection:
    """Load credentials: --kubeconfig, else KUBECONFIG, else the pod's service account, else ~/.kube/config."""
    configuration = Configuration()
    loader = None
    if kubeconfig is None and environ.get("KUBECONFIG"):
        kubeconfig_text = environ["KUBECONFIG"]
        source = f"KUBECONFIG={kubeconfig_text}"
    elif kubeconfig is not None:
        kubeconfig_text = str(kubeconfig)
        source = f"kubeconfig {kubeconfig}"
    elif environ.get("KUBERNETES_SERVICE_HOST"):
        if context is not None:
            raise ConnectError("--context needs a kubeconfig (--kubeconfig or KUBECONFIG); running in-cluster")
        token, ca = service_account_dir / "token", service_account_dir / "ca.crt"
        try:
            load_incluster_config(  # type: ignore[no-untyped-call]  # (kubernetes-asyncio leaves it untyped)
                client_configuration=configuration,
                token_filename=str(token),
                cert_filename=str(ca),
                environ=dict(environ),
            )
        except (ConfigException, OSError) as exc:
            raise ConnectError(f"in-cluster service account ({service_account_dir}): {exc}") from None
        connection = _connection(configuration, f"in-cluster service account ({service_account_dir})", None)
        with contextlib.suppress(OSError):
            connection.namespace = (service_account_dir / "namespace").read_text().strip() or None
        return connection
    else:
        kubeconfig_text = str(Path.home() / ".kube" / "config")
        source = f"kubeconfig {kubeconfig_text}"
    paths = _existing(kubeconfig_text, source)
    try:
        loader = await load_kube_config(
            config_file=os.pathsep.join(str(p) for p in paths),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        raise ConnectError(f"{source}: cannot use it: {exc}") from None
    if context is not None:
        source += f", context {context}"
    connection = _connection(configuration, source, loader)
    connection.namespace = _context_namespace(loader)
    return connection


def _context_namespace(loader: Any) -> str | None:
    """Return the namespace the kubeconfig's context names (kubectl's default namespace), if any."""
    current = getattr(loader, "_current_context", None)
    try:  # (kubernetes-asyncio's ConfigNode, or the plain dict it holds)
        namespace = current["context"]["namespace"] if current is not None else None
    except (KeyError, TypeError, ConfigException):
        return None
    return str(namespace) if namespace else None


def _existing(kubeconfig_text: str, source: str) -> list[Path]:
    """Return the files of a kubeconfig path list (`a:b`); none at all is an error."""
    paths = [Path(p).expanduser() for p in kubeconfig_text.split(os.pathsep) if p]
    if not any(p.is_file() for p in paths):
        raise ConnectError(
            f"{source}: no such file (give --kubeconfig FILE, set KUBECONFIG, or run in a pod with a service account)"
        )
    return paths


def _connection(configuration: Configuration, source: str, loader: Any) -> Connection:
    configuration.connection_pool_maxsize = 0  # one connection per watch (HTTP/1.1): no pool limit
    api_client = ApiClient(configuration=configuration)
    api_client.user_agent = USER_AGENT
    refresher = None
    if loader is not None and (getattr(loader, "provider", None) == "gcp" or "exec" in (loader._user or {})):
        refresher = asyncio.create_task(refresh_token(loader, configuration), name="token refresh")
    return Connection(api_client=api_client, server=str(configuration.host), source=source, _refresher=refresher)


class KubeApi:
    """GET requests for JSON and for streams, and POSTs of review objects.

    JSON for discovery and lists, streams for watches; the review objects are TokenReview and SubjectAccessReview.
    Non-2xx answers raise ApiError.
    """

    def __init__(self, api_client: ApiClient, *, request_timeout: float) -> None:
        self._client = api_client
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=request_timeout, sock_read=request_timeout)

    async def get(self, path: str, *, query: Query = (), accept: str = ACCEPT_JSON) -> tuple[Any, int]:
        """Return the decoded JSON body and its size in bytes."""
        response = await self.open(path, query=query, accept=accept)
        try:
            body = await response.read()
        finally:
            response.release()
        try:
            return orjson.loads(body), len(body)
        except orjson.JSONDecodeError as exc:
            raise aiohttp.ClientPayloadError(f"GET {path}: the answer is not JSON: {exc}") from None

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` as JSON to a collection; the decoded answer."""
        response: aiohttp.ClientResponse = await self._client.call_api(
            path,
            "POST",
            header_params={"Accept": ACCEPT_JSON, "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        try:
            data = await response.read()
        finally:
            response.release()
        if response.status >= 300:
            raise ApiError(
                response.status, path, data, _retry_after(response.headers.get("Retry-After")), method="POST"
            )
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise aiohttp.ClientPayloadError(f"POST {path}: the answer is not JSON: {exc}") from None

    async def open(
        self,
        path: str,
        *,
        query: Query = (),
        accept: str = ACCEPT_JSON,
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send GET; return the unread response (release it when done)."""
        response: aiohttp.ClientResponse = await self._client.call_api(
            path,
            "GET",
            query_params=list(query),
            header_params={"Accept": accept},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=client_timeout or self._timeout,
        )
        if response.status >= 300:
            try:
                body = await response.read()
            except aiohttp.ClientError:
                body = b""
            finally:
                response.release()
            raise ApiError(response.status, path, body, _retry_after(response.headers.get("Retry-After")))
        return response


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """Return uvloop's event loop where it is installed (it is a dependency, except on Windows).

    Its socket reads, TLS and timers cost about a fifth less CPU per watch event than asyncio's own loop. None:
    asyncio's.
    """
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return None
    return uvloop.new_event_loop
