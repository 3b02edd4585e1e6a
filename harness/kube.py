"""Raw-JSON access to the API server through a kubernetes-asyncio ApiClient.

The typed models of kubernetes-asyncio drop fields they do not know and cannot send apply patches, so the
harness talks JSON: ``ApiClient.call_api(..., _preload_content=False)`` returns the aiohttp response, whose
body is parsed with orjson. Auth (bearer token) and TLS (the control plane's CA) come from the ApiClient.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import load_kube_config

JSON = dict[str, Any]

CONTENT_JSON = "application/json"
CONTENT_MERGE_PATCH = "application/merge-patch+json"
CONTENT_APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON

REQUEST_TIMEOUT = 30.0
CONFLICT_RETRIES = 20


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, method: str, path: str, body: bytes) -> None:
        self.status = status
        self.method = method
        self.path = path
        self.body = body.decode(errors="replace")
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
        self.status_object: JSON = decoded if isinstance(decoded, dict) else {}
        super().__init__(f"{method} {path}: HTTP {status}: {self.status_object.get('message') or self.body[:300]}")

    @property
    def reason(self) -> str:
        """The Status reason (NotFound, Conflict, AlreadyExists, ...) or ''."""
        return str(self.status_object.get("reason", ""))


async def new_api_client(kubeconfig: Path, *, pool_size: int = 32) -> ApiClient:
    """An ApiClient configured from a kubeconfig file (token + CA; TLS verification on)."""
    configuration = Configuration()
    await load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    configuration.connection_pool_maxsize = pool_size
    return ApiClient(configuration=configuration)


@dataclass(frozen=True)
class Resource:
    """A REST resource: ``prefix`` is /api/v1 or /apis/<group>/<version>."""

    prefix: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """v1, apps/v1, ...: the apiVersion of its objects."""
        return self.prefix.removeprefix("/api/").removeprefix("/apis/")

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        parts = [self.prefix]
        if self.namespaced and namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        if subresource is not None:
            if name is None:
                raise ValueError("a subresource needs an object name")
            parts.append(subresource)
        return "/".join(parts)


def webhook_configurations(which: str) -> Resource:
    """The cluster's admission webhook configurations of a kind: `which` is Validating or Mutating."""
    kind = f"{which}WebhookConfiguration"
    return Resource("/apis/admissionregistration.k8s.io/v1", f"{kind.lower()}s", kind, namespaced=False)


