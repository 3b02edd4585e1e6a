"""One watch line at a time: what reaches the engine, what is a failure (shapes as kube-apiserver v1.20.2 sends)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from watcher.config import Config, parse_config
from watcher.model import EventType, WatchEvent
from watcher.sources.discovery import ApiResource, Target
from watcher.sources.watch import LAST_APPLIED, Failure, NamespaceFilter, ResourceWatch, WatchError

CONFIGMAPS = ApiResource(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)
SECRETS = ApiResource(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)

# As the v1.20.2 test server sends them for `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`.
MODIFIED = {
    "type": "MODIFIED",
    "object": {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {
            "name": "a",
            "namespace": "x",
            "uid": "9b99b1c1-fcd9-40af-8e7e-ac2b049836b7",
            "resourceVersion": "200",
            "creationTimestamp": "2026-11-21T16:13:29Z",
            "labels": {"l": "2"},
            "managedFields": [
                {
                    "manager": "m2",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-21T16:13:30Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:l": {}}}},
                }
            ],
        },
    },
}
BOOKMARK = {
    "type": "BOOKMARK",
    "object": {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "250", "creationTimestamp": None},
    },
}
EXPIRED = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 1 (200)",
        "reason": "Expired",
        "code": 410,
    },
}


def _watch(resource: ApiResource = CONFIGMAPS, **watch: Any) -> tuple[ResourceWatch, list[WatchEvent]]:
    delivered: list[WatchEvent] = []
    settings = parse_config({"watch": watch}, source="test").watch if watch else Config().watch
    rw = ResourceWatch(
        Target(resource, full_objects=False),
        api=None,  # type: ignore[arg-type]  # lines only: nothing is requested
        deliver=lambda event, _: delivered.append(event),
        settings=settings,
        namespaces=NamespaceFilter(settings.namespaces, settings.exclude_namespaces),
    )
    return rw, delivered


def _line(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc)


def test_a_metadata_event_reaches_the_engine_as_the_object_it_stands_for() -> None:
    rw, delivered = _watch()
    rw._on_line(_line(MODIFIED), 1_800_000_000.5)
    (event,) = delivered
    assert event.type is EventType.MODIFIED
    assert event.observed_at == 1_800_000_000.5
    assert (event.object["kind"], event.object["apiVersion"]) == ("ConfigMap", "v1")
    assert event.object["metadata"]["labels"] == {"l": "2"}
    assert rw._rv == "200"


def test_a_bookmark_moves_the_resource_version_only() -> None:
    rw, delivered = _watch()
    rw._on_line(_line(BOOKMARK), 0.0)
    assert delivered == []
    assert rw._rv == "250"


@pytest.mark.parametrize(
    ("doc", "failure"),
    [
        (EXPIRED, Failure.EXPIRED),
        ({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Gone"}}, Failure.EXPIRED),
        ({"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd"}}, Failure.SERVER_ERROR),
        ({"type": "ERROR", "object": {"kind": "Status"}}, Failure.SERVER_ERROR),
        ({"type": "MODIFIED"}, Failure.CONNECTION),
        ({"type": "ERROR", "object": "gone"}, Failure.CONNECTION),
    ],
)
def test_error_events_and_broken_lines_are_failures(doc: dict[str, Any], failure: Failure) -> None:
    rw, delivered = _watch()
    with pytest.raises(WatchError) as caught:
        rw._on_line(_line(doc), 0.0)
    assert caught.value.failure is failure
    assert delivered == []


def test_a_truncated_line_is_a_connection_failure() -> None:
    rw, _ = _watch()
    with pytest.raises(WatchError) as caught:
        rw._on_line(_line(MODIFIED)[:-40], 0.0)
    assert caught.value.failure is Failure.CONNECTION


def test_a_secrets_last_applied_configuration_is_replaced_by_its_digest() -> None:
    rw, delivered = _watch(SECRETS)
    doc = orjson.loads(_line(MODIFIED))
    doc["object"]["metadata"]["annotations"] = {LAST_APPLIED: '{"data":{"password":"aHVudGVyMg=="}}', "team": "a"}
    rw._on_line(_line(doc), 0.0)
    (event,) = delivered
    annotations = event.object["metadata"]["annotations"]
    assert annotations[LAST_APPLIED].startswith("sha256:")
    assert "aHVudGVyMg" not in orjson.dumps(event.object).decode()
    assert annotations["team"] == "a"
    assert event.object["kind"] == "Secret"


@pytest.mark.parametrize(
    ("watch", "passes"),
    [
        ({}, True),
        ({"namespaces": ["x"]}, True),
        ({"namespaces": ["team-*"]}, False),
        ({"exclude_namespaces": ["x"]}, False),
        ({"namespaces": ["*"], "exclude_namespaces": ["kube-*"]}, True),
    ],
)
def test_namespace_filters(watch: dict[str, Any], passes: bool) -> None:
    rw, delivered = _watch(**watch)
    rw._on_line(_line(MODIFIED), 0.0)
    assert bool(delivered) is passes
    assert rw._rv == "200"  # filtered or not, the stream moved on


def test_what_a_watch_knows_becomes_deleted_events_when_it_is_dropped() -> None:
    rw, delivered = _watch()
    rw._on_line(_line(MODIFIED), 0.0)
    assert rw.forget() == 1
    deleted = delivered[-1]
    assert deleted.type is EventType.DELETED
    assert deleted.object["metadata"] == {"name": "a", "namespace": "x", "uid": "9b99b1c1-fcd9-40af-8e7e-ac2b049836b7"}
    assert deleted.object["kind"] == "ConfigMap"
