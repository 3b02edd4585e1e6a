"""Who may read what fightwatch serves, decided the Kubernetes way.

As controller-runtime's metrics filters and kube-rbac-proxy do it: a bearer token is authenticated with a
`TokenReview`, and the caller's access is decided with a `SubjectAccessReview` against the cluster's own RBAC.

Both answers are cached, bounded in size: a success for `allowed_ttl`, a refusal for `denied_ttl` (shorter, so a new
RoleBinding takes effect soon), so a scrape every 15 seconds is not an API call each time. When the API server
cannot answer, an answer expired less than `max_stale` ago is used still (a cached caller is not turned away while
the API server restarts); without one, `AccessUnavailableError` is raised (the endpoint answers 503). Tokens are
kept only as SHA-256 digests, and are never logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - a path, not a secret
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
AUTHENTICATED = "system:authenticated"
TOKEN_REVIEW, ACCESS_REVIEW = "TokenReview", "SubjectAccessReview"

Post = Callable[[str, dict[str, Any]], Awaitable[Any]]  # POST a review object, the decoded answer (raises on errors)
V = TypeVar("V")


class AccessUnavailableError(Exception):
    """The API server could not review a request and no earlier answer is cached."""


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user, as a TokenReview names it."""

    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Resource:
    """What a caller wants to read.

    `verb` on a resource (in a namespace, "" for cluster scope), or on a non-resource path.
    """

    verb: str
    resource: str = ""
    group: str = ""
    namespace: str = ""
    path: str = ""  # a non-resource URL ("/metrics"); then resource, group and namespace are unused


@dataclass(slots=True)
class AccessStats:
    reviews: Counter[tuple[str, str]] = field(default_factory=Counter)  # (TokenReview|SubjectAccessReview, result)
    cache_hits: int = 0
    shared_answers: int = 0  # answers of a review another request had already asked for
    stale_answers: int = 0  # expired answers used because the API server could not answer
    last_error: str = ""  # why the last review failed ("" once one succeeded again); never holds a token

    @property
    def token_reviews(self) -> int:
        return sum(n for (kind, _), n in self.reviews.items() if kind == TOKEN_REVIEW)

    @property
    def access_reviews(self) -> int:
        return sum(n for (kind, _), n in self.reviews.items() if kind == ACCESS_REVIEW)


