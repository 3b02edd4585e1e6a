"""The envelopes managed clusters wrap kube-apiserver audit events in, opened back to the events.

EKS, GKE and AKS users cannot set the API server's audit flags: its events reach them through the cloud's logging
service, each in that service's own record. This module turns one record (a parsed JSON value, or a line of
`aws logs tail`) back into the `audit.k8s.io/v1` events it carries, as dicts of the raw event's shape, so that
`sources.audit` maps every envelope to a `Request` the one same way:

- **raw**: an audit `Event` or `EventList` as the API server writes and posts them.
- **EKS** (CloudWatch Logs, group `/aws/eks/CLUSTER/cluster`): an event of `aws logs filter-log-events` /
  `get-log-events` (`{"logStreamName", "timestamp", "message"}`, the message being the audit event's JSON text), a
  page of them (`{"events": [...]}`), a line of `aws logs tail`, a subscription's `DATA_MESSAGE` (what Kinesis
  and Firehose deliver: `{"messageType", "logStream", "logEvents": [...]}`), and a Firehose HTTP endpoint's
  request (`{"requestId", "records": [{"data": base64}]}`, the data gzipped or not). Only the
  `kube-apiserver-audit-*` streams carry audit events: records of the group's other streams (authenticator,
  kube-controller-manager, kube-scheduler, ...) and subscriptions' `CONTROL_MESSAGE`s are skipped and counted.
- **GKE** (Cloud Logging): a `LogEntry` whose `protoPayload` is an `AuditLog` of service `k8s.io`, as `gcloud
  logging read --format=json` prints them and sinks write them, also as a Pub/Sub message (push body or pulled).
  The `AuditLog` is mapped field by field to an audit event; what it does not carry (the request URI with its
  `fieldManager`, `dryRun` and `force` parameters, the user's `extra`) is left out, as at the raw event's
  `Metadata` level (docs/audit.md has the table). Entries of other services are skipped and counted.
- **AKS** (Azure Monitor diagnostic logs): a record of category `kube-audit` or `kube-audit-admin` (`{"category",
  "properties": {"log": EVENT}}`, the event a JSON text or an object) alone, as storage accounts write them, or in
  `{"records": [...]}`, as Event Hubs deliver them; a row of the Log Analytics tables `AKSAudit`/`AKSAuditAdmin`
  (`az monitor log-analytics query -o json`; dynamic columns may come as JSON texts) or of the legacy
  `AzureDiagnostics` (`log_s`). Records of other categories are skipped and counted.

Nothing here keeps a body: the events are handed on as parsed and the decoder reads only what it reads of a raw
event. Every problem is a `ValueError` saying which part of the record is wrong; the reader adds file and line.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

import orjson


class Envelope(StrEnum):
    RAW = "raw"
    EKS = "eks"
    GKE = "gke"
    AKS = "aks"

    @property
    def label(self) -> str:
        """Its name in messages and totals, e.g. `EKS (CloudWatch Logs)`."""
        return _TITLES[self]

    @property
    def record(self) -> str:
        """What one record of it is called, in messages."""
        return "a raw audit event" if self is Envelope.RAW else f"a record of {self.label}"


_TITLES: Final = {
    Envelope.RAW: "raw audit events",
    Envelope.EKS: "EKS (CloudWatch Logs)",
    Envelope.GKE: "GKE (Cloud Logging)",
    Envelope.AKS: "AKS (Azure Monitor)",
}

AUDIT_STREAM_PREFIX: Final = "kube-apiserver-audit"  # EKS's audit log streams: kube-apiserver-audit-<id>
AKS_AUDIT_CATEGORIES: Final = frozenset({"kube-audit", "kube-audit-admin"})
AKS_TABLES: Final = frozenset({"AKSAudit", "AKSAuditAdmin"})
GKE_SERVICE: Final = "k8s.io"
# A LogEntry's and an AuditLog's fields whose keys are data, not field names: kept as they are.
_DATA_FIELDS: Final = frozenset({"labels", "request", "response", "metadata", "service_data", "json_payload"})
GKE_DRY_RUN_LABEL: Final = "command.gke.io/dryRun"  # a dry run's entry carries it (its value: the dryRun parameter's)
# A gzipped Firehose record may unpack to at most this much (a subscription's record is at most 1 MiB packed).
MAX_UNPACKED: Final = 16 * 2**20

# The AKSAudit / AKSAuditAdmin columns that hold a field of the audit event, by the event's key.
_AKS_COLUMNS: Final = {
    "AuditId": "auditID",
    "Level": "level",
    "Stage": "stage",
    "RequestUri": "requestURI",
    "Verb": "verb",
    "User": "user",
    "ImpersonatedUser": "impersonatedUser",
    "SourceIps": "sourceIPs",
    "UserAgent": "userAgent",
    "ObjectRef": "objectRef",
    "ResponseStatus": "responseStatus",
    "RequestObject": "requestObject",
    "ResponseObject": "responseObject",
    "RequestReceivedTime": "requestReceivedTimestamp",
    "StageReceivedTime": "stageTimestamp",
    "Annotations": "annotations",
}
_AKS_DYNAMIC: Final = frozenset({"user", "impersonatedUser", "sourceIPs", "objectRef", "responseStatus", "annotations"})
# (the bodies may also be the text "skipped-too-big-size-object": then they are left out)
_AKS_BODIES: Final = frozenset({"requestObject", "responseObject"})

# google.rpc.Code -> the HTTP status and Kubernetes reason the API server answered with, where a GKE entry has no
# response body to read them from: the inverse of the standard mapping (`google/rpc/code.proto`), as GKE's entries
# show it (400 is 3, 403 is 7, 409 is 10).
_RPC_CODES: Final = {
    0: (200, ""),
    1: (499, ""),
    2: (500, "InternalError"),
    3: (400, "BadRequest"),
    4: (504, "Timeout"),
    5: (404, "NotFound"),
    6: (409, "AlreadyExists"),
    7: (403, "Forbidden"),
    8: (429, "TooManyRequests"),
    9: (400, "BadRequest"),
    10: (409, "Conflict"),  # (GKE logs a create's 409 AlreadyExists as 10 too)
    11: (400, "BadRequest"),
    12: (501, ""),
    13: (500, "InternalError"),
    14: (503, "ServiceUnavailable"),
    15: (500, "InternalError"),
    16: (401, "Unauthorized"),
}
_VERSION: Final = re.compile(r"v\d+(?:(?:alpha|beta)\d+)?")
# The method of a request to no resource, its path in resourceName: the HTTP method, lower case (`io.k8s.get`).
_NON_RESOURCE: Final = frozenset(
    f"io.k8s.{verb}" for verb in ("get", "head", "options", "post", "put", "patch", "delete")
)
TRUNCATED: Final = "[Truncated...]"  # how CloudWatch Logs ends a message cut off at its event size limit (256 KiB)
_AUDIT_ID: Final = re.compile(r'"auditID":\s*"([0-9a-f-]+)"')
_ANSI: Final = re.compile(rb"\x1b\[[0-9;]*m")
# A line of `aws logs tail`: its time, the stream (`--format detailed`, the default, and `json`; not `short`), the
# message (with `--format json`, on the lines after it, pretty-printed).
_TAIL_LINE: Final = re.compile(rb"(\d{4}-\d\d-\d\dT[0-9:.+-]+)(?: (.*))?", re.DOTALL)


@dataclass(slots=True)
class EnvelopeStats:
    """What opening envelopes found.

    Records by envelope (a record is the cloud's unit that holds at most one audit event: a CloudWatch Logs event, a
    LogEntry, a diagnostic record or a table's row; a raw event), records without an audit event by what they are, and
    records whose event the reader cannot map, by why, with the first example of each.
    """

    records: Counter[Envelope] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)  # e.g. "EKS stream authenticator", "AKS category guard"
    unread: Counter[str] = field(default_factory=Counter)  # e.g. "GKE methodName of no known form"
    examples: dict[str, str] = field(default_factory=dict)  # the first of each unread reason, as shown
    passed_over: int = 0  # records that gave no event: skipped and unread

    def skip(self, what: str, count: int = 1) -> None:
        """Count records that hold no audit event, by `what` they are."""
        self.skipped[what] += count
        self.passed_over += count

    def unmapped(self, why: str, example: str) -> None:
        """Count a record whose audit event cannot be mapped (`why`), keeping the first `example`."""
        self.unread[why] += 1
        self.examples.setdefault(why, example)
        self.passed_over += 1


class Opener:
    """Opens the records of one file (or one webhook body).

    The envelope is the first record's, or the one asked for, and every record must come in it. `events` returns the
    audit events of a record.
    """

    def __init__(self, stats: EnvelopeStats, *, envelope: Envelope | None = None) -> None:
        self.stats = stats
        self.asked = envelope
        self.envelope = envelope
        self._stream: str | None = None  # `aws logs tail --format json`: the stream of the message that follows

    def events(self, document: object) -> list[dict[str, Any]]:
        """Return the audit events (dicts of the raw event's shape) of one parsed record.

        [] for a record that carries none of them (counted in `stats.skipped`). Raises ValueError for anything else.
        """
        envelope: Envelope | None
        before = self.stats.passed_over  # (a record is counted with what it held: events, and records skipped)
        if self._stream is not None:
            stream, self._stream = self._stream, None
            envelope, events = Envelope.EKS, []
            if _audit_stream(stream, self.stats):
                events = [_audit_event(document, f"the message of stream {stream}")]
        else:
            envelope, events = _open(document, self.stats)
        if envelope is None:  # (an empty array)
            return events
        if self.envelope is None:
            self.envelope = envelope
        elif envelope is not self.envelope:
            if self.asked is not None:
                raise ValueError(f"{envelope.record}, not {self.asked.record} (--audit-format {self.asked})")
            raise ValueError(
                f"{envelope.record} in a file of {self.envelope.label}: one file holds one envelope (split it)"
            )
        self.stats.records[envelope] += len(events) + self.stats.passed_over - before
        return events

    def line_events(self, line: bytes) -> list[dict[str, Any]]:
        """Return the audit events of a line that is not JSON.

        A line of `aws logs tail` (colours removed).
        """
        match = _TAIL_LINE.fullmatch(_ANSI.sub(b"", line).strip())
        if match is None:
            raise ValueError("not JSON, nor a line of `aws logs tail` (TIME [STREAM] MESSAGE)")
        rest = match.group(2) or b""
        stream: bytes | None = None
        if rest[:1] != b"{":  # (`--format short` has no stream)
            stream, _, rest = rest.partition(b" ")
        record: dict[str, Any] = {"message": rest.decode(errors="replace"), "timestamp": 0}
        if stream is not None:
            record["logStreamName"] = stream.decode(errors="replace")
            if not rest.strip() and stream:  # `--format json`: the message follows, pretty-printed
                self._stream = record["logStreamName"]
                return []
        return self.events(record)


def _open(document: object, stats: EnvelopeStats) -> tuple[Envelope | None, list[dict[str, Any]]]:
    if isinstance(document, list):
        row = _insights_fields(document)
        return _open_list(document, stats) if row is None else (Envelope.EKS, _insights_row(row, stats))
    return _open_record(document, stats)


def _open_record(document: object, stats: EnvelopeStats) -> tuple[Envelope, list[dict[str, Any]]]:
    if not isinstance(document, dict):
        raise ValueError(f"not an audit event nor a known envelope: a JSON {_json_type(document)}")
    shape = _shape(document)
    if shape is None:
        keys = ", ".join(key[:40] for key in list(document)[:6])
        raise ValueError(
            f"not an audit event nor a record of EKS, GKE or AKS (kind {shown(document.get('kind'))}; "
            f"a JSON object with keys {keys or 'none'})"
        )
    envelope, opener = shape
    return envelope, opener(document, stats)


_Open = Callable[[dict[str, Any], EnvelopeStats], list[dict[str, Any]]]


def _shape(record: dict[str, Any]) -> tuple[Envelope, _Open] | None:
    """Tell what a record is, by the keys only it has: its envelope, and how to open it."""
    if record.get("kind") in ("Event", "EventList"):
        return Envelope.RAW, _raw
    if "protoPayload" in record:
        return Envelope.GKE, _gke_entry
    if "properties" in record or "log_s" in record or "AuditId" in record or "Type" in record:
        return _azure_shape(record)
    return _other_shape(record)


def _azure_shape(record: dict[str, Any]) -> tuple[Envelope, _Open] | None:
    if "properties" in record and ("category" in record or "Category" in record):
        return Envelope.AKS, _aks_record
    if "log_s" in record:
        return Envelope.AKS, _azure_diagnostics
    if "AuditId" in record or _text(record, "Type") in AKS_TABLES:
        return Envelope.AKS, _aks_row
    return None


def _other_shape(record: dict[str, Any]) -> tuple[Envelope, _Open] | None:  # noqa: PLR0911 - a return per shape
    """Tell the shapes of records with a `message`, `records`, or other keys of their own."""
    message = record.get("message")
    if message is not None:
        if isinstance(message, dict) and "data" in message:  # a Pub/Sub push body, or a pulled message
            return Envelope.GKE, _pubsub
        if isinstance(message, str | dict) and (
            "timestamp" in record or "logStreamName" in record or "logStream" in record or "eventId" in record
        ):
            return Envelope.EKS, _cloudwatch_event  # (a shipper may have parsed the message: an object)
    records = record.get("records")
    if isinstance(records, list):  # a Firehose HTTP delivery, or an Event Hubs body
        first = records[0] if records else None
        firehose = isinstance(first, dict) and "data" in first and "properties" not in first
        return (Envelope.EKS, _firehose) if firehose else (Envelope.AKS, _aks_records)
    if "messageType" in record:
        return Envelope.EKS, _subscription
    if isinstance(record.get("events"), list):
        return Envelope.EKS, _cloudwatch_page
    if "@message" in record:  # a row of CloudWatch Logs Insights (`@message`, `@logStream`, `@timestamp`, ...)
        return Envelope.EKS, _insights_row
    if isinstance(record.get("results"), list) and "statistics" in record:  # `aws logs get-query-results`
        return Envelope.EKS, _insights_results
    if "proto_payload" in record:  # `gcloud logging tail`: the entry's fields by their proto names
        return Envelope.GKE, _gke_proto_entry
    if isinstance(record.get("data"), str) and len(record) <= 3:  # a Firehose record on its own
        return Envelope.EKS, _firehose_record
    return None


def _raw(document: dict[str, Any], _stats: EnvelopeStats) -> list[dict[str, Any]]:
    if document.get("kind") == "Event":
        return [document]
    items = document.get("items")
    if not isinstance(items, list):
        raise ValueError("an EventList without a list of items")
    return items


def _open_list(items: list[Any], stats: EnvelopeStats) -> tuple[Envelope | None, list[dict[str, Any]]]:
    """Open a JSON array of records.

    From `gcloud logging read`, `az monitor log-analytics query`, a batch of a shipper. An empty one is of no envelope
    (`gcloud logging read` of a quiet minute prints `[]`).
    """
    envelope: Envelope | None = None
    out: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        try:
            if isinstance(item, list):  # (records are objects: an array holds them, arrays do not nest)
                raise ValueError("an array, not a record")  # noqa: TRY301 - handled with the item's other problems
            kind, events = _open_record(item, stats)
        except ValueError as exc:
            raise ValueError(f"item {index} of the array: {exc}") from None
        if envelope is None:
            envelope = kind
        elif kind is not envelope:
            raise ValueError(f"item {index} of the array is {kind.record}, the items before it of {envelope.label}")
        out.extend(events)
    return envelope, out


# EKS


def _cloudwatch_page(page: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, event in enumerate(page["events"]):
        if not isinstance(event, dict) or not isinstance(event.get("message"), str):
            raise ValueError(f"event {index} of the page has no message")
        out.extend(_cloudwatch_event(event, stats, where=f"event {index} of the page"))
    return out


def _cloudwatch_event(event: dict[str, Any], stats: EnvelopeStats, *, where: str = "the event") -> list[dict[str, Any]]:
    """Return the audit event in a CloudWatch Logs event's message (its JSON text, or parsed by a shipper).

    [] for an event of another stream of the group.
    """
    stream = event.get("logStreamName", event.get("logStream"))
    if isinstance(stream, str) and not _audit_stream(stream, stats):
        return []
    return [_carried(event["message"], f"the message of {where}")]


def _insights_fields(row: list[Any]) -> dict[str, Any] | None:
    """Return a row of `aws logs get-query-results` (`[{"field": "@message", "value": ...}, ...]`) as {field: value}.

    None for a list that is not one.
    """
    if not row or not all(isinstance(cell, dict) and isinstance(cell.get("field"), str) for cell in row):
        return None
    return {cell["field"]: cell.get("value") for cell in row}


def _insights_results(results: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open the results of a CloudWatch Logs Insights query (`aws logs get-query-results`), parsed whole."""

    def row_events(row: object) -> list[dict[str, Any]]:
        fields = _insights_fields(row) if isinstance(row, list) else None
        if fields is None:
            raise ValueError("not a row of fields ([{field, value}, ...])")
        return _insights_row(fields, stats)

    return _each(results["results"], "results", row_events)


def _insights_row(row: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Return the audit event in a row of CloudWatch Logs Insights results (JSON, or the console's CSV).

    The event is the row's `@message`; `@logStream`, where the query returns it, tells the group's other streams.
    Without it, a message that is not JSON is taken for one of theirs.
    """
    stream = row.get("@logStream")
    stream = stream if isinstance(stream, str) else ""
    if stream and not _audit_stream(stream, stats):
        return []
    message = row.get("@message")
    if not isinstance(message, str | dict):
        fields = ", ".join(str(name)[:40] for name in list(row)[:6])
        raise ValueError(
            f"a CloudWatch Logs Insights row without @message (fields {fields}): query `fields @timestamp, "
            "@message, @logStream`"
        )
    if not stream and isinstance(message, str) and message.lstrip()[:1] != "{":
        stats.skip("EKS message that is not JSON (no @logStream to tell its stream)")
        return []
    return [_carried(message, "@message")]


def _subscription(message: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open a CloudWatch Logs subscription's message (Kinesis, Firehose).

    DATA_MESSAGE's logEvents of one stream.
    """
    kind = message.get("messageType")
    if kind != "DATA_MESSAGE":
        if kind == "CONTROL_MESSAGE":
            stats.skip("EKS CONTROL_MESSAGE")
            return []
        raise ValueError(f"a CloudWatch Logs subscription message of messageType {shown(kind)}")
    stream = message.get("logStream")
    if not isinstance(stream, str):
        raise ValueError("a DATA_MESSAGE without logStream")
    events = message.get("logEvents")
    if not isinstance(events, list):
        raise ValueError("a DATA_MESSAGE without a list of logEvents")
    if not _audit_stream(stream, stats, count=len(events)):
        return []
    out = []
    for index, event in enumerate(events):
        text = event.get("message") if isinstance(event, dict) else None
        if not isinstance(text, str):
            raise ValueError(f"logEvents[{index}] has no message")
        out.append(_audit_text(text, f"the message of logEvents[{index}]"))
    return out


def _firehose_record(record: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    return _firehose({"records": [record]}, stats)


def _firehose(body: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open a Firehose HTTP endpoint's records.

    Each `data` is a subscription message, base64, gzipped unless the stream decompresses (then, with message
    extraction, the messages themselves, one a line).
    """
    out: list[dict[str, Any]] = []
    for index, record in enumerate(body["records"]):
        where = f"records[{index}]"
        data = record.get("data") if isinstance(record, dict) else None
        if not isinstance(data, str):
            raise ValueError(f"{where} has no data")
        text = _unpacked(_base64(data, where), where)
        for number, line in enumerate(text.splitlines() or [b""]):
            try:
                document = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise ValueError(f"line {number + 1} of {where}'s data is not JSON") from None
            if isinstance(document, dict) and "messageType" in document:
                out.extend(_subscription(document, stats))
            else:  # message extraction: the log event's message alone
                out.append(_audit_event(document, f"line {number + 1} of {where}'s data"))
    return out


def _audit_stream(stream: str, stats: EnvelopeStats, *, count: int = 1) -> bool:
    if stream.startswith(AUDIT_STREAM_PREFIX):
        return True
    stats.skip(f"EKS stream {stream.rsplit('-', 1)[0] if '-' in stream else stream}", count)
    return False


# GKE


def _pubsub(body: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open a log sink's Pub/Sub message (in a push body or pulled).

    The LogEntry is its data, base64.
    """
    data = body["message"].get("data")
    if not isinstance(data, str):
        raise ValueError("a Pub/Sub message whose data is not a string")
    try:
        entry = orjson.loads(_base64(data, "the Pub/Sub message's data"))
    except orjson.JSONDecodeError:
        raise ValueError("the Pub/Sub message's data is not JSON") from None
    if not isinstance(entry, dict) or "protoPayload" not in entry:
        raise ValueError("the Pub/Sub message's data is not a LogEntry with a protoPayload")
    return _gke_entry(entry, stats)


def _gke_proto_entry(entry: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open a LogEntry as `gcloud logging tail` prints it.

    Its fields (and the AuditLog's) by their proto names, `proto_payload`, `method_name`, `principal_email`, where
    `gcloud logging read` and sinks write their JSON names: renamed, but for the bodies and labels, whose keys are
    data.
    """
    return _gke_entry(_json_names(entry), stats)


def _json_names(value: object) -> Any:
    """Rename the keys of a value's messages from proto names to JSON names (`method_name` -> `methodName`)."""
    if isinstance(value, list):
        return [_json_names(item) for item in value]
    if not isinstance(value, dict):
        return value
    return {
        _json_name(key): item if key in _DATA_FIELDS else _json_names(item)
        for key, item in value.items()
        if isinstance(key, str)
    }


def _json_name(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def _gke_entry(entry: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Return the audit event a GKE LogEntry of the Kubernetes API describes.

    In the raw event's shape.
    """
    payload = entry.get("protoPayload")
    if not isinstance(payload, dict):
        raise ValueError("protoPayload is not an object")
    service = payload.get("serviceName")
    if service != GKE_SERVICE:
        stats.skip(f"GKE service {_named(service)}")
        return []
    method, resource_name = _text(payload, "methodName"), _text(payload, "resourceName")
    if method in _NON_RESOURCE:  # a request to a path, no resource: `io.k8s.get` of `readyz`, `apis/apps/v1`
        return [_gke_event(entry, payload, method.rpartition(".")[2], None, resource_name)]
    try:
        version, resource, subresource, verb = _method(method)
        group, namespace, name = _resource_name(resource_name, resource)
    except _UnmappedError as exc:
        stats.unmapped(exc.why, exc.example)
        return []
    ref: dict[str, Any] = {"resource": resource, "apiGroup": group, "apiVersion": version}
    if subresource:
        ref["subresource"] = subresource
    if namespace:
        ref["namespace"] = namespace
    if name:
        ref["name"] = name
    request = payload.get("request")
    if isinstance(request, dict):  # a body of a write: its metadata is what objectRef takes from it
        meta = request.get("metadata")
        if isinstance(meta, dict):
            for key in ("resourceVersion", "uid"):
                if isinstance(meta.get(key), str) and meta[key]:
                    ref[key] = meta[key]
    return [_gke_event(entry, payload, verb, ref, resource_name)]


def _gke_event(
    entry: dict[str, Any], payload: dict[str, Any], verb: str, ref: dict[str, Any] | None, resource_name: str
) -> dict[str, Any]:
    """Make the raw audit event of a GKE entry: on `ref`, or on no resource (None: a request to a path)."""
    operation = entry.get("operation")
    operation = operation if isinstance(operation, dict) else {}
    # A long request (a watch) has an entry when it starts (`first`) and one when it ends (`last`).
    stage = "ResponseStarted" if operation.get("last") is False else "ResponseComplete"
    authentication = payload.get("authenticationInfo")
    principal = _text(authentication, "principalEmail") if isinstance(authentication, dict) else ""
    metadata = payload.get("requestMetadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    labels = entry.get("labels")
    dry_run = isinstance(labels, dict) and bool(labels.get(GKE_DRY_RUN_LABEL))
    event: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "auditID": _text(operation, "id") or _text(entry, "insertId"),
        # No request URI: only what the entry tells of its query (a dry run, in a label of its own).
        "requestURI": "/" + resource_name.lstrip("/") + ("?dryRun=All" if dry_run else ""),
        "stage": stage,
        "verb": verb,
        "user": {"username": principal},
        "userAgent": _text(metadata, "callerSuppliedUserAgent"),
        "stageTimestamp": _text(entry, "timestamp") or _text(entry, "receiveTimestamp"),
        "responseStatus": _gke_status(payload.get("status"), payload.get("response"), created=verb == "create"),
    }
    if ref is not None:
        event["objectRef"] = ref
    response = payload.get("response")
    if isinstance(response, dict):
        event["responseObject"] = response
    return event


class _UnmappedError(ValueError):
    """A record whose audit event names its resource in a form the reader cannot map: counted, not fatal."""

    def __init__(self, why: str, example: str) -> None:
        super().__init__(f"{why}: {example}")
        self.why = why
        self.example = example


def _method(method: str) -> tuple[str, str, str, str]:
    """Split a method name into (version, resource, subresource, verb).

    `io.k8s.<group>.<version>.<resource>[.<subresource>].<verb>` -> (version, resource, subresource, verb). The
    group is spelt there reversed, `k8s.io` folded into the prefix (`io.k8s.authorization.rbac.v1...`): it is read
    from the resourceName instead.
    """
    parts = method.removeprefix("io.k8s.").split(".") if method.startswith("io.k8s.") else []
    if len(parts) >= 4 and _VERSION.fullmatch(parts[-3]):
        return parts[-3], parts[-2], "", parts[-1]
    if len(parts) >= 5 and _VERSION.fullmatch(parts[-4]):
        return parts[-4], parts[-3], parts[-2], parts[-1]
    raise _UnmappedError("GKE methodName not io.k8s.GROUP.VERSION.RESOURCE[.SUBRESOURCE].VERB", shown(method))


def _resource_name(text: str, resource: str) -> tuple[str, str, str]:
    """Split a resourceName into (group, namespace, name).

    `GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE...]]`, the core group spelt `core`. A create's may be the
    collection's or carry the new object's name; a Namespace's is `core/v1/namespaces/NAME`.
    """
    group, _, path = text.partition("/")
    parts = path.split("/")[1:]
    if not group or not parts:
        raise _UnmappedError("GKE resourceName not GROUP/VERSION/...", shown(text))
    namespace = ""
    if resource == "namespaces" and group == "core":
        return "", "", parts[1] if len(parts) >= 2 else ""
    if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] == resource:
        namespace, parts = parts[1], parts[2:]
    if parts[0] != resource:
        raise _UnmappedError("GKE resourceName not naming its methodName's resource", f"{shown(text)} ({resource})")
    return ("" if group == "core" else group), namespace, parts[1] if len(parts) >= 2 else ""


def _gke_status(status: object, response: object, *, created: bool) -> dict[str, Any]:
    """Return the response status of an AuditLog.

    The Kubernetes Status it responded with where the entry has the response (its HTTP code and reason), else its
    google.rpc status mapped back (`_RPC_CODES`; a create that succeeded answered 201 Created).
    """
    if isinstance(response, dict) and response.get("kind") == "Status" and isinstance(response.get("code"), int):
        return {k: response[k] for k in ("code", "reason", "message", "status") if k in response}
    code = status.get("code", 0) if isinstance(status, dict) else 0
    if not isinstance(code, int) or isinstance(code, bool):
        raise ValueError(f"status.code {shown(code)} is not a google.rpc code")
    http, reason = _RPC_CODES.get(code, (500, ""))
    if code == 0 and created:
        http = 201
    message = _text(status, "message")
    if http == 409:  # ABORTED stands for every 409: a create's AlreadyExists as well as a Conflict
        reason = "AlreadyExists" if "already exists" in message else "Conflict"
    out: dict[str, Any] = {"code": http}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


# AKS


def _aks_records(batch: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    def record_events(record: object) -> list[dict[str, Any]]:
        if not isinstance(record, dict):
            raise ValueError("not an object")
        return _aks_record(record, stats)

    return _each(batch["records"], "records", record_events)


def _kube_audit(record: dict[str, Any], stats: EnvelopeStats) -> bool:
    """Whether a record (or an AzureDiagnostics row) is of an audit category; one of another is counted."""
    category = record.get("category", record.get("Category"))
    if isinstance(category, str) and category in AKS_AUDIT_CATEGORIES:
        return True
    stats.skip(f"AKS category {_named(category)}")
    return False


def _aks_record(record: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open a diagnostic log record: category kube-audit(-admin), the event in properties.log."""
    if not _kube_audit(record, stats):
        return []
    properties = record.get("properties")
    if isinstance(properties, str):  # (some exports carry the dynamic column as text)
        properties = _json(properties, "properties")
    log = properties.get("log") if isinstance(properties, dict) else None
    if log is None:
        raise ValueError("a kube-audit record without properties.log")
    return [_carried(log, "properties.log")]


def _azure_diagnostics(row: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open a row of the legacy AzureDiagnostics table: the event as text in log_s."""
    if not _kube_audit(row, stats):
        return []
    log = row.get("log_s")
    if not isinstance(log, str):
        raise ValueError("log_s is not a string")
    return [_audit_text(log, "log_s")]


def _aks_row(row: dict[str, Any], stats: EnvelopeStats) -> list[dict[str, Any]]:
    """Open a row of the AKSAudit / AKSAuditAdmin tables: the event's fields in columns of their own."""
    table = row.get("Type")
    if table is not None and (not isinstance(table, str) or table not in AKS_TABLES):
        stats.skip(f"AKS table {_named(table)}")
        return []
    event: dict[str, Any] = {"kind": "Event", "apiVersion": "audit.k8s.io/v1"}
    for column, key in _AKS_COLUMNS.items():
        value = row.get(column)
        if value is None or value in ("", "None"):  # (the az CLI prints every value with str(): null is "None")
            continue
        if isinstance(value, str) and key in _AKS_BODIES:
            if value[:1] != "{":
                continue
            value = _json(value, column)
        elif isinstance(value, str) and key in _AKS_DYNAMIC:
            value = _json(value, column)
        event[key] = value
    if "stageTimestamp" not in event and isinstance(row.get("TimeGenerated"), str):
        event["stageTimestamp"] = row["TimeGenerated"]
    return [event]


# Shared


def _each(items: list[Any], name: str, events: Callable[[Any], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Return the audit events of each item of a batch (`events` of it); a problem is named `name[i]: ...`."""
    out: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        try:
            out.extend(events(item))
        except ValueError as exc:
            raise ValueError(f"{name}[{index}]: {exc}") from None
    return out


def _carried(value: object, where: str) -> dict[str, Any]:
    """Return the audit event a record carries in a field: as JSON text, or parsed already (by a shipper)."""
    return _audit_event(value, where) if isinstance(value, dict) else _audit_text(value, where)


def _audit_text(text: object, where: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError(f"{where} is not a string")
    if text.endswith(TRUNCATED):
        audit_id = _AUDIT_ID.search(text)
        of = f" (auditID {audit_id.group(1)})" if audit_id else ""
        raise ValueError(f"{where} is an audit event{of} CloudWatch Logs cut off at its size limit")
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError:
        start = text[:40].replace("\n", " ")
        raise ValueError(f"{where} is not an audit event (not JSON: {start!r}...)") from None
    return _audit_event(document, where)


def _audit_event(document: object, where: str) -> dict[str, Any]:
    if not isinstance(document, dict) or document.get("kind") != "Event":
        what = f"kind {shown(document.get('kind'))}" if isinstance(document, dict) else f"a JSON {_json_type(document)}"
        raise ValueError(f"{where} is not an audit event ({what})")
    return document


def _json(text: str, where: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError(f"{where} is a string but not JSON") from None


def _base64(data: str, where: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where} is not base64") from None


def _unpacked(data: bytes, where: str) -> bytes:
    """Gunzipped data (at most MAX_UNPACKED bytes), or the data as it is when it is not gzipped."""
    if data[:2] != b"\x1f\x8b":
        return data
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, MAX_UNPACKED)
    except zlib.error as exc:
        raise ValueError(f"{where}'s data is corrupt gzip ({exc})") from None
    if inflater.unconsumed_tail:
        raise ValueError(f"{where}'s data unpacks to more than {MAX_UNPACKED:,} bytes")
    if not inflater.eof:
        raise ValueError(f"{where}'s gzipped data ends early")
    return out


def _text(mapping: object, key: str) -> str:
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, str) else ""


def _named(value: object) -> str:
    """Name a value read from a record, as counted.

    A string as it is (cut at 60 characters), anything else `shown`.
    """
    return value[:60] if isinstance(value, str) else shown(value)


def shown(value: object) -> str:
    """Show a value of a record in a message.

    A scalar as written (a string cut at 60 characters), else its JSON type.
    """
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:60] + "...")
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):  # (any size: a streamed document's numbers are Python's)
        return str(value) if -(10**18) < value < 10**18 else "a number of over 18 digits"
    if isinstance(value, float):
        return repr(value)
    return f"a JSON {_json_type(value)}"


def _json_type(value: object) -> str:
    return {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


__all__ = ["AKS_AUDIT_CATEGORIES", "AUDIT_STREAM_PREFIX", "Envelope", "EnvelopeStats", "Opener", "shown"]
