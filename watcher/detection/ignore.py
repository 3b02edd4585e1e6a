"""Ignore rules, compiled: which objects are left out, and which fields and writers are not counted."""

from __future__ import annotations

import fnmatch
import re

from watcher.config import IgnoreRule
from watcher.model import JSONObject, Writer


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
        self._cache: dict[tuple[str, str, str | None], tuple[IgnoreRule, ...] | None] = {}

    def for_object(self, obj: JSONObject, meta: JSONObject) -> tuple[IgnoreRule, ...] | None:
        """The field/manager rules that apply to this object, or None when the whole object is ignored."""
        api_version: str = obj.get("apiVersion") or ""
        group = api_version.rpartition("/")[0]
        kind = (obj.get("kind") or "").lower()
        if (group, kind) in self._kinds:
            return None
        namespace = meta.get("namespace")
        if self._by_name:
            return self._match(group, kind, namespace, meta.get("name"))
        key = (group, kind, namespace)
        try:
            return self._cache[key]
        except KeyError:
            found = self._cache[key] = self._match(group, kind, namespace, None)
            return found

    def _match(self, group: str, kind: str, namespace: str | None, name: str | None) -> tuple[IgnoreRule, ...] | None:
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
        return tuple(applicable)


def field_ignored(rules: tuple[IgnoreRule, ...], path: str, by: Writer, before: Writer | None) -> bool:
    """Whether a change of `path` by `by` (taken from `before`) falls under a field or manager rule."""
    for rule in rules:
        if rule.fields and not any(path.startswith(prefix) for prefix in rule.fields):
            continue
        if rule.manager is None:
            return True
        for writer in (by, before):
            if writer is not None and writer.manager and fnmatch.fnmatchcase(writer.manager, rule.manager):
                return True
    return False


def manager_ignored(rules: tuple[IgnoreRule, ...], writer: Writer) -> bool:
    """Whether a rule with only a manager (no fields) drops this writer's writes."""
    return any(
        r.manager is not None
        and not r.fields
        and writer.manager is not None
        and fnmatch.fnmatchcase(writer.manager, r.manager)
        for r in rules
    )
