"""Ignore rules, compiled: which objects are left out, and which fields and writers are not counted."""

from __future__ import annotations

import fnmatch
import re
from typing import Final

from watcher.config import IgnoreRule
from watcher.model import JSONObject, Writer


class ObjectRules:
    """The field and manager rules that apply to one object, compiled for the per-write checks.

    A class, not a NamedTuple: compiled, its checks are called directly, several times a write.
    """

    __slots__ = ("empty", "prefixes", "scoped")

    def __init__(self, prefixes: tuple[str, ...], scoped: tuple[IgnoreRule, ...]) -> None:
        self.prefixes = prefixes  # field prefixes ignored whoever writes them
        self.scoped = scoped  # rules that name a manager
        self.empty = not prefixes and not scoped  # nothing is ignored (no rule applies: the checks can be skipped)

    def field_ignored(self, path: str, by: Writer, before: Writer | None) -> bool:
        """Whether a change of `path` by `by` (taken from `before`) falls under a field or manager rule."""
        if self.prefixes and path.startswith(self.prefixes):
            return True
        for rule in self.scoped:
            if rule.fields and not path.startswith(rule.fields):
                continue
            for writer in (by, before):
                if writer is not None and writer.manager and fnmatch.fnmatchcase(writer.manager, rule.manager or ""):
                    return True
        return False

    def manager_ignored(self, writer: Writer) -> bool:
        """Whether a rule with only a manager (no fields) drops this writer's writes."""
        return writer.manager is not None and any(
            not r.fields and fnmatch.fnmatchcase(writer.manager, r.manager or "") for r in self.scoped
        )


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
        self._kinds = {
            (r.group, (r.kind or "").lower())
            for r in rules
            if r.whole_objects and r.kind and r.group is not None and r.namespace is None and r.name is None
        }
        self._patterns = [
            (
                r,
                re.compile(fnmatch.translate(r.namespace)) if r.namespace else None,
                re.compile(fnmatch.translate(r.name)) if r.name else None,
            )
            for r in rules
        ]
        self._by_name = any(r.name is not None for r in rules)
        self._cache: dict[tuple[str, str, str | None], ObjectRules | None] = {}
        self._compiled: dict[tuple[IgnoreRule, ...], ObjectRules] = {}

    def for_object(self, obj: JSONObject, meta: JSONObject) -> ObjectRules | None:
        """Return the field/manager rules that apply to this object.

        None when the whole object is ignored.
        """
        return self.for_ref(obj.get("apiVersion") or "", obj.get("kind") or "", meta.get("namespace"), meta.get("name"))

    def for_ref(self, api_version: str, kind_name: str, namespace: str | None, name: str | None) -> ObjectRules | None:
        """`for_object` for an object known by its apiVersion, kind, namespace and name."""
        group = api_version.rpartition("/")[0]
        kind = kind_name.lower()
        if (group, kind) in self._kinds:
            return None
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
        key = (group, "/" + resource, namespace)  # ("/": no kind begins with one)
        if not self._by_name:
            try:
                return self._cache[key]
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
            self._cache[key] = found
        return found

    def _match(self, group: str, kind: str, namespace: str | None, name: str | None) -> ObjectRules | None:
        applicable = []
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
                return None
            applicable.append(rule)
        return self._compile(tuple(applicable))

    def _compile(self, rules: tuple[IgnoreRule, ...]) -> ObjectRules:
        found = self._compiled.get(rules)
        if found is None:
            prefixes = tuple(p for r in rules if r.manager is None for p in r.fields)
            scoped = tuple(r for r in rules if r.manager is not None)
            found = self._compiled[rules] = ObjectRules(prefixes, scoped) if rules else NO_RULES
        return found
