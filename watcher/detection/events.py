"""The one event the engine takes: a watch event normalised by a decoder, whichever source it came from.

Every source (a capture file, the live list-and-watch) hands an event's JSON text to the decoder of the engine's
attribution implementation, which checks it once and returns an `ObjectEvent`: the event type, the object's
identity, its resourceVersion and time, and what attribution reads, in the form that implementation reads it.
The reference decoder here keeps the decoded object; the native one (`watcher._native`) keeps the event's text
and ranges of it. Both check the same things and word the same errors.

A decoded event's time is its receive time (`observedAt`) when the source knows it, else the newest
managedFields time of the object: the time of the write, as far as the object tells.
"""

from __future__ import annotations

import sys
from typing import Any, Final, Protocol, cast

import orjson

from watcher.detection import hashing
from watcher.detection.managed_fields import RawEntries, newest_time, raw_entries
from watcher.model import EventType, JSONObject, ObjectRef, format_observed, parse_time

_EVENT_TYPES: Final = {t.value: t for t in EventType}
_SKIPPED_TYPES: Final = frozenset({"BOOKMARK", "ERROR"})


class DecodeError(ValueError):
    """Text that is not a JSON object at all (a broken line, not merely an invalid event)."""


class EventError(ValueError):
    """A JSON document that is not a watch event the engine can analyse; the message says what is wrong."""


class ObjectEvent(Protocol):
    """A watch event as the engine takes it (see the module docstring). `type` is ADDED, MODIFIED or DELETED."""

    @property
    def type(self) -> str: ...
    @property
    def key(self) -> int: ...  # the object's key: a stable 64-bit hash of its uid
    @property
    def api_version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def rv(self) -> int: ...  # the resourceVersion as the engine compares it (`version_key`); 0 for none
    @property
    def observed_at(self) -> float | None: ...  # the receive time, when the source knows it
    @property
    def written_at(self) -> float | None: ...  # the newest managedFields time
    @property
    def time(self) -> float | None: ...  # `observed_at`, else `written_at`
    @property
    def has_managed_fields(self) -> bool: ...
    @property
    def data(self) -> bytes: ...  # the event's JSON text (what the source read)

    def meta_value(self, path: str) -> str | None:
        """Return the text of a label or annotation named by its path (`metadata.labels.app`).

        None for other paths.
        """
        ...


def version_key(resource_version: str) -> int:
    """Return a resourceVersion as the state keeps it.

    Only ever compared, to drop repeated versions, so 62 bits of a stable hash (compiled, the state holds it unboxed; 0
    for no version). etcd's versions are decimal numbers, kept as they are.
    """
    if not resource_version:
        return 0
    if resource_version.isascii() and resource_version.isdigit() and len(resource_version) < 19:
        return int(resource_version)
    return hashing.text_key(resource_version) >> 2


def object_key(uid: str) -> int:
    """Return the key an object is tracked by: a stable 64-bit hash of its uid.

    Not the uid: 36 characters.
    """
    return hashing.text_key(uid)


class Event:
    """An `ObjectEvent` as the reference decoder makes it.

    The decoded object, its managedFields grouped by writer (not yet decoded: see `managed_fields.raw_entries`) and
    their newest time.
    """

    __slots__ = (
        "api_version",
        "data",
        "has_managed_fields",
        "key",
        "kind",
        "name",
        "namespace",
        "newest",
        "object",
        "observed_at",
        "raw",
        "resource_version",
        "rv",
        "time",
        "type",
        "uid",
        "written_at",
    )

    def __init__(self, event_type: EventType, obj: JSONObject, observed_at: float | None, data: bytes) -> None:
        meta: JSONObject = obj["metadata"]
        self.type = event_type
        self.object = obj
        self.data = data
        self.observed_at = observed_at
        self.api_version: str = obj["apiVersion"]
        self.kind: str = obj["kind"]
        namespace = meta.get("namespace")
        self.namespace: str | None = namespace if namespace else None
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.key = object_key(self.uid)
        self.resource_version: str = meta.get("resourceVersion") or ""
        self.rv = version_key(self.resource_version)
        managed = meta.get("managedFields") or ()
        self.has_managed_fields = bool(managed)
        self.raw: RawEntries = raw_entries(managed)
        self.newest = newest = newest_time(self.raw)
        self.written_at = parse_time(newest) if newest else None
        self.time = observed_at if observed_at is not None else self.written_at

    def meta_value(self, path: str) -> str | None:
        return meta_value(self.object, path)


