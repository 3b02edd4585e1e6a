"""One watch line at a time: what reaches the engine, what is skipped, what is a failure (shapes as kube-apiserver
v1.20.2 sends), read by the decoder of either attribution implementation."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.captures import IMPLEMENTATIONS
from tests.unit.kube_api import NoServer
from watcher.config import Config, parse_config
from watcher.detection.attribution import Decoder
from watcher.detection.events import EventError, ObjectEvent, event_object
from watcher.detection.native import implementation
from watcher.recording import LAST_APPLIED
from watcher.sources import watch as watch_module
from watcher.sources.discovery import ApiResource, Target
from watcher.sources.watch import Failure, NamespaceFilter, ResourceWatch, WatchError

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


class Watched:
    """A watch of one resource fed lines by hand, and what it handed on."""

    def __init__(self, resource: ApiResource, decode: Decoder, **watch: Any) -> None:
        self.delivered: list[ObjectEvent] = []
        self.invalid: list[tuple[ApiResource, EventError]] = []
        settings = parse_config({"watch": watch}, source="test").watch if watch else Config().watch
        self.rw = ResourceWatch(
            Target(resource, full_objects=False),
            api=NoServer(),  # lines only: nothing is requested
            on_event=lambda event, _: self.delivered.append(event),
            decode=decode,
            on_invalid=lambda resource, error: self.invalid.append((resource, error)),
            settings=settings,
            namespaces=NamespaceFilter(settings.namespaces, settings.exclude_namespaces),
        )


@pytest.fixture(params=IMPLEMENTATIONS)
def decode(request: pytest.FixtureRequest) -> Decoder:
    """The decoder of an attribution implementation (what `Engine.decode` is, and the watch is given)."""
    return implementation(request.param).decode


def _line(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc)


def test_a_metadata_event_reaches_the_engine_as_the_object_it_stands_for(decode: Decoder) -> None:
    watched = Watched(CONFIGMAPS, decode)
    watched.rw._on_line(_line(MODIFIED), 1_800_000_000.5)
    (event,) = watched.delivered
    assert event.type == "MODIFIED"
    assert event.observed_at == 1_800_000_000.5
    assert (event.kind, event.api_version) == ("ConfigMap", "v1")
    assert (event_object(event)["kind"], event_object(event)["apiVersion"]) == ("ConfigMap", "v1")
    assert (event.namespace, event.name, event.uid) == ("x", "a", "9b99b1c1-fcd9-40af-8e7e-ac2b049836b7")
    assert event_object(event)["metadata"]["labels"] == {"l": "2"}
    assert event.meta_value("metadata.labels.l") == "2"
    assert watched.rw._rv == "200"


def test_a_bookmark_moves_the_resource_version_only(decode: Decoder) -> None:
    watched = Watched(CONFIGMAPS, decode)
    watched.rw._on_line(_line(BOOKMARK), 0.0)
    assert watched.delivered == []
    assert watched.invalid == []
    assert watched.rw._rv == "250"


@pytest.mark.parametrize(
    ("doc", "failure"),
    [
        (EXPIRED, Failure.EXPIRED),
        ({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Gone"}}, Failure.EXPIRED),
        ({"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd"}}, Failure.SERVER_ERROR),
        ({"type": "ERROR", "object": {"kind": "Status"}}, Failure.SERVER_ERROR),
        ({"type": "ERROR", "object": "gone"}, Failure.CONNECTION),
    ],
)
def test_error_events_and_broken_lines_are_failures(doc: dict[str, Any], failure: Failure, decode: Decoder) -> None:
    watched = Watched(CONFIGMAPS, decode)
    with pytest.raises(WatchError) as caught:
        watched.rw._on_line(_line(doc), 0.0)
    assert caught.value.failure is failure
    assert watched.delivered == []


@pytest.mark.parametrize("line", [_line(MODIFIED)[:-40], b"[1, 2]", b"not json"])
def test_a_line_that_is_no_json_object_is_a_connection_failure(line: bytes, decode: Decoder) -> None:
    watched = Watched(CONFIGMAPS, decode)
    with pytest.raises(WatchError) as caught:
        watched.rw._on_line(line, 0.0)
    assert caught.value.failure is Failure.CONNECTION
    assert watched.delivered == []


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"type": "MODIFIED"}, "the event's object is not a JSON object"),
        (
            {"type": "MODIFIED", "object": {"kind": "PartialObjectMetadata", "metadata": {"name": "a"}}},
            "no metadata.uid",
        ),
        ({"type": "CHANGED", "object": MODIFIED["object"]}, "unknown watch event type 'CHANGED'"),
    ],
)
def test_an_invalid_event_is_reported_and_skipped(doc: dict[str, Any], problem: str, decode: Decoder) -> None:
    """A JSON object that is no event the engine can analyse: told to `on_invalid`, the watch goes on."""
    watched = Watched(CONFIGMAPS, decode)
    watched.rw._on_line(_line(doc), 0.0)
    assert watched.delivered == []
    ((resource, error),) = watched.invalid
    assert resource == CONFIGMAPS
    assert problem in str(error)
    watched.rw._on_line(_line(MODIFIED), 0.0)  # the next event goes through
    assert len(watched.delivered) == 1


def test_a_secrets_event_reaches_the_engine_as_it_is(decode: Decoder) -> None:
    """Redacting a Secret's last-applied-configuration is the recording's (see test_recording.py): the engine
    keeps value hashes only, never values."""
    watched = Watched(SECRETS, decode)
    doc = orjson.loads(_line(MODIFIED))
    doc["object"]["metadata"]["annotations"] = {LAST_APPLIED: '{"data":{"password":"aHVudGVyMg=="}}', "team": "a"}
    watched.rw._on_line(_line(doc), 0.0)
    (event,) = watched.delivered
    assert event.kind == "Secret"
    assert event_object(event)["kind"] == "Secret"
    assert event.meta_value(f"metadata.annotations[{LAST_APPLIED}]") == '{"data":{"password":"aHVudGVyMg=="}}'
    assert event.meta_value("metadata.annotations.team") == "a"


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
def test_namespace_filters(watch: dict[str, Any], passes: bool, decode: Decoder) -> None:
    watched = Watched(CONFIGMAPS, decode, **watch)
    watched.rw._on_line(_line(MODIFIED), 0.0)
    assert bool(watched.delivered) is passes
    assert watched.rw._rv == "200"  # filtered or not, the stream moved on


def test_what_a_watch_knows_becomes_deleted_events_when_it_is_dropped(decode: Decoder) -> None:
    watched = Watched(CONFIGMAPS, decode)
    watched.rw._on_line(_line(MODIFIED), 0.0)
    assert watched.rw.forget() == 1
    deleted = watched.delivered[-1]
    assert deleted.type == "DELETED"
    assert event_object(deleted)["metadata"] == {
        "name": "a",
        "namespace": "x",
        "uid": "9b99b1c1-fcd9-40af-8e7e-ac2b049836b7",
    }
    assert (deleted.kind, event_object(deleted)["kind"]) == ("ConfigMap", "ConfigMap")
    assert deleted.uid == watched.delivered[0].uid
    assert deleted.key == watched.delivered[0].key  # (the engine finds the object by its key)


# As kube-apiserver v1.37.2 streams a resource's current objects for `sendInitialEvents=true` (WatchList): each an
# ADDED event, then the bookmark that ends them.
INITIAL_ADDED = {
    "type": "ADDED",
    "object": {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {
            "name": "a",
            "namespace": "default",
            "uid": "91a275ac-0753-4571-8886-0dbf8dffc2f3",
            "resourceVersion": "211",
            "creationTimestamp": "2026-11-27T09:18:19Z",
            "labels": {"x": "1"},
            "managedFields": [
                {
                    "manager": "filler",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-27T09:18:19Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:x": {}}}},
                }
            ],
        },
    },
}
INITIAL_EVENTS_END = {
    "type": "BOOKMARK",
    "object": {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "215", "annotations": {"k8s.io/initial-events-end": "true"}},
    },
}


def test_the_heap_is_trimmed_once_the_initial_state_is_read(decode: Decoder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages a list freed go back to the system when it ends (`release_free_heap`), not on every event."""
    trims: list[float] = []
    monkeypatch.setattr(watch_module, "release_free_heap", lambda: trims.append(1.0))
    watched = Watched(CONFIGMAPS, decode)
    watched.rw._rv, watched.rw._initial = None, set()  # (as `_open` sets them for a stream of the initial state)
    watched.rw._on_line(_line(INITIAL_ADDED), 1.0)
    watched.rw._on_line(_line(BOOKMARK), 1.0)
    assert trims == []
    watched.rw._on_line(_line(INITIAL_EVENTS_END), 1.0)
    assert trims == [1.0]
    watched.rw._on_line(_line(MODIFIED), 2.0)
    assert trims == [1.0]