class _Cache(Generic[V]):
    """At most `size` answers, the least recently used go first; each with the time it expires."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, tuple[float, V]] = OrderedDict()

    def get(self, key: Any) -> tuple[float, V] | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def put(self, key: Any, expires: float, value: V) -> None:
        self._items[key] = (expires, value)
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


@dataclass
class Access:
    """Authenticate tokens and review access through the API server, with bounded caches."""

    post: Post
    audiences: tuple[str, ...] = ()  # a token must be issued for one of these (empty: the API server's own)
    allowed_ttl: float = 300.0
    denied_ttl: float = 30.0
    max_stale: float = 3600.0  # how long past its expiry an answer may stand in for one the API server cannot give
    size: int = 10_000
    clock: Callable[[], float] = time.monotonic
    stats: AccessStats = field(default_factory=AccessStats)

    def __post_init__(self) -> None:
        self._callers: _Cache[Caller | None] = _Cache(self.size)
        self._decisions: _Cache[bool] = _Cache(self.size)
        self._in_flight: dict[tuple[str, Any], asyncio.Future[Any]] = {}

    async def authenticate(self, token: str) -> Caller | None:
        """Return the caller a bearer token belongs to, or None when the API server does not accept it."""
        key = hashlib.sha256(token.encode()).digest()

        async def review() -> Caller | None:
            spec: dict[str, Any] = {"token": token}
            if self.audiences:
                spec["audiences"] = list(self.audiences)
            answer = await self.post(
                TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
            )
            return _caller(answer)

        return await self._cached(self._callers, key, review, kind=TOKEN_REVIEW, ok=lambda c: c is not None)

    async def allowed(self, caller: Caller, want: Resource) -> bool:
        """Whether the caller may `want`, as the cluster's authorizers decide."""

        async def review() -> bool:
            spec: dict[str, Any] = {"user": caller.user, "groups": list(caller.groups)}
            if caller.uid:
                spec["uid"] = caller.uid
            if caller.extra:
                spec["extra"] = {k: list(v) for k, v in caller.extra}
            if want.path:
                spec["nonResourceAttributes"] = {"path": want.path, "verb": want.verb}
            else:
                spec["resourceAttributes"] = {
                    "verb": want.verb,
                    "group": want.group,
                    "resource": want.resource,
                    "namespace": want.namespace,
                }
            answer = await self.post(
                ACCESS_REVIEWS,
                {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
            )
            status = answer.get("status") if isinstance(answer, dict) else None
            return isinstance(status, dict) and status.get("allowed") is True

        return await self._cached(self._decisions, (caller, want), review, kind=ACCESS_REVIEW, ok=bool)

    async def _cached(
        self, cache: _Cache[V], key: Any, review: Callable[[], Awaitable[V]], *, kind: str, ok: Callable[[V], bool]
    ) -> V:
        found = cache.get(key)
        if found is not None and found[0] > self.clock():
            self.stats.cache_hits += 1
            return found[1]
        # One review per question at a time: callers asking what is being asked already wait for that answer (as
        # the API server's own token cache does), so a burst of requests with one new token is one TokenReview.
        flight = (kind, key)
        pending = self._in_flight.get(flight)
        if pending is not None:
            self.stats.shared_answers += 1
            return cast(V, await asyncio.shield(pending))
        task = asyncio.ensure_future(self._review(cache, key, found, review, kind=kind, ok=ok))
        self._in_flight[flight] = task
        task.add_done_callback(lambda done: self._landed(flight, done))
        return await asyncio.shield(task)

    def _landed(self, flight: tuple[str, Any], task: asyncio.Future[Any]) -> None:
        self._in_flight.pop(flight, None)
        if not task.cancelled():
            task.exception()  # (retrieved: waiters that gave up do not leave it unretrieved)

    async def _review(
        self,
        cache: _Cache[V],
        key: Any,
        found: tuple[float, V] | None,
        review: Callable[[], Awaitable[V]],
        *,
        kind: str,
        ok: Callable[[V], bool],
    ) -> V:
        now = self.clock()
        try:
            value = await review()
        except Exception as exc:  # (any failure to review: an older answer, or unavailable)
            self.stats.reviews[(kind, "error")] += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"[:300]  # (the API server's message, not the body)
            if found is not None and now - found[0] <= self.max_stale:
                self.stats.stale_answers += 1
                return found[1]
            raise AccessUnavailableError(f"the API server could not review the request: {type(exc).__name__}") from None
        self.stats.reviews[(kind, "answered")] += 1
        self.stats.last_error = ""
        cache.put(key, now + (self.allowed_ttl if ok(value) else self.denied_ttl), value)
        return value


SELF_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
NEEDED = (("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews"))


async def missing_permissions(post: Post) -> list[str]:
    """Return what fightwatch itself may not do of what reviewing callers needs.

    Reviewing needs `create` on tokenreviews and subjectaccessreviews; each is asked with a SelfSubjectAccessReview
    (which every authenticated user may create).
    """
    missing = []
    for group, resource in NEEDED:
        answer = await post(
            SELF_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": "create", "group": group, "resource": resource}},
            },
        )
        status = answer.get("status") if isinstance(answer, dict) else None
        if not (isinstance(status, dict) and status.get("allowed") is True):
            missing.append(f"create {resource}.{group}")
    return missing


def certificate_caller(peer: Any) -> Caller | None:
    """Return the caller a verified client certificate names, as the API server takes it.

    The subject's common name is the user, its organizations the groups (with system:authenticated, as every
    authenticated user has).
    """
    if not isinstance(peer, dict):
        return None
    attributes = [pair for rdn in peer.get("subject", ()) for pair in rdn if isinstance(pair, tuple) and len(pair) == 2]
    user = next((str(v) for k, v in attributes if k == "commonName"), "")
    if not user:
        return None
    groups = tuple(dict.fromkeys(str(v) for k, v in attributes if k == "organizationName"))
    return Caller(user=user, groups=(*groups, AUTHENTICATED))


def _caller(answer: Any) -> Caller | None:
    status = answer.get("status") if isinstance(answer, dict) else None
    if not isinstance(status, dict) or status.get("authenticated") is not True:
        return None
    user = status.get("user") or {}
    extra = user.get("extra") or {}
    return Caller(
        user=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in v)) for k, v in extra.items())),
    )


__all__ = [
    "ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "Access",
    "AccessStats",
    "AccessUnavailableError",
    "Caller",
    "Resource",
    "certificate_caller",
    "missing_permissions",
]