NAMESPACES = Resource("/api/v1", "namespaces", "Namespace", namespaced=False)
CONFIGMAPS = Resource("/api/v1", "configmaps", "ConfigMap")
DEPLOYMENTS = Resource("/apis/apps/v1", "deployments", "Deployment")
REPLICASETS = Resource("/apis/apps/v1", "replicasets", "ReplicaSet")
HPAS = Resource("/apis/autoscaling/v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
HPAS_V1 = Resource("/apis/autoscaling/v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
LEASES = Resource("/apis/coordination.k8s.io/v1", "leases", "Lease")
VALIDATING_WEBHOOKS = webhook_configurations("Validating")
SERVICES = Resource("/api/v1", "services", "Service")
ENDPOINTS = Resource("/api/v1", "endpoints", "Endpoints")
ENDPOINT_SLICES = Resource("/apis/discovery.k8s.io/v1", "endpointslices", "EndpointSlice")
MUTATING_WEBHOOKS = webhook_configurations("Mutating")
KUSTOMIZATIONS = Resource("/apis/kustomize.toolkit.fluxcd.io/v1", "kustomizations", "Kustomization")
EXTERNAL_ARTIFACTS = Resource("/apis/source.toolkit.fluxcd.io/v1", "externalartifacts", "ExternalArtifact")
SECRETS = Resource("/api/v1", "secrets", "Secret")
ROLES = Resource("/apis/rbac.authorization.k8s.io/v1", "roles", "Role")
ROLE_BINDINGS = Resource("/apis/rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding")
CLUSTER_ROLES = Resource("/apis/rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
CRDS = Resource("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False)
WIDGETS = Resource("/apis/example.com/v1", "widgets", "Widget")


THROTTLE_RETRIES = 10  # client-go's default for 429 answers


def _retry_after(value: str | None) -> float:
    """Seconds a 429's Retry-After asks for (whole seconds, as the API server writes it), 1 when it names none."""
    try:
        return min(max(float(value or 1), 0.1), 10.0)
    except ValueError:
        return 1.0


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Sent(TypedDict, total=False):
    """What a request sends besides its method and path (`Kube.open`'s keywords)."""

    query: Mapping[str, str | int | bool] | None
    body: Any
    content_type: str


class Kube:
    """Thin JSON client over an ApiClient. Every call raises ApiError on a non-2xx answer."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    async def open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = CONTENT_JSON,
        request_timeout: float | aiohttp.ClientTimeout | None = REQUEST_TIMEOUT,
    ) -> aiohttp.ClientResponse:
        """Send a request; return the unread response (2xx), e.g. to stream a watch. Release it when done.

        A 429 is sent again after the Retry-After it names, up to THROTTLE_RETRIES times, as client-go does (the API
        server answers 429 "storage is (re)initializing" while a new resource's watch cache fills)."""
        for attempt in range(THROTTLE_RETRIES + 1):
            response: aiohttp.ClientResponse = await self.api_client.call_api(
                path,
                method,
                query_params=[(key, _query_value(value)) for key, value in (query or {}).items()],
                header_params={"Accept": CONTENT_JSON, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=request_timeout,
            )
            if response.status < 300:
                return response
            try:
                data = await response.read()
            finally:
                response.release()
            if response.status != 429 or attempt == THROTTLE_RETRIES:
                raise ApiError(response.status, method, path, data)
            await asyncio.sleep(_retry_after(response.headers.get("Retry-After")))
        raise AssertionError("unreachable")

    async def request(self, method: str, path: str, **sent: Unpack[Sent]) -> JSON:
        """Send a request (what `open` sends) and return its answer, a JSON object ({} when empty)."""
        response = await self.open(method, path, **sent)
        try:
            data = await response.read()
        finally:
            response.release()
        decoded = orjson.loads(data) if data else {}
        if not isinstance(decoded, dict):
            raise TypeError(f"{method} {path}: expected a JSON object, got {type(decoded).__name__}")
        return decoded

    async def get(self, path: str, *, query: Mapping[str, str | int | bool] | None = None) -> JSON:
        return await self.request("GET", path, query=query)

    async def create(self, collection_path: str, obj: JSON, *, manager: str) -> JSON:
        return await self.request("POST", collection_path, query={"fieldManager": manager}, body=obj)

    async def replace(self, path: str, obj: JSON, *, manager: str) -> JSON:
        """Update (PUT): the write whose managedFields entry has operation Update."""
        return await self.request("PUT", path, query={"fieldManager": manager}, body=obj)

    async def merge_patch(self, path: str, patch: JSON, *, manager: str) -> JSON:
        return await self.request(
            "PATCH", path, query={"fieldManager": manager}, body=patch, content_type=CONTENT_MERGE_PATCH
        )

    async def apply(self, path: str, obj: JSON, *, manager: str, force: bool = True) -> JSON:
        """Server-side apply (PATCH application/apply-patch+yaml); creates the object when missing."""
        return await self.request(
            "PATCH",
            path,
            query={"fieldManager": manager, "force": force},
            body=obj,
            content_type=CONTENT_APPLY_PATCH,
        )

    async def ensure(self, collection_path: str, obj: JSON, *, manager: str) -> JSON:
        """Create obj unless an object of that name exists; return the object either way."""
        try:
            return await self.create(collection_path, obj, manager=manager)
        except ApiError as exc:
            if exc.status != 409:
                raise
        return await self.get(f"{collection_path}/{obj['metadata']['name']}")

    async def read_modify_write(
        self,
        path: str,
        mutate: Callable[[JSON], None],
        *,
        manager: str,
        subresource: str | None = None,
        create: Callable[[], JSON] | None = None,
    ) -> JSON:
        """GET, mutate in place, PUT (to path/subresource when given); retry the whole cycle on 409 Conflict.

        With ``create``, a missing object is created (POST, by the same manager) from ``create()`` after
        ``mutate`` has been applied to it, so the first write of an Update writer may be the creation.
        """
        target = f"{path}/{subresource}" if subresource else path
        for _ in range(CONFLICT_RETRIES):
            try:
                obj = await self.get(path)
            except ApiError as exc:
                if exc.status != 404 or create is None:
                    raise
                fresh = create()
                mutate(fresh)
                collection = path.rsplit("/", 1)[0]
                try:
                    return await self.create(collection, fresh, manager=manager)
                except ApiError as create_exc:
                    if create_exc.status != 409:  # someone else created it meanwhile: update theirs
                        raise
                    continue
            mutate(obj)
            try:
                return await self.replace(target, obj, manager=manager)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            await asyncio.sleep(0)  # let the writer we collided with finish its round trip
        raise RuntimeError(f"{target}: still conflicting after {CONFLICT_RETRIES} read-modify-write attempts")

    async def ensure_namespace(self, name: str, *, manager: str = "fightwatch-harness") -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await self.ensure(NAMESPACES.path(), body, manager=manager)