def test_the_initial_state_ends_at_its_bookmark_and_what_it_lacks_is_deleted(decode: Decoder) -> None:
    """The streamed objects move no version (they come in no order of it); the bookmark ending them does, and an
    object known before and not among them was deleted meanwhile."""
    watched = Watched(CONFIGMAPS, decode)
    watched.rw._on_line(_line(MODIFIED), 0.0)  # known from an earlier watch
    watched.rw._rv, watched.rw._initial = None, set()  # (as `_open` sets them for a stream of the initial state)
    watched.rw._on_line(_line(INITIAL_ADDED), 1.0)
    watched.rw._on_line(_line(BOOKMARK), 1.0)  # (an ordinary bookmark amid them moves nothing either)
    assert watched.rw._rv is None
    assert watched.rw.status.lists == 0
    watched.rw._on_line(_line(INITIAL_EVENTS_END), 1.0)
    assert watched.rw._rv == "215"
    assert watched.rw._initial is None
    assert (watched.rw.status.lists, watched.rw.status.synced, watched.rw.status.state) == (1, True, "watching")
    assert [(e.type, e.name) for e in watched.delivered] == [("MODIFIED", "a"), ("ADDED", "a"), ("DELETED", "a")]
    assert watched.delivered[-1].uid == "9b99b1c1-fcd9-40af-8e7e-ac2b049836b7"  # (the other `a`, in namespace x)
    assert watched.rw.status.objects == 1
    watched.rw._on_line(_line(BOOKMARK), 2.0)  # once watching, bookmarks move the version again
    assert watched.rw._rv == "250"
