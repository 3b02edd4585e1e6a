"""API discovery: which resources the server serves that can be listed and watched, and which of them to watch.

Built-in and custom resources alike, in each group's preferred version. A resource served under two groups from
one storage (Ingress in `extensions` and `networking.k8s.io`, Event in the core group and `events.k8s.io`) is
watched once: the same objects twice would reach the engine out of order. Parsing and selection are pure
functions; only `discover` does I/O.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog

from watcher.config import ALWAYS_METADATA_ONLY, ShardingSettings, WatchSettings
from watcher.sources.kube import ApiError, KubeApi

log = structlog.get_logger("fightwatch")

LEGACY_GROUPS = ("extensions",)  # served for old clients; the same objects live in a newer group
DISCOVERY_CONCURRENCY = 8
# From Kubernetes 1.22 on, managedFields entries name their subresource and every write stamps its writer's entry.
SUBRESOURCE_ENTRIES_SINCE = 22
OLD_SERVER = (
    "this API server is older than 1.22: writes through the scale subresource leave no managedFields entry and a "
    "writer rewriting fields it already owns does not stamp its entry, so some writers cannot be named (an "
    "autoscaler's), and a status loop's writer only from full objects; the rest works as on current servers"
)


async def server_version(api: KubeApi) -> tuple[str, int | None]:
    """Return the API server's gitVersion and minor release (`/version`).

    ("", None) where it does not say.
    """
    answer, _ = await api.get("/version")
    if not isinstance(answer, dict):
        return "", None
    version = str(answer.get("gitVersion") or "")
    digits = "".join(c for c in str(answer.get("minor") or "") if c.isdigit())  # ("27+" on some clouds)
    return version, int(digits) if digits else None


async def log_server_version(api: KubeApi) -> None:
    """Log the API server's release once, and warn of what a server older than 1.22 cannot show."""
    try:
        version, minor = await server_version(api)
    except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
        log.warning("server version unknown", error=str(exc))
        return
    if minor is not None and minor < SUBRESOURCE_ENTRIES_SINCE:
        log.warning("old API server", server_version=version, detail=OLD_SERVER)
    else:
        log.info("API server", server_version=version)


@dataclass(frozen=True, slots=True)
class ApiResource:
    """A resource as discovery names it, in one group version."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    storage_hash: str = ""  # the same for every group version served from one storage
    singular: str = ""
    short_names: tuple[str, ...] = ()  # kubectl's abbreviations: `cm`, `deploy`

    @property
    def name(self) -> str:
        """kubectl's name: `configmaps`, `deployments.apps`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def is_secret(self) -> bool:
        """Secrets are only ever watched as metadata, and recorded with their data as a digest only."""
        return self.group == "" and self.plural == "secrets"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{prefix}/{self.plural}"


@dataclass(frozen=True, slots=True)
class Target:
    """A resource chosen to be watched, and how: cluster-wide, or in one namespace."""

    resource: ApiResource
    full_objects: bool
    namespace: str | None = None

    @property
    def name(self) -> str:
        """How logs, /readyz and /metrics name this watch: `configmaps`, or `configmaps@team-a` in one namespace."""
        return f"{self.resource.name}@{self.namespace}" if self.namespace else self.resource.name

    @property
    def path(self) -> str:
        r = self.resource
        if self.namespace is None:
            return r.path
        prefix = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"
        return f"{prefix}/namespaces/{self.namespace}/{r.plural}"


@dataclass
class Discovery:
    """What one discovery pass found; `failed` maps group versions that could not be read to the error."""

    resources: list[ApiResource]
    failed: dict[str, str] = field(default_factory=dict)


def parse_resource_list(group_version: str, doc: Mapping[str, Any]) -> list[ApiResource]:
    """Return the listable and watchable top-level resources of one APIResourceList.

    No subresources.
    """
    group, _, version = group_version.rpartition("/")
    found = []
    for entry in doc.get("resources") or ():
        name = entry.get("name") or ""
        verbs = entry.get("verbs") or ()
        if "/" in name or not name or "list" not in verbs or "watch" not in verbs:
            continue
        found.append(
            ApiResource(
                group=group,
                version=version,
                plural=name,
                kind=str(entry.get("kind") or ""),
                namespaced=bool(entry.get("namespaced")),
                storage_hash=str(entry.get("storageVersionHash") or ""),
                singular=str(entry.get("singularName") or ""),
                short_names=tuple(str(n) for n in entry.get("shortNames") or ()),
            )
        )
    return found


def preferred_group_versions(doc: Mapping[str, Any]) -> list[str]:
    """Return the preferred group version of each group in an APIGroupList (`/apis`)."""
    versions = []
    for group in doc.get("groups") or ():
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if not preferred and group.get("versions"):
            preferred = group["versions"][0].get("groupVersion")
        if preferred:
            versions.append(str(preferred))
    return versions


