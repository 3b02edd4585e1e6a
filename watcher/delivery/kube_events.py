"""Kubernetes Events on the object of a finding, so `kubectl describe` tells the story where people look.

One Warning Event per finding (reason ControllerFight or ControllerHotLoop), created when it opens and updated
as a series when it changes (never one per write), and one Normal Event when it resolves. An events.k8s.io/v1
Event's note cannot change through that API once written (current API servers reject the update), but the core v1
API, which serves the same objects, takes a new `message`: a series update goes through it, so the Event on the
object always says what the finding says now (its incident once it spans several objects). Event names are
derived from the finding id, so a retry or a new leader (finding ids are the same on every replica that saw the write
that opened the finding) updates the same Event instead of adding one. A replica that started after that write (a
rolling upgrade, every replica restarted) opens the same fight under another id: before it creates an Event, it
looks for a Warning Event of fightwatch's about the same object and finding type that no Resolved Event has closed,
and goes on with that one (its series, and its Resolved Event when the finding ends).
`events.k8s.io/v1` is used where the server serves it, else core `v1` Events. These Events are the only
objects fightwatch ever writes. Requests go through kubernetes-asyncio's ApiClient as raw JSON.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from watcher.config import EventsSettings
from watcher.delivery.dispatch import Change, DeliveryError
from watcher.model import ChangeKind, Finding, FindingChange, FindingType, Incident, JSONObject
from watcher.rendering.output import finding_page

if TYPE_CHECKING:  # the ApiClient comes from the service (kubernetes-asyncio loads lazily)
    from kubernetes_asyncio.client import ApiClient

REPORTING_CONTROLLER = "fightwatch"
EVENTS_V1 = "events.k8s.io/v1"
CORE_V1 = "v1"
NOTE_LIMIT = 1024  # events.k8s.io/v1 rejects longer notes
REASONS = {
    FindingType.FIGHT: "ControllerFight",
    FindingType.HOT_LOOP: "ControllerHotLoop",
    FindingType.CONFLICT_STORM: "ConflictStorm",
    FindingType.APPLY_CONFLICT: "ApplyConflict",
    FindingType.NOOP_WRITES: "NoopWrites",
}
_RATE_UNITS = {
    FindingType.CONFLICT_STORM: "conflicts",
    FindingType.APPLY_CONFLICT: "rejected applies",
    FindingType.NOOP_WRITES: "no-op writes",
}
_NOT_DNS = re.compile(r"[^a-z0-9.-]+")


def reporting_instance(settings: EventsSettings) -> str:
    """`reportingInstance`: the setting, else $POD_NAME (the downward API), else the host name."""
    return (settings.reporting_instance or os.environ.get("POD_NAME") or socket.gethostname())[:128]


def event_name(finding: Finding, *, resolved: bool = False, told_as: str | None = None) -> str:
    """`<object>.<finding id>`, a valid object name however the object is named, the same on every retry.

    `told_as`: the id of the finding whose open Event this one goes on with (an earlier replica's id for it)."""
    base = _NOT_DNS.sub("-", finding.object.name.lower()).strip(".-")[:200] or "object"
    return f"{base}.{told_as or finding.id}{'-resolved' if resolved else ''}"


def event_namespace(finding: Finding, api: str) -> str:
    """Return the namespace of the Event about the finding's object.

    The namespace of the object; for a cluster-scoped object `kube-system` with events.k8s.io/v1 (servers
    before 1.22 accept no other namespace for such an Event with an eventTime), `default` with core v1 Events
    (which accept no other).
    """
    if finding.object.namespace:
        return finding.object.namespace
    return "kube-system" if api == EVENTS_V1 else "default"


def note(finding: Finding, page: str | None = None, incident: Incident | None = None) -> str:
    """Write the message, within the 1 KiB limit.

    What happens (writers, fields, rate), the incident it is part of (when that spans other objects too), where its
    timeline is (`page`, the watcher's page for the finding, where its address is configured) and how to stop it.
    """
    writers = ", ".join(f"{c.writer.display()} x{c.writes}" for c in finding.writers)
    rate = f"{finding.writes_per_minute:g} {_RATE_UNITS.get(finding.type, 'writes')}/min"
    if finding.conflicts:
        rate += f", {finding.conflicts} conflicts"
    if finding.type is FindingType.FIGHT:
        rate += f", {finding.handovers} handovers"
    text = f"{finding.summary}. "
    if incident is not None:
        text += f"Incident {incident.id} on {incident.objects} objects: {incident.summary}. "
    text += f"Writers: {writers}. Fields: {', '.join(finding.fields) or '-'}. Rate: {rate}. "
    if finding.clients:  # (from audit events: who stands behind the managers)
        told = [f"{c.display()}: {c.conflicts} conflicts, {c.writes} writes" for c in finding.clients[:3]]
        text += f"Clients: {', '.join(told)}. "
    if page is not None:
        text += f"Timeline: {page} "
    text += f"Hint: {finding.hint}"
    if finding.resolved_at is not None:
        text = f"Resolved, quiet since {_time(finding.last_seen)}: {text}"
    encoded = text.encode()
    if len(encoded) <= NOTE_LIMIT:
        return text
    return encoded[: NOTE_LIMIT - 3].decode(errors="ignore") + "…"


class KubeEventsSink:
    """Write findings as Events through an ApiClient (the service's, with its credentials and CA)."""

    name = "events"
    batch_size = 1
    resend_interval = None
    per_incident = False  # one Event per object, whatever delivery.per says (where `kubectl describe` looks)
    every_finding = True  # (a cascade's Event too: its message names the finding it follows from)

    def __init__(
        self,
        api_client: ApiClient,
        settings: EventsSettings | None = None,
        *,
        page: str | None = None,
        incident_of: Callable[[Finding], Incident | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Make the Events sink.

        `page`: the watcher's address as users reach it (`serve.external_url`): messages link there.
        `incident_of`: the incident of a finding when it has other findings too (messages name it).
        """
        self.settings = settings or EventsSettings()
        self._page = page
        self._incident_of = incident_of
        self._api_client = api_client
        self._clock = clock
        self._instance = reporting_instance(self.settings)
        self._api: str | None = None if self.settings.api == "auto" else self.settings.api
        self._counts: dict[str, int] = {}  # finding id -> occurrences in its Event's series
        self._told_as: dict[str, str] = {}  # finding id -> the id its open Event was created under, where they differ

    def _note(self, finding: Finding) -> str:
        incident = self._incident_of(finding) if self._incident_of is not None else None
        return note(finding, finding_page(self._page, finding), incident)

    def wants(self, change: Change) -> bool:
        """Take every change of a finding on an object known by kind.

        An Event must name its object's kind: a finding over requests knows it once the watch has seen the object.
        """
        return isinstance(change, FindingChange) and bool(change.finding.object.kind)

    def restart(self) -> None:
        """Forget the series counts: after a leadership change, each Event's count is read back from the server."""
        self._counts.clear()
        self._told_as.clear()

    async def close(self) -> None:
        return None

    async def api(self) -> str:
        """Return the Events API in use (found once).

        events.k8s.io/v1 when the server serves it, else v1.
        """
        if self._api is None:
            status, _ = await self._call("GET", "/apis/events.k8s.io/v1")
            if status == 200:
                self._api = EVENTS_V1
            elif status == 404:
                self._api = CORE_V1
            else:
                raise DeliveryError(f"GET /apis/events.k8s.io/v1: HTTP {status}")
        return self._api

    async def send(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if not isinstance(change, FindingChange):  # (never queued: see `wants`)
                continue
            if change.kind is ChangeKind.RESOLVED:
                await self._resolved(change.finding)
            elif change.catch_up:
                await self._ensure(change.finding)
            else:
                await self._occurred(change.finding)

    async def _ensure(self, finding: Finding) -> None:
        """Take up the finding's Event in a new leader's catch-up.

        Create the finding's Event if the previous leader had not, else only read its count, so the series goes on from
        there (no extra occurrence, no second Event).
        """
        if finding.id in self._counts:
            return
        api = await self.api()
        self._counts[finding.id], _ = await self._create_or_read(api, finding, self._clock())

    async def _create_or_read(self, api: str, finding: Finding, now: float) -> tuple[int, bool]:
        """Create the finding's Event, or read how often it occurred when it is there already.

        It may be there already after a retry whose answer was lost or from an earlier leader; or an Event of the same
        fight told under another id may be open (`_open_event`): this finding goes on with it. Returns (occurrences,
        created).
        """
        namespace = event_namespace(finding, api)
        if (told_as := await self._open_event(finding, namespace)) not in (None, finding.id):
            self._told_as[finding.id] = told_as
        name = self._name(finding)
        status, body = await self._call("POST", _collection(api, namespace), self._new(api, finding, name, now))
        if status < 300:
            return 1, True
        if status != 409:
            raise _error("create", status, body)
        status, body = await self._call("GET", f"{_collection(api, namespace)}/{name}")
        if status >= 300:
            raise _error("read", status, body)
        return _occurrences(api, body), False

    async def _open_event(self, finding: Finding, namespace: str) -> str | None:
        """Find fightwatch's open Warning Event about this finding's object and type, and return its finding id.

        Open: no Resolved Event closed it (the most recent if there are several); None if there is none. Read through
        core v1, which serves every Event; a read that fails leaves it to the create (which then makes one of this
        finding's own).
        """
        if not finding.object.uid:
            return None
        selector = f"involvedObject.uid={finding.object.uid}"
        status, body = await self._call("GET", f"{_collection(CORE_V1, namespace)}?fieldSelector={selector}")
        if status != 200:
            return None
        reason = REASONS[finding.type]
        opened: dict[str, str] = {}  # finding id -> when its Event was last told
        closed = set()
        for event in orjson.loads(body).get("items") or []:
            reporters = (event.get("reportingComponent"), (event.get("source") or {}).get("component"))
            if REPORTING_CONTROLLER not in reporters:
                continue
            told_as = str(event["metadata"]["name"]).rsplit(".", 1)[-1]
            if event.get("reason") == reason:
                opened[told_as] = _last_told(event)
            elif event.get("reason") == f"{reason}Resolved":
                closed.add(told_as.removesuffix("-resolved"))
        still_open = {told_as: at for told_as, at in opened.items() if told_as not in closed}
        return max(still_open, key=lambda told_as: still_open[told_as]) if still_open else None

    def _name(self, finding: Finding, *, resolved: bool = False) -> str:
        return event_name(finding, resolved=resolved, told_as=self._told_as.get(finding.id))

    async def _occurred(self, finding: Finding) -> None:
        api = await self.api()
        namespace = event_namespace(finding, api)
        now = self._clock()
        count = self._counts.get(finding.id)
        if count is None:
            count, created = await self._create_or_read(api, finding, now)
            if created:
                self._counts[finding.id] = 1
                return
        patch = _series(api, count + 1, now, self._note(finding))
        name = self._name(finding)
        status, body = await self._call("PATCH", f"{_collection(CORE_V1, namespace)}/{name}", patch, merge=True)
        if status >= 300:
            raise _error("update", status, body)
        self._counts[finding.id] = count + 1

    async def _resolved(self, finding: Finding) -> None:
        api = await self.api()
        namespace = event_namespace(finding, api)
        body = self._new(api, finding, self._name(finding, resolved=True), self._clock(), resolved=True)
        status, answer = await self._call("POST", _collection(api, namespace), body)
        if status >= 300 and status != 409:  # 409: told already (a retry whose answer was lost)
            raise _error("create", status, answer)
        self._counts.pop(finding.id, None)
        self._told_as.pop(finding.id, None)

    def _new(self, api: str, finding: Finding, name: str, now: float, *, resolved: bool = False) -> JSONObject:
        ref = finding.object
        regarding = {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "name": ref.name,
            "uid": ref.uid,
            **({"namespace": ref.namespace} if ref.namespace else {}),
        }
        reason = REASONS[finding.type] + ("Resolved" if resolved else "")
        kind = "Normal" if resolved else "Warning"
        action = "Resolved" if resolved else "Detected"
        metadata = {"name": name, "namespace": event_namespace(finding, api)}
        if api == EVENTS_V1:
            return {
                "apiVersion": EVENTS_V1,
                "kind": "Event",
                "metadata": metadata,
                "eventTime": _micro_time(now),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": self._instance,
                "action": action,
                "reason": reason,
                "regarding": regarding,
                "note": self._note(finding),
                "type": kind,
            }
        stamp = _time(now)
        return {
            "apiVersion": CORE_V1,
            "kind": "Event",
            "metadata": metadata,
            "involvedObject": regarding,
            "reason": reason,
            "message": self._note(finding),
            "type": kind,
            "source": {"component": REPORTING_CONTROLLER},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "action": action,
        }

    async def _call(
        self, method: str, path: str, body: JSONObject | None = None, *, merge: bool = False
    ) -> tuple[int, bytes]:
        content_type = "application/merge-patch+json" if merge else "application/json"
        response: Any = await self._api_client.call_api(
            path,
            method,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        try:
            return int(response.status), await response.read()
        finally:
            response.release()


def _collection(api: str, namespace: str) -> str:
    prefix = "/apis/events.k8s.io/v1" if api == EVENTS_V1 else "/api/v1"
    return f"{prefix}/namespaces/{namespace}/events"


def _series(api: str, count: int, now: float, message: str) -> JSONObject:
    """Make a core v1 merge patch that counts one more occurrence and brings the message up to date.

    For an events.k8s.io/v1 Event, a series, which core v1 serves as the same object.
    """
    if api == EVENTS_V1:
        return {"series": {"count": count, "lastObservedTime": _micro_time(now)}, "message": message}
    return {"count": count, "lastTimestamp": _time(now), "message": message}


def _last_told(event: JSONObject) -> str:
    """Return when an Event (as core v1 serves it) was last told, as RFC 3339 (which sorts in time order).

    Its series' last observation, else its last timestamp, else its event time.
    """
    series = event.get("series") or {}
    return str(series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime") or "")


def _occurrences(api: str, event: bytes) -> int:
    try:
        data = orjson.loads(event)
    except orjson.JSONDecodeError:
        return 1
    count = (data.get("series") or {}).get("count") if api == EVENTS_V1 else data.get("count")
    return count if isinstance(count, int) and count > 0 else 1


def _error(what: str, status: int, body: bytes) -> DeliveryError:
    try:
        message = orjson.loads(body).get("message", "")
    except (orjson.JSONDecodeError, AttributeError):
        message = ""
    # 4xx but 409/429: the server will refuse it again (RBAC, validation); 5xx and 429 may pass later.
    retry = status >= 500 or status == 429
    return DeliveryError(f"{what} Event: HTTP {status}{': ' + message[:300] if message else ''}", retry=retry)


def _micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["KubeEventsSink", "event_name", "note"]