_LABELS: Final = "metadata.labels"
_ANNOTATIONS: Final = "metadata.annotations"


def meta_value(obj: JSONObject, path: str) -> str | None:
    """Return the text of the label or annotation at `path` in a decoded object.

    See `ObjectEvent.meta_value`.
    """
    meta = obj.get("metadata") or {}
    for section, prefix in (("annotations", _ANNOTATIONS), ("labels", _LABELS)):
        if path.startswith(prefix) and len(path) > len(prefix) and path[len(prefix)] in ".[":
            key = path[len(prefix) :]
            key = key[1:-1] if key.startswith("[") else key[1:]
            found = (meta.get(section) or {}).get(key)
            return found if isinstance(found, str) else None
    return None


def decode(
    data: bytes, *, observed_at: float | None = None, api_version: str | None = None, kind: str | None = None
) -> Event | None:
    """Decode one watch event's JSON text: an `Event`, or None for events that carry no object (BOOKMARK, ERROR).

    `observed_at` stands in for a missing `observedAt`; `api_version` and `kind` replace the object's own (a
    metadata-only watch sends PartialObjectMetadata). Raises `DecodeError` for text that is not a JSON object and
    `EventError` for a document that is not an event the engine can analyse.
    """
    return _document_event(_loads(data), data, observed_at=observed_at, api_version=api_version, kind=kind)


def _loads(data: bytes) -> Any:
    """Return the JSON document of an event's text."""
    if data[:1] != b"{":
        raise DecodeError(f"expected a JSON object, found {data.strip()[:40]!r}")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None


def _document_event(
    doc: Any, data: bytes, *, observed_at: float | None, api_version: str | None, kind: str | None
) -> Event | None:
    """`decode` of the document decoded from `data`."""
    found = _event_of(doc)
    if found is None:
        return None
    event_type, obj = found
    if type(obj) is dict:
        if api_version is not None:
            obj["apiVersion"] = api_version
        if kind is not None:
            obj["kind"] = kind
    _check_object(obj)
    observed = doc.get("observedAt")
    if observed is not None:
        observed_at = _observed(observed)
    try:
        return Event(event_type, cast(JSONObject, obj), observed_at, data)
    except ValueError as exc:  # managedFields that are not what the API server writes
        raise EventError(str(exc)) from None


def _event_of(doc: Any) -> tuple[EventType, Any] | None:
    """Return the type and object of a watch event document (None: BOOKMARK, ERROR)."""
    if not isinstance(doc, dict):
        raise EventError(f"expected a JSON object, got {type(doc).__name__}")
    if "object" in doc or "type" in doc:
        kind_of_event = doc.get("type")
        if kind_of_event in _SKIPPED_TYPES:
            return None
        if kind_of_event not in _EVENT_TYPES:
            raise EventError(
                f"unknown watch event type {kind_of_event!r} (expected ADDED, MODIFIED, DELETED, BOOKMARK)"
            )
        return _EVENT_TYPES[kind_of_event], doc.get("object")
    if "metadata" in doc and "kind" in doc:
        if str(doc.get("kind", "")).endswith("List"):
            raise EventError(
                "this is a List, not a watch stream: capture with "
                "`kubectl get KIND -A --watch --output-watch-events -o json --show-managed-fields`"
            )
        return EventType.MODIFIED, doc  # `kubectl get -w -o json` without --output-watch-events
    raise EventError('not a watch event: expected {"type": ..., "object": {...}}')


def _observed(observed: Any) -> float:
    if not isinstance(observed, str):
        raise EventError(f"observedAt must be an RFC 3339 string, got {observed!r}")
    try:
        return parse_time(observed)
    except ValueError:
        raise EventError(f"observedAt {observed!r} is not an RFC 3339 time") from None