def deduplicate(resources: Iterable[ApiResource]) -> list[ApiResource]:
    """One resource per storage: legacy groups lose, otherwise the one discovered first wins."""
    ordered = sorted(resources, key=lambda r: r.group in LEGACY_GROUPS)  # stable: discovery order otherwise
    seen: set[tuple[str, str]] = set()
    kept = []
    for resource in ordered:
        if resource.storage_hash:
            key = (resource.plural, resource.storage_hash)
            if key in seen:
                continue
            seen.add(key)
        kept.append(resource)
    return kept


def matches(resource: ApiResource, selector: str) -> bool:
    """`plural` (any group), `plural.group`, or a shell pattern over either."""
    if fnmatch.fnmatchcase(resource.name, selector):
        return True
    return "." not in selector and fnmatch.fnmatchcase(resource.plural, selector)


def resolve(name: str, resources: Sequence[ApiResource]) -> list[ApiResource]:
    """Return the resources `name` means as kubectl reads a resource type.

    A plural, singular, short name or kind (in any case), optionally `.group` (or a prefix of its group: `deploy.apps`);
    `kind.version.group` too. Like kubectl, a name served by several groups means the core group's, else each group's.
    [] where nothing matches.
    """
    wanted = name.lower()
    matched = [r for r in resources if _names(r, wanted)]
    if not matched:
        return []
    core = [r for r in matched if r.group == ""]
    return core or matched


def _names(resource: ApiResource, wanted: str) -> bool:
    own = {resource.plural, resource.singular, resource.kind.lower(), *resource.short_names} - {""}
    if wanted in own:
        return True
    for known in own:
        rest = wanted.removeprefix(known + ".")
        if rest == wanted:
            continue
        # `plural.group`, `plural.version.group`, or a shorter form of the group (`hpa.autoscaling`)
        group = rest.removeprefix(resource.version + ".") if "." in rest else rest
        if resource.group and (group == resource.group or resource.group.startswith(group + ".")):
            return True
    return False


def literal_namespaces(settings: WatchSettings) -> list[str] | None:
    """`watch.namespaces` when they are plain names (each watched on its own), else None (cluster-wide)."""
    names = list(settings.namespaces)
    if not names or any(set(n) & set("*?[") for n in names):
        return None
    return sorted(set(names))


def shard_of(resource: ApiResource, sharding: ShardingSettings) -> int:
    """Return the shard that watches `resource`.

    The one `sharding.assign` names (the last matching key), else a stable hash of its name (`plural.group`, the same in
    every version and every process) modulo the shards.
    """
    assigned = None
    for selector, shard in sharding.assign.items():
        if matches(resource, selector):
            assigned = shard
    if assigned is not None:
        return assigned
    digest = hashlib.blake2b(resource.name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % sharding.total_shards


def select(
    resources: Iterable[ApiResource], settings: WatchSettings, sharding: ShardingSettings | None = None
) -> list[Target]:
    """Select the resources to watch, each with its per-resource settings.

    By the allowlist and denylist (and, with shards, this shard's share).

    With plain namespace names in `watch.namespaces`, namespaced resources are watched in each of them (what RBAC
    granted by a RoleBinding per namespace allows); otherwise cluster-wide, objects filtered by namespace.
    """
    namespaces = literal_namespaces(settings)
    targets = []
    for resource in resources:
        if settings.resources and not any(matches(resource, s) for s in settings.resources):
            continue
        if sharding is not None and sharding.total_shards > 1 and shard_of(resource, sharding) != sharding.shard:
            continue
        if any(matches(resource, s) for s in settings.exclude_resources):
            continue
        full = False
        for selector, options in settings.per_resource.items():
            if matches(resource, selector):
                full = options.full_objects
        if resource.group == "" and resource.plural in ALWAYS_METADATA_ONLY:
            full = False
        if namespaces is not None and resource.namespaced:
            targets += [Target(resource, full, namespace) for namespace in namespaces]
        else:
            targets.append(Target(resource, full))
    return targets


async def discover(api: KubeApi, previous: Iterable[ApiResource] = ()) -> Discovery:
    """Read /api and /apis and every preferred group version.

    A group version that fails keeps the resources it had in `previous` (an aggregated API that is briefly unavailable
    is not dropped); /api or /apis failing raises.
    """
    core, _ = await api.get("/api")
    groups, _ = await api.get("/apis")
    group_versions = [str(v) for v in core.get("versions") or ()] + preferred_group_versions(groups)
    limit = asyncio.Semaphore(DISCOVERY_CONCURRENCY)

    async def read(group_version: str) -> list[ApiResource] | str:
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        async with limit:
            try:
                doc, _ = await api.get(path)
            except ApiError as exc:
                return f"HTTP {exc.status}: {exc.message}"
        return parse_resource_list(group_version, doc)

    results = await asyncio.gather(*(read(gv) for gv in group_versions))
    found: list[ApiResource] = []
    failed: dict[str, str] = {}
    previous = list(previous)
    for group_version, result in zip(group_versions, results, strict=True):
        if isinstance(result, str):
            failed[group_version] = result
            found += [r for r in previous if r.api_version == group_version]
        else:
            found += result
    return Discovery(resources=deduplicate(found), failed=failed)
