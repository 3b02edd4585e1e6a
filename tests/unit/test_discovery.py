"""Discovery on documents recorded from real kube-apiservers (the current release's, and v1.20.2's, kept as a
compatibility fixture; scripts/record_discovery.py): what can be watched, and what is."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from watcher.config import ConfigError, parse_config
from watcher.sources.discovery import (
    ApiResource,
    deduplicate,
    matches,
    parse_resource_list,
    preferred_group_versions,
    resolve,
    select,
)

DISCOVERY = Path(__file__).resolve().parents[1] / "fixtures" / "discovery"
RELEASES = ("v1.37.2", "v1.20.2")


@pytest.fixture(params=RELEASES)
def release(request: pytest.FixtureRequest) -> str:
    """The server whose recorded documents a test reads."""
    return str(request.param)


@cache
def _docs(release: str) -> dict[str, Any]:
    docs: dict[str, Any] = orjson.loads((DISCOVERY / f"{release}.json").read_bytes())
    return docs


def _served(release: str) -> list[ApiResource]:
    """What `discover` finds on the recorded server: the core group and each group's preferred version."""
    docs = _docs(release)
    versions = list(docs["/api"]["versions"]) + preferred_group_versions(docs["/apis"])
    found: list[ApiResource] = []
    for gv in versions:
        found += parse_resource_list(gv, docs[f"/apis/{gv}" if "/" in gv else f"/api/{gv}"])
    return deduplicate(found)


def _names(targets: list[Any]) -> set[str]:
    return {t.resource.name for t in targets}


def test_only_listable_and_watchable_top_level_resources_are_found(release: str) -> None:
    names = {r.name for r in _served(release)}
    assert {"configmaps", "secrets", "deployments.apps", "widgets.example.com", "namespaces"} <= names
    assert "bindings" not in names  # create only
    assert "componentstatuses" not in names  # get and list, no watch
    assert not any("/" in n for n in names)  # no subresources (pods/status, deployments/scale)
    assert "selfsubjectaccessreviews.authorization.k8s.io" not in names


def test_each_group_is_read_in_its_preferred_version(release: str) -> None:
    by_name = {r.name: r for r in _served(release)}
    assert by_name["deployments.apps"].api_version == "apps/v1"
    assert by_name["deployments.apps"].path == "/apis/apps/v1/deployments"
    assert by_name["configmaps"].path == "/api/v1/configmaps"
    # (autoscaling/v2 is preferred from 1.23 on)
    assert by_name["horizontalpodautoscalers.autoscaling"].version == ("v1" if release == "v1.20.2" else "v2")
    assert by_name["configmaps"].kind == "ConfigMap"
    assert by_name["namespaces"].namespaced is False


def test_a_resource_served_by_two_groups_from_one_storage_is_watched_once(release: str) -> None:
    names = [r.name for r in _served(release)]
    assert names.count("ingresses.networking.k8s.io") == 1
    assert "ingresses.extensions" not in names  # the legacy group loses (v1.20; 1.22 serves it no more)
    events = [n for n in names if n.startswith("events")]
    assert len(events) == 1


def test_by_default_everything_but_the_churny_kinds_is_watched_metadata_only(release: str) -> None:
    targets = select(_served(release), parse_config({}, source="test").watch)
    names = _names(targets)
    assert {"configmaps", "secrets", "deployments.apps", "widgets.example.com"} <= names
    assert not names & {"events", "leases.coordination.k8s.io", "endpoints", "pods"}
    assert not any(n.startswith(("events", "endpointslices")) for n in names)
    assert not any(t.full_objects for t in targets)


@pytest.mark.parametrize(
    ("watch", "expected"),
    [
        ({"resources": ["configmaps", "deployments.apps"]}, {"configmaps", "deployments.apps"}),
        ({"resources": ["*.example.com"]}, {"widgets.example.com"}),
        ({"resources": ["pods", "configmaps"]}, {"configmaps"}),  # still denied: pods are opt-in
        ({"resources": ["pods"], "exclude_resources": []}, {"pods"}),
        ({"resources": ["deployments"]}, {"deployments.apps"}),  # a bare plural matches in every group
        ({"resources": ["deployments.extensions"]}, set()),
    ],
)
def test_allowlist_and_denylist(watch: dict[str, Any], expected: set[str], release: str) -> None:
    assert _names(select(_served(release), parse_config({"watch": watch}, source="test").watch)) == expected


def test_full_objects_per_resource_but_never_for_secrets(release: str) -> None:
    settings = parse_config(
        {"watch": {"per_resource": {"*": {"full_objects": True}, "configmaps": {"full_objects": False}}}}, source="t"
    ).watch
    full = {t.resource.name: t.full_objects for t in select(_served(release), settings)}
    assert full["deployments.apps"] is True
    assert full["configmaps"] is False  # later keys win
    assert full["secrets"] is False  # whatever the config says


