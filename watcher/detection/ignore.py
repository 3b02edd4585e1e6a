"""Ignore rules, compiled: which objects are left out, and which fields and writers are not counted.

Default rules (`config.DEFAULT_IGNORES`) leave out single-writer churn (Leases renewed, Events, Endpoints following
pods, leader-election annotations), not fights: the objects they leave out are still tracked, and an alternation of
two distinct writers there is reported, marked with the rule's reason. The user's rules (`detection.ignore`) leave
out what they name; a fight they hide is counted (`origin`, `Stats.ignored_fights`), not reported.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Final

from watcher.config import DEFAULT_IGNORES, IgnoreRule
from watcher.model import Writer

DEFAULT: Final = "default"  # the origin of a default rule
CONFIG: Final = "config"  # of one of the user's (`detection.ignore`)


def origin_of(rule: IgnoreRule) -> str:
    return DEFAULT if rule in DEFAULT_IGNORES else CONFIG


def _catches(rule: IgnoreRule, path: str, by: Writer, before: Writer | None) -> bool:
    """Whether a rule that names a manager leaves out a change of `path` by `by` (taken from `before`)."""
    if rule.fields and not path.startswith(rule.fields):
        return False
    return any(
        writer is not None and writer.manager and fnmatch.fnmatchcase(writer.manager, rule.manager or "")
        for writer in (by, before)
    )


class ObjectRules:
    """The rules that apply to one object, compiled for the per-write checks.

    Whole-object rules leave the object out (`left_out`: their reason; `left_out_by`: their origin); field and
    manager rules leave fields and writers out. A class, not a NamedTuple: compiled, its checks are called directly,
    several times a write.
    """

    __slots__ = ("_ignored", "default_prefixes", "empty", "left_out", "left_out_by", "prefixes", "scoped")

    def __init__(
        self,
        prefixes: tuple[str, ...],
        scoped: tuple[IgnoreRule, ...],
        *,
        left_out: str = "",
        left_out_by: str = "",
        default_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.prefixes = prefixes  # field prefixes ignored whoever writes them
        self.default_prefixes = default_prefixes  # those of them a default rule names
        self.scoped = scoped  # rules that name a manager
        self.left_out = left_out  # the reason of the rule that leaves the whole object out, "" for none
        self.left_out_by = left_out_by  # its origin: DEFAULT or CONFIG
        # nothing is ignored (no rule applies: the checks can be skipped)
        self.empty = not prefixes and not scoped and not left_out
        self._ignored: dict[str, bool] = {}  # `ignores_manager` by manager (rules are shared; managers are few)

    def field_ignored(self, path: str, by: Writer, before: Writer | None) -> bool:
        """Whether a change of `path` by `by` (taken from `before`) falls under a field or manager rule."""
        if self.prefixes and path.startswith(self.prefixes):
            return True
        return any(_catches(rule, path, by, before) for rule in self.scoped)

    def origin(self, path: str, by: Writer, before: Writer | None) -> str:
        """Which rules leave a change of `path` out: "" none, DEFAULT (only default rules), CONFIG (a user's rule)."""
        if self.left_out:
            return self.left_out_by
        found = ""
        if self.prefixes and path.startswith(self.prefixes):
            found = DEFAULT if self.default_prefixes and path.startswith(self.default_prefixes) else CONFIG
            if found == CONFIG:
                return CONFIG
        for rule in self.scoped:
            if _catches(rule, path, by, before):
                if origin_of(rule) == CONFIG:
                    return CONFIG
                found = DEFAULT
        return found

    def reason(self, path: str) -> str:
        """Return the reason of the default rule that leaves a change of `path` out (to mark a fight reported there)."""
        if self.left_out:
            return self.left_out
        return next(
            (r.reason for r in DEFAULT_IGNORES if r.fields and r.manager is None and path.startswith(r.fields)), ""
        )

    def manager_ignored(self, writer: Writer) -> bool:
        """Whether a rule with only a manager (no fields) drops this writer's writes."""
        return writer.manager is not None and self.ignores_manager(writer.manager)

    def ignores_manager(self, manager: str) -> bool:
        """Whether a rule with only a manager (no fields) drops the writes of this field manager."""
        ignored = self._ignored.get(manager)
        if ignored is None:
            if len(self._ignored) >= 1024:  # (managers that carry a version or host: the recent ones are all it needs)
                self._ignored.clear()
            ignored = self._ignored[manager] = any(
                not r.fields and fnmatch.fnmatchcase(manager, r.manager or "") for r in self.scoped
            )
        return ignored


NO_RULES: Final = ObjectRules((), ())


def resource_of(kind: str) -> str:
    """Return the resource a kind is served as, by the API server's own guess.

    The guess is for kinds it does not know better (apimachinery's `UnsafeGuessKindToResource`): `Deployment` ->
    `deployments`, `Ingress` -> `ingresses`, `NetworkPolicy` -> `networkpolicies`. Discovery knows the exceptions
    (`Endpoints` is `endpoints`).
    """
    singular = kind.lower()
    if not singular:
        return ""
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


class RuleBook:
    """Ignore rules, matched once per object against group/kind/namespace/name."""

    def __init__(self, rules: tuple[IgnoreRule, ...]) -> None:
        self._rules = rules
        self._kinds: dict[tuple[str | None, str], ObjectRules] = {}
        for r in rules:  # (a user's rule of a kind wins over a default one: the object is then left out for good)
            if r.whole_objects and r.kind and r.group is not None and r.namespace is None and r.name is None:
                key = (r.group, r.kind.lower())
                if key not in self._kinds or origin_of(r) == CONFIG:
                    self._kinds[key] = self._left_out(r)
        self._patterns = [
            (
                r,
                re.compile(fnmatch.translate(r.namespace)) if r.namespace else None,
                re.compile(fnmatch.translate(r.name)) if r.name else None,
            )
            for r in rules
        ]
        self._by_name = any(r.name is not None for r in rules)
        # A default kind's rules are final unless a user's rule may leave out some of its objects by namespace or name.
        self._kinds_final = not any(
            r.whole_objects and origin_of(r) == CONFIG and (r.namespace or r.name) for r in rules
        )
        self._cache: dict[tuple[str, str, str | None], ObjectRules] = {}
        self._request_cache: dict[tuple[str, str, str], ObjectRules | None] = {}
        self._compiled: dict[tuple[IgnoreRule, ...], ObjectRules] = {}

    def _left_out(self, rule: IgnoreRule) -> ObjectRules:
        return ObjectRules((), (), left_out=rule.reason or "ignored", left_out_by=origin_of(rule))

    def for_ref(self, api_version: str, kind_name: str, namespace: str | None, name: str | None) -> ObjectRules:
        """Return the rules that apply to an object known by its apiVersion, kind, namespace and name.

        A whole object left out is still given its rules (`ObjectRules.left_out`): the watch tracks it for fights.
        """
        group = api_version.rpartition("/")[0]
        kind = kind_name.lower()
        known = self._kinds.get((group, kind))
        if known is not None and (self._kinds_final or known.left_out_by == CONFIG):
            return known
        if self._by_name:
            return self._match(group, kind, namespace, name)
        key = (group, kind, namespace)
        try:
            return self._cache[key]
        except KeyError:
            found = self._cache[key] = self._match(group, kind, namespace, None)
            return found

    def for_request(self, group: str, resource: str, namespace: str, name: str) -> ObjectRules | None:
        """Return `for_ref` for an object an API request addresses by resource.

        A rule's kind matches the resource it maps to (`resource_of`), or the resource itself (`kind: endpoints`).
        """
        key = (group, resource, namespace)
        if not self._by_name:
            try:
                return self._request_cache[key]
            except KeyError:
                pass
        applicable: list[IgnoreRule] = []
        whole = False
        for rule, ns_pattern, name_pattern in self._patterns:
            if rule.group is not None and rule.group != group:
                continue
            if rule.kind is not None and resource not in (rule.kind.lower(), resource_of(rule.kind)):
                continue
            if ns_pattern is not None and not ns_pattern.match(namespace):
                continue
            if name_pattern is not None and not name_pattern.match(name):
                continue
            if rule.whole_objects:
                whole = True
                break
            applicable.append(rule)
        found = None if whole else self._compile(tuple(applicable))
        if not self._by_name:
            self._request_cache[key] = found
        return found

    def _match(self, group: str, kind: str, namespace: str | None, name: str | None) -> ObjectRules:
        applicable = []
        whole: IgnoreRule | None = None
        for rule, ns_pattern, name_pattern in self._patterns:
            if rule.group is not None and rule.group != group:
                continue
            if rule.kind is not None and rule.kind.lower() != kind:
                continue
            if ns_pattern is not None and not ns_pattern.match(namespace or ""):
                continue
            if name_pattern is not None and (name is None or not name_pattern.match(name)):
                continue
            if rule.whole_objects:
                if whole is None or origin_of(rule) == CONFIG:
                    whole = rule
                continue
            applicable.append(rule)
        return self._left_out(whole) if whole is not None else self._compile(tuple(applicable))

    def _compile(self, rules: tuple[IgnoreRule, ...]) -> ObjectRules:
        found = self._compiled.get(rules)
        if found is None:
            prefixes = tuple(p for r in rules if r.manager is None for p in r.fields)
            defaults = tuple(p for r in rules if r.manager is None and origin_of(r) == DEFAULT for p in r.fields)
            scoped = tuple(r for r in rules if r.manager is not None)
            made = ObjectRules(prefixes, scoped, default_prefixes=defaults) if rules else NO_RULES
            found = self._compiled[rules] = made
        return found