def _check_object(obj: Any) -> None:
    # (`type(x) is`, not isinstance: decoded JSON has no subclasses, and this runs for every event)
    if type(obj) is not dict:
        raise EventError("the event's object is not a JSON object")
    meta = obj.get("metadata")
    if type(meta) is not dict:
        raise EventError("the object has no metadata")
    uid, name = meta.get("uid"), meta.get("name")
    if type(uid) is not str or not uid:
        raise EventError("the object has no metadata.uid")
    if type(name) is not str or not name:
        raise EventError("the object has no metadata.name")
    if type(obj.get("kind")) is not str or type(obj.get("apiVersion")) is not str:
        raise EventError(f"object {name!r} has no kind or apiVersion")
    managed = meta.get("managedFields")
    if managed is not None and type(managed) is not list:
        raise EventError(f"metadata.managedFields of {name!r} is not a list")
    for field in ("resourceVersion", "namespace"):
        value = meta.get(field)
        if value is not None and type(value) is not str:
            raise EventError(f"metadata.{field} of {name!r} is not a string")


def encode(event_type: str, obj: JSONObject, observed_at: float | None = None) -> bytes:
    """Encode a watch event as JSON text (with `observedAt` when given).

    The text is what `decode` reads and recordings hold.
    """
    doc: JSONObject = {"type": event_type, "object": obj}
    if observed_at is not None:
        doc["observedAt"] = format_observed(observed_at)
    return orjson.dumps(doc)


def event_object(event: ObjectEvent) -> JSONObject:
    """Return the object an event carries, as a dict.

    Decoded from its text unless the decoder kept it, with the apiVersion and kind the decoder gave it.
    """
    if isinstance(event, Event):
        return event.object
    doc = orjson.loads(event.data)
    found = doc.get("object") if "object" in doc else doc
    obj: JSONObject = found if isinstance(found, dict) else {}
    obj["apiVersion"] = event.api_version
    obj["kind"] = event.kind
    return obj


def controller(event: ObjectEvent) -> JSONObject | None:
    """Return the object's controller, or None.

    Its `ownerReferences` entry with `controller: true` (apiVersion, kind, name, uid), or None (decoded only when the
    event's text names owners at all).
    """
    if b'"ownerReferences"' not in event.data:
        return None
    try:
        owners = (event_object(event).get("metadata") or {}).get("ownerReferences") or []
    except orjson.JSONDecodeError:
        return None
    if not isinstance(owners, list):
        return None
    for owner in owners:
        if isinstance(owner, dict) and owner.get("controller") is True:
            return owner
    return None


Name = tuple[str, str, str, str]  # an object by name: API group, kind, namespace ("" cluster-scoped), name


def name_of(ref: ObjectRef) -> Name:
    """Return an object's `Name` (the key the references to it name it by: `references`)."""
    return (ref.group, ref.kind, ref.namespace or "", ref.name)


def references(event: ObjectEvent) -> list[Name]:
    """Return the objects an object names in its spec.

    As a HorizontalPodAutoscaler names what it scales: each member of `spec` called `*Ref` (`scaleTargetRef`,
    `targetRef`) that holds a `kind` and a `name` (its group from `apiVersion` or `apiGroup`; in the object's namespace
    unless it says another). Only full objects carry a spec; decoded only when the event's text has such a member.
    """
    if b'Ref"' not in event.data:
        return []
    try:
        spec = event_object(event).get("spec")
    except orjson.JSONDecodeError:
        return []
    if not isinstance(spec, dict):
        return []
    found: list[Name] = []
    for member, value in spec.items():
        if not member.endswith("Ref") or not isinstance(value, dict):
            continue
        kind, name = value.get("kind"), value.get("name")
        if not isinstance(kind, str) or not isinstance(name, str) or not kind or not name:
            continue
        group = value.get("apiGroup")
        if not isinstance(group, str):
            api_version = value.get("apiVersion")
            group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        namespace = value.get("namespace")
        found.append((group, kind, namespace if isinstance(namespace, str) else event.namespace or "", name))
    return found


def object_ref(event: ObjectEvent) -> ObjectRef:
    """Return the reference to the object of an event.

    Type and namespace strings are interned: findings keep them.
    """
    namespace = event.namespace
    return ObjectRef(
        api_version=sys.intern(event.api_version),
        kind=sys.intern(event.kind),
        namespace=sys.intern(namespace) if namespace else None,
        name=event.name,
        uid=event.uid,
    )


__all__ = [
    "DecodeError",
    "Event",
    "EventError",
    "ObjectEvent",
    "decode",
    "encode",
    "event_object",
    "meta_value",
    "name_of",
    "object_key",
    "object_ref",
    "references",
    "version_key",
]