@pytest.mark.parametrize(
    ("selector", "name", "expected"),
    [
        ("configmaps", "configmaps", True),
        ("deployments", "deployments.apps", True),
        ("deployments.apps", "deployments.apps", True),
        ("deployments.apps", "deployments.extensions", False),
        ("*.example.com", "widgets.example.com", True),
        ("config*", "configmaps", True),
    ],
)
def test_selectors_name_resources_like_kubectl(selector: str, name: str, expected: bool) -> None:
    plural, _, group = name.partition(".")
    resource = ApiResource(group=group, version="v1", plural=plural, kind="X", namespaced=True)
    assert matches(resource, selector) is expected


def test_plain_namespace_names_are_watched_one_namespace_at_a_time(release: str) -> None:
    settings = parse_config(
        {"watch": {"resources": ["configmaps", "widgets.example.com", "namespaces"], "namespaces": ["b", "a", "a"]}},
        source="t",
    ).watch
    targets = {t.name: t for t in select(_served(release), settings)}
    assert set(targets) == {
        "configmaps@a",
        "configmaps@b",
        "widgets.example.com@a",
        "widgets.example.com@b",
        "namespaces",
    }
    assert targets["configmaps@a"].path == "/api/v1/namespaces/a/configmaps"
    assert targets["widgets.example.com@b"].path == "/apis/example.com/v1/namespaces/b/widgets"
    assert targets["namespaces"].path == "/api/v1/namespaces"  # cluster-scoped: cluster-wide


def test_namespace_patterns_are_watched_cluster_wide_and_filtered(release: str) -> None:
    settings = parse_config({"watch": {"resources": ["configmaps"], "namespaces": ["team-*", "b"]}}, source="t").watch
    (target,) = select(_served(release), settings)
    assert (target.name, target.path) == ("configmaps", "/api/v1/configmaps")


def _sharding(**sharding: object) -> Any:
    return parse_config({"sharding": sharding}, source="test").sharding


@pytest.mark.parametrize("shards", [2, 3, 5])
def test_shards_partition_the_watched_resources(shards: int, release: str) -> None:
    """Every resource that would be watched is watched by exactly one shard: together they watch everything."""
    settings = parse_config({}, source="test").watch
    everything = _names(select(_served(release), settings))
    per_shard = [
        _names(select(_served(release), settings, _sharding(shard=i, total_shards=shards))) for i in range(shards)
    ]
    assert set().union(*per_shard) == everything
    assert sum(len(s) for s in per_shard) == len(everything)
    assert all(per_shard)  # (with ~40 resources, a hash leaves no shard empty)


def test_the_partition_is_stable_and_assign_pins_resources(release: str) -> None:
    settings = parse_config({}, source="test").watch
    first = _names(select(_served(release), settings, _sharding(shard=1, total_shards=2)))
    assert _names(select(_served(release), settings, _sharding(shard=1, total_shards=2))) == first
    pinned = _sharding(shard=0, total_shards=2, assign={"configmaps": 0, "deployments.apps": 0, "*.example.com": 1})
    zero = _names(select(_served(release), settings, pinned))
    assert {"configmaps", "deployments.apps"} <= zero
    assert "widgets.example.com" not in zero


def test_a_shard_outside_the_shards_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not below total_shards"):
        _sharding(shard=2, total_shards=2)
    with pytest.raises(ConfigError, match=r"assign\.configmaps"):
        _sharding(total_shards=2, assign={"configmaps": 3})


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cm", {"configmaps"}),
        ("configmap", {"configmaps"}),
        ("ConfigMap", {"configmaps"}),
        ("deploy", {"deployments.apps"}),
        ("deployments.apps", {"deployments.apps"}),
        ("deployments.v1.apps", {"deployments.apps"}),
        ("hpa", {"horizontalpodautoscalers.autoscaling"}),
        ("events", {"events"}),  # (events.k8s.io's, the same storage, is watched as the core group's)
        ("ev", {"events"}),
        ("widget", {"widgets.example.com"}),
        ("nosuchkind", set()),
        ("deploy.example.com", set()),
    ],
)
def test_resource_types_resolve_as_kubectl_names_them(name: str, expected: set[str]) -> None:
    """`--resources` of `fightwatch scan`: plurals, singulars, short names and kinds, with or without the group."""
    assert {r.name for r in resolve(name, _served("v1.37.2"))} == expected


def test_a_name_served_by_several_groups_means_the_core_groups() -> None:
    served = [
        ApiResource("", "v1", "widgets", "Widget", namespaced=True),
        ApiResource("example.com", "v1", "widgets", "Widget", namespaced=True),
        ApiResource("other.io", "v1", "widgets", "Widget", namespaced=True),
    ]
    assert [r.name for r in resolve("widgets", served)] == ["widgets"]
    assert [r.name for r in resolve("widgets", served[1:])] == ["widgets.example.com", "widgets.other.io"]
    assert [r.name for r in resolve("widget.other", served)] == ["widgets.other.io"]
