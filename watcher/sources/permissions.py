"""What the caller's own credentials may watch: `fightwatch scan` asks the API server before it watches.

An engineer's kubeconfig often grants less than a cluster-wide view: a tenant's `view` role in one namespace, no
Secrets, no RBAC objects. Each resource the scan would watch is checked with SelfSubjectAccessReviews (`list` and
`watch`, as `kubectl auth can-i` asks): cluster-wide first; a namespaced resource that may not be watched
cluster-wide is checked in the fallback namespaces (the kubeconfig context's) and watched there. What may be
watched nowhere is left out and told once (`Denied`), with the reason the authorizer gave. The answers are kept:
a discovery pass that finds a new CRD asks about it alone.

A review that cannot be asked (the API server unreachable, reviews not allowed) is not a refusal: the resource is
watched, and a 403 there shows in the watch's state as it would without the review.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from watcher.config import ShardingSettings, WatchSettings
from watcher.sources.discovery import ApiResource, Target, select
from watcher.sources.kube import KubeApi

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
VERBS = ("list", "watch")
CONCURRENCY = 16  # reviews in flight at once


@dataclass(frozen=True, slots=True)
class Answer:
    allowed: bool | None  # None: the review could not be asked
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Denied:
    """A resource not watched where it was asked for: cluster-wide (`namespace` None) or in one namespace."""

    resource: ApiResource
    namespace: str | None
    reason: str


class Permissions:
    """The targets of each discovery pass that these credentials may list and watch.

    This is the `choose` of a ClusterWatch; what was left out is in `denied` (each once: `take_denied`).
    """

    def __init__(
        self,
        api: KubeApi,
        settings: WatchSettings,
        *,
        fallback_namespaces: tuple[str, ...] = (),
        sharding: ShardingSettings | None = None,
    ) -> None:
        """Make the permission checks of these credentials.

        `fallback_namespaces`: where a namespaced resource denied cluster-wide is checked next (only with no
        namespaces in `settings`: those are checked as they are).
        """
        self._api = api
        self._settings = settings
        self._sharding = sharding
        self._fallback = fallback_namespaces
        self._answers: dict[tuple[str, str, str | None], Answer] = {}
        self._limit = asyncio.Semaphore(CONCURRENCY)
        self._everything: Answer | None = None
        self._denied: list[Denied] = []
        self._told: set[tuple[str, str, str | None]] = set()
        self.checked = False  # a pass has been answered (the first one's denials are the ones told at start)

    def take_denied(self) -> list[Denied]:
        """Return what was left out since the last call."""
        denied, self._denied = self._denied, []
        return denied

    async def choose(self, resources: list[ApiResource]) -> list[Target]:
        if self._everything is None:  # (cluster-admin and the like: one review instead of one per resource)
            self._everything = await self._review(ApiResource("*", "", "*", "", namespaced=False), None)
        wanted = select(resources, self._settings, self._sharding)
        if self._everything.allowed:
            self.checked = True
            return wanted
        answers = await asyncio.gather(*(self._review(t.resource, t.namespace) for t in wanted))
        targets: list[Target] = []
        fallback: list[tuple[Target, Answer]] = []
        for target, answer in zip(wanted, answers, strict=True):
            if answer.allowed is not False:
                targets.append(target)
            elif target.namespace is None and target.resource.namespaced and self._fallback:
                fallback.append((target, answer))
            else:
                self._deny(target, answer)
        for target, cluster_wide in fallback:
            in_namespaces = await asyncio.gather(*(self._review(target.resource, ns) for ns in self._fallback))
            allowed = [ns for ns, a in zip(self._fallback, in_namespaces, strict=True) if a.allowed is not False]
            targets += [Target(target.resource, target.full_objects, ns) for ns in allowed]
            if not allowed:
                self._deny(target, cluster_wide)
        self.checked = True
        return targets

    def _deny(self, target: Target, answer: Answer) -> None:
        key = (target.resource.group, target.resource.plural, target.namespace)
        if key not in self._told:
            self._told.add(key)
            self._denied.append(Denied(target.resource, target.namespace, answer.reason))

    async def _review(self, resource: ApiResource, namespace: str | None) -> Answer:
        """May these credentials list and watch `resource` (in `namespace`, or everywhere)? Asked once."""
        key = (resource.group, resource.plural, namespace)
        known = self._answers.get(key)
        if known is not None:
            return known
        async with self._limit:
            answers = [await self._ask(verb, resource, namespace) for verb in VERBS]
        refused = next((a for a in answers if a.allowed is False), None)
        unknown = next((a for a in answers if a.allowed is None), None)
        answer = refused or unknown or Answer(True)
        self._answers[key] = answer
        return answer

    async def _ask(self, verb: str, resource: ApiResource, namespace: str | None) -> Answer:
        attributes: dict[str, Any] = {"verb": verb, "group": resource.group, "resource": resource.plural}
        if namespace is not None:
            attributes["namespace"] = namespace
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        try:
            answer = await self._api.create(REVIEWS, review)
        except Exception as exc:  # HTTP errors, aiohttp's, an answer not JSON: the watch tells
            return Answer(None, str(exc)[:300])
        status = (answer.get("status") or {}) if isinstance(answer, dict) else {}
        if status.get("allowed"):
            return Answer(True)
        reason = str(status.get("reason") or status.get("evaluationError") or "")
        return Answer(False, reason or f"{verb} not allowed")


async def who_am_i(api: KubeApi) -> str | None:
    """Return the user name the API server knows these credentials as.

    Asked with a SelfSubjectReview (`kubectl auth whoami`); None where it cannot say.
    """
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        answer = await api.create(WHOAMI, review)
    except Exception:  # only for the message: any failure means "unknown"
        return None
    user = ((answer.get("status") or {}).get("userInfo") or {}).get("username") if isinstance(answer, dict) else None
    return str(user) if user else None
