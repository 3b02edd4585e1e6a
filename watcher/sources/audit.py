"""Read kube-apiserver audit logs, in the shapes their backends and cloud services write.

The `audit.k8s.io/v1` events of the log backend (`--audit-log-path`, JSON Lines), `EventList` documents (what the
webhook backend posts, or `kubectl get --raw` of a saved list), pretty-printed or one a line, `.gz` or plain, `-` for
standard input; several files (rotated parts included) merged by time. Also in the envelopes of managed clusters'
logging services (`envelopes`: EKS, GKE, AKS), told per file by its first record: a file that is one document (a JSON
array of records, a page of them) is streamed a record at a time with ijson (errors name the record), the others a line
at a time.

Each event becomes a `detection.requests.Request` at once; its request and response bodies (present at the
`Request` and `RequestResponse` levels) are never kept, logged or counted, nor are its annotations (authorization
reasons, latencies, Pod Security verdicts, credential ids) or its user's `extra`, but for the name of the pod a
service account's token is bound to. Only stage `ResponseComplete` (and
`Panic`) describes a finished request: events of other stages are skipped and counted by stage, as are events
without an `objectRef` (non-resource URLs such as /healthz). The file is read by the capture reader
(`capture.read_capture`), so memory does not grow with it, a problem is reported with the file and line where
the event starts, and a file that breaks off is reported with how far it was read, after the events before it.
"""

from __future__ import annotations

import io
import math
import zlib
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final
from urllib.parse import unquote, urlsplit

import ijson
import orjson

from watcher.detection.requests import Request, RequestObject, manager_from_user_agent
from watcher.model import TIME_END, parse_time
from watcher.sources.capture import CaptureError, ReadStats, broken_reason, merged, open_source, read_texts
from watcher.sources.envelopes import Envelope, EnvelopeStats, Opener, shown
from watcher.sources.exports import Form, LineError, csv_records, sniff, yaml_records
from watcher.sources.follow import open_following

AUDIT_API_VERSIONS: Final = frozenset({"audit.k8s.io/v1", "audit.k8s.io/v1beta1"})
COMPLETE_STAGES: Final = frozenset({"ResponseComplete", "Panic"})
KNOWN_STAGES: Final = frozenset({"RequestReceived", "ResponseStarted", "ResponseComplete", "Panic"})
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"  # the user name of a service account: ...:NAMESPACE:NAME
POD_NAME_KEY: Final = "authentication.kubernetes.io/pod-name"  # user.extra of a token bound to a pod
BACKWARDS: Final = 60.0  # seconds a request may come before one read earlier: logs interleave replicas' writes
MESSAGE_MAX: Final = 2048  # a 409's message names the object, managers and field paths: longer ones are cut


class AuditError(CaptureError):
    """An audit log that cannot be read; the message starts with `file:line:`."""

    noun = "log"


@dataclass(slots=True)
class AuditStats:
    """What reading audit logs found, beyond the requests it yielded."""

    requests: int = 0  # requests yielded
    events: int = 0  # audit events read (every stage)
    stages_skipped: Counter[str] = field(default_factory=Counter)  # events of other stages, by stage
    without_object: int = 0  # events without an objectRef (non-resource URLs)
    invalid_items: int = 0  # EventList items that are not audit events, skipped (the webhook's batches)
    envelopes: EnvelopeStats = field(default_factory=EnvelopeStats)  # records by envelope, and those skipped
    # Requests older than one read before them in the same file by more than BACKWARDS, by file: a log newest first
    # (`gcloud logging read` without --order=asc) cannot be analysed; the analysis warns.
    backwards: Counter[str] = field(default_factory=Counter)
    # The reading itself, by JSON text (an event, or an EventList): lines read, texts skipped as invalid (with
    # skip_invalid: `skipped_invalid`, the first few in `problems`).
    read: ReadStats = field(default_factory=ReadStats)


def read_audit_log(
    source: str,
    *,
    stats: AuditStats,
    skip_invalid: bool = False,
    envelope: Envelope | None = None,
    follow: Callable[[], None] | None = None,
) -> Generator[Request, None, None]:
    """Yield the completed requests of one audit log (`-` for stdin) in file order.

    The log is read in the envelope its first record comes in (or `envelope`). With `follow`, the log is read as it is
    written (`follow.py`), `follow` called while it waits for more.

    An event that is not valid JSON or not an audit event is an `AuditError` naming the file and line (or record),
    or (with `skip_invalid`) counted and skipped.
    """
    opener = Opener(stats.envelopes, envelope=envelope)
    opened = (
        open_source(source, AuditError) if follow is None else open_following(source, idle=follow, error=AuditError)
    )
    with opened as stream:
        head = _head(stream)
        prefix = _streamed_prefix(head)
        form = sniff(head) if prefix is None else None
        if form is not None:
            texts = _read_exported(stream, source, form, opener, stats=stats, skip_invalid=skip_invalid)
        elif prefix is None:
            texts = read_texts(
                stream,
                source,
                lambda text: decode_audit(text, stats, opener=opener),
                stats=stats.read,
                skip_invalid=skip_invalid,
                error=AuditError,
            )
        else:
            texts = _read_documents(stream, source, prefix, opener, stats=stats, skip_invalid=skip_invalid)
        latest = -math.inf
        try:
            for requests in texts:
                for request in requests:
                    stats.requests += 1
                    if request.time < latest - BACKWARDS:
                        stats.backwards[source] += 1
                    latest = max(latest, request.time)
                    yield request
        finally:
            texts.close()  # (its file: a compiled generator is not closed when collected)


def read_audit_logs(
    sources: Iterable[str],
    *,
    stats: AuditStats,
    skip_invalid: bool = False,
    envelope: Envelope | None = None,
    follow: Callable[[], None] | None = None,
) -> Generator[Request, None, None]:
    """Yield the requests of several audit logs merged by time.

    Each file is read in its own order: the log backend writes events as requests complete. Close it when leaving early:
    its files are closed then.
    """
    streams = [
        read_audit_log(s, stats=stats, skip_invalid=skip_invalid, envelope=envelope, follow=follow) for s in sources
    ]
    return streams[0] if len(streams) == 1 else merged(streams, _time)


def _time(request: Request) -> float:
    return request.time


def decode_audit(
    text: bytes, stats: AuditStats, *, opener: Opener | None = None, skip_bad_items: bool = False
) -> list[Request]:
    """Return the completed requests in one record.

    The record is an audit `Event` or `EventList`, or a record of a cloud's envelope (`envelopes`), or a line of
    `aws logs tail`. Raises ValueError for anything else, or for an EventList item that is not an audit event; with
    `skip_bad_items` (the webhook: one bad event must not cost the batch) such items are counted in
    `stats.invalid_items` and skipped instead.
    """
    opener = opener or Opener(stats.envelopes)
    if text[:1] in (b"{", b"["):
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            if "after document" not in str(exc):
                raise ValueError(f"not valid JSON ({exc})") from None
            if b"\n" in text.strip():  # a webhook body of JSON Lines (a shipper's batch): a line at a time
                return _requests_of_lines(text, stats, opener, skip_bad_items=skip_bad_items)
            return _requests_of_values(text, stats, opener, skip_bad_items=skip_bad_items)
        events = opener.events(document)
    else:
        events = opener.line_events(text)
    return _requests(events, stats, skip_bad_items=skip_bad_items)


def _requests_of_lines(text: bytes, stats: AuditStats, opener: Opener, *, skip_bad_items: bool) -> list[Request]:
    """Return the requests of a body of JSON Lines, each decoded on its own.

    Values written one after the other on a line are decoded too.
    """
    out: list[Request] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.extend(decode_audit(line.strip(), stats, opener=opener, skip_bad_items=skip_bad_items))
            except ValueError as exc:
                raise ValueError(f"line {number}: {exc}") from None
    return out


def _requests_of_values(text: bytes, stats: AuditStats, opener: Opener, *, skip_bad_items: bool) -> list[Request]:
    """Return the requests of JSON values written one after the other on one line.

    `}{`: Firehose's S3 objects.
    """
    out: list[Request] = []
    try:
        for document in _items(io.BytesIO(text), ""):
            out.extend(_requests(opener.events(document), stats, skip_bad_items=skip_bad_items))
    except (ijson.JSONError, UnicodeDecodeError) as exc:  # (UnicodeDecodeError: a \u escape of a lone surrogate)
        raise ValueError(f"not valid JSON after {len(out):,} events ({exc})") from None
    return out


def _requests(events: list[Any], stats: AuditStats, *, skip_bad_items: bool) -> list[Request]:
    out = []
    several = len(events) > 1
    for index, event in enumerate(events):
        try:
            if not isinstance(event, dict):
                raise ValueError("not an object")  # noqa: TRY301 - handled with the event's other problems
            kind = event.get("kind")
            if kind is not None:  # (an EventList's items have no kind of their own)
                if kind != "Event":
                    raise ValueError(f"not an audit event (kind {shown(kind)})")  # noqa: TRY301 - as above
                _check_api_version(event)
            request = _request(event, stats)
        except ValueError as exc:
            if not skip_bad_items:
                raise ValueError(f"item {index} of the record: {exc}" if several else str(exc)) from None
            stats.invalid_items += 1
            continue
        if request is not None:
            out.append(request)
    return out


# Where a file's records are streamed from (an ijson prefix): a document that is one JSON array of records, or an
# object whose records are in an array of its own (a CloudWatch Logs page's `events`, an Event Hubs batch's
# `records`, an EventList's `items`), or values written one after the other without line breaks.
_RECORD_ARRAYS: Final = frozenset({"events", "records", "items", "results"})
_HEAD: Final = 1 << 16
# Nesting deeper than orjson takes (1024 levels) is no record. ijson's parser holds the prefix of every level it is in
# (N levels: N²·2.5 bytes; a 60 KB document of `[[[...` takes 2 GB): it is stopped there.
_MAX_DEPTH: Final = 1024


def _depth_limited(events: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Parser events (`ijson.basic_parse`), stopped with an ijson.JSONError beyond _MAX_DEPTH levels."""
    depth = 0
    for event in events:
        kind = event[0]
        if kind in {"start_map", "start_array"}:
            depth += 1
            if depth > _MAX_DEPTH:
                raise ijson.JSONError(f"nested deeper than {_MAX_DEPTH} levels")
        elif kind in {"end_map", "end_array"}:
            depth -= 1
        yield event


def _prefixed(stream: BinaryIO) -> Iterator[tuple[str, str, Any]]:
    """`ijson.parse` of a stream (values one after the other), nested at most _MAX_DEPTH deep."""
    events: Iterator[tuple[str, str, Any]] = ijson.parse(
        _depth_limited(ijson.basic_parse(stream, multiple_values=True, use_float=True))
    )
    return events


def _items(stream: BinaryIO, prefix: str) -> Iterator[Any]:
    """`ijson.items` of a stream (values one after the other), nested at most _MAX_DEPTH deep."""
    items: Iterator[Any] = ijson.items(_prefixed(stream), prefix)
    return items


def _head(stream: BinaryIO) -> bytes:
    """Peek at the stream's first bytes (up to _HEAD); b"" for a stream that breaks there."""
    peek = getattr(stream, "peek", None)
    try:
        return peek(_HEAD)[:_HEAD] if peek is not None else b""
    except (OSError, EOFError, zlib.error):  # (a corrupt gzip stream: reading it reports where)
        return b""


def _streamed_prefix(head: bytes) -> str | None:
    """Return the ijson prefix of a file's records, when the file is streamed as JSON values.

    A document that is one array of records, or an object whose records are in an array of its own; or values written
    one after the other (on one line, or pretty-printed). None when it is read a text at a time, by line (JSON Lines,
    lines of `aws logs tail`, and YAML and CSV exports).
    """
    head = head.lstrip()
    if head[:1] == b"[":
        return "item"
    if head[:1] != b"{":
        return None
    first, newline, _rest = head.partition(b"\n")
    if first.strip() != b"{":
        if b"}{" in first:  # values one after another (Firehose's S3 objects), on a line longer than the head too
            return ""
        return "" if newline and _spanning(first) else None  # (no newline: a line longer than the head)
    try:
        for prefix, event, _value in _prefixed(io.BytesIO(head)):
            if event == "start_array" and prefix in _RECORD_ARRAYS:
                return f"{prefix}.item"
    except (ijson.JSONError, UnicodeDecodeError):  # (the head ends inside the document, or is not UTF-8 there)
        pass
    # Pretty-printed objects, one after another: streamed, whatever their indentation (a brace at column 0 may close a
    # record, as jq writes them, or an object inside one, as some documents show them).
    return ""


def _spanning(line: bytes) -> bool:
    """Whether a first line holds JSON values one after another, or begins one spanning lines."""
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return "after document" in str(exc) or exc.pos >= len(line.rstrip())
    return False


def _read_documents(
    stream: BinaryIO, source: str, prefix: str, opener: Opener, *, stats: AuditStats, skip_invalid: bool
) -> Generator[list[Request], None, None]:
    """Yield the requests of each record of a file read as one document, streamed.

    Memory holds one record at a time. Problems are reported by record number (the parser does not count lines).
    """
    read = stats.read
    number = 0
    items = prefix == "items.item"
    records = _items(stream, prefix)
    try:
        while True:
            try:
                record = next(records)
            except StopIteration:
                return
            number += 1
            read.lines = read.file_lines = number
            if items:  # an EventList's items have no kind of their own
                record = {"kind": "EventList", "items": [record]}
            try:
                requests = _requests(opener.events(record), stats, skip_bad_items=False)
            except ValueError as exc:
                if not skip_invalid:
                    raise AuditError(source, None, f"record {number:,}: {exc}") from None
                read.note(f"{source}: record {number:,}: {exc}")
                continue
            read.events += 1
            read.source, read.line = source, number
            yield requests
    except ijson.IncompleteJSONError as exc:
        raise AuditError(
            source, None, f"the document ends inside record {number + 1:,} (truncated file?): {exc}"
        ) from None
    # (UnicodeDecodeError: a \u escape of a lone surrogate. Not ValueError: the AuditErrors raised above are ones.)
    except (ijson.JSONError, UnicodeDecodeError) as exc:
        raise AuditError(
            source, None, f"invalid JSON in record {number + 1:,} ({exc}); read {number:,} records"
        ) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise AuditError(source, None, f"{broken_reason(exc)}; read {number:,} records") from None


def _read_exported(
    stream: BinaryIO, source: str, form: Form, opener: Opener, *, stats: AuditStats, skip_invalid: bool
) -> Generator[list[Request], None, None]:
    """Yield the requests of each record of a YAML or CSV export (`exports`), a record at a time.

    Problems are reported by the line the record starts on.
    """
    read = stats.read
    records = yaml_records(stream) if form == "yaml" else csv_records(stream)
    try:
        for line, record in records:
            read.lines = read.file_lines = line
            try:
                if isinstance(record, LineError):
                    raise record
                requests = _requests(opener.events(record), stats, skip_bad_items=False)
            except ValueError as exc:
                where = exc.line if isinstance(exc, LineError) else line
                if not skip_invalid:
                    raise AuditError(source, where, str(exc)) from None
                read.note(f"{source}:{where}: {exc}")
                continue
            read.events += 1
            read.source, read.line = source, line
            yield requests
    except LineError as exc:  # a table that cannot be read on
        raise AuditError(source, exc.line, str(exc)) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise AuditError(source, None, f"{broken_reason(exc)}; read up to line {read.file_lines:,}") from None


def _check_api_version(document: dict[str, Any]) -> None:
    version = document.get("apiVersion")
    if version is None:  # (events that name no version: saved by tools that drop it; read as v1, all they can be)
        return
    if not isinstance(version, str) or version not in AUDIT_API_VERSIONS:
        raise ValueError(f"not an audit event (apiVersion {shown(version)}; expected audit.k8s.io/v1)")


def _request(event: dict[str, Any], stats: AuditStats) -> Request | None:
    """Return the request an audit event describes.

    None for an event that describes none (counted in `stats`).
    """
    stats.events += 1
    stage = _text(event, "stage")
    if not stage:
        raise ValueError("no stage")
    if stage not in COMPLETE_STAGES:
        if stage not in KNOWN_STAGES:
            raise ValueError(f"unknown stage {shown(stage)}")
        stats.stages_skipped[stage] += 1
        return None
    ref = event.get("objectRef")
    if ref is None:
        stats.without_object += 1
        return None
    if not isinstance(ref, dict):
        raise ValueError("objectRef is not an object")
    verb = _text(event, "verb")
    if not verb:
        raise ValueError("no verb")
    # (`timestamp`: audit.k8s.io/v1alpha1's one time, which tools still write)
    when = _text(event, "stageTimestamp") or _text(event, "requestReceivedTimestamp") or _text(event, "timestamp")
    if not when:
        raise ValueError("no stageTimestamp")
    try:
        time = parse_time(when)
    except ValueError:
        raise ValueError(f"stageTimestamp {shown(when)} is not an RFC 3339 time") from None
    if not 0 <= time < TIME_END:  # (a date can show it, `format_time`; and none before 1970)
        raise ValueError(f"stageTimestamp {shown(when)} is out of range (1970 to 9999)")
    user, impersonator, pod = _user(event)
    user_agent = _text(event, "userAgent")
    uri = _text(event, "requestURI")
    manager, dry_run, force = _query(uri) if "?" in uri else _NO_QUERY  # (most requests have no query)
    code, reason, message = _status(event)
    return Request(
        audit_id=_text(event, "auditID"),
        time=time,
        verb=verb,
        user=user,
        impersonator=impersonator,
        user_agent=user_agent,
        manager=manager or _derived_manager(user_agent),
        object=RequestObject(
            api_group=_text(ref, "apiGroup"),
            api_version=_text(ref, "apiVersion"),
            resource=_text(ref, "resource"),
            subresource=_text(ref, "subresource"),
            namespace=_text(ref, "namespace"),
            name=_text(ref, "name"),
            uid=_text(ref, "uid"),
        ),
        resource_version=_text(ref, "resourceVersion"),
        code=code,
        reason=reason,
        message=message,
        dry_run=dry_run,
        manager_given=bool(manager),
        force=force,
        response_version=_response_version(event),
        pod=pod,
    )


_NO_QUERY: Final = ("", False, False)
_MANAGERS: Final[dict[str, str]] = {}  # `manager_from_user_agent` by User-Agent: a log's clients send few


def _derived_manager(user_agent: str) -> str:
    """Return the field manager of a request that names none (`manager_from_user_agent`), remembered per User-Agent."""
    manager = _MANAGERS.get(user_agent)
    if manager is None:
        if len(_MANAGERS) >= 1024:  # (User-Agents that carry a version or host: the recent ones are all it needs)
            _MANAGERS.clear()
        manager = _MANAGERS[user_agent] = manager_from_user_agent(user_agent)
    return manager


def _query(uri: str) -> tuple[str, bool, bool]:
    """Return what a request URI's query says of the request: (fieldManager, dryRun given, force=true).

    As `parse_qs(urlsplit(uri).query)` reads them (a parameter without a value is not given; the first value counts),
    without building the rest: the parameters are split here, and only the names and values read are unquoted. A URI
    that is not a path (`urlsplit` would read a scheme or host), or has a fragment or characters `urlsplit` removes, is
    split by `urlsplit` (whose errors stand).
    """
    if uri[:1] != "/" or uri[:2] == "//" or "#" in uri or "\t" in uri or "\r" in uri or "\n" in uri:
        query = urlsplit(uri).query
    else:
        query = uri.partition("?")[2]
    manager: str | None = None
    force: str | None = None
    dry_run = False
    for pair in query.split("&"):
        name, equals, value = pair.partition("=")
        if not equals or not value:
            continue
        name = _unquoted(name)
        if name == "fieldManager":
            manager = _unquoted(value) if manager is None else manager
        elif name == "dryRun":
            dry_run = True
        elif name == "force":
            force = _unquoted(value) if force is None else force
    return manager or "", dry_run, force == "true"


def _unquoted(part: str) -> str:
    """Return a query's name or value as `parse_qs` decodes it (`+` a space, %-escapes in UTF-8)."""
    return unquote(part.replace("+", " ")) if "%" in part or "+" in part else part


def _user(event: dict[str, Any]) -> tuple[str, str, str]:
    """Return who made the request: its user, impersonator and pod.

    A tuple (the user the request acted as, the impersonator or "", the authenticated user's pod or "").
    """
    user = event.get("user")
    if not isinstance(user, dict):
        user = {}
    name = _text(user, "username")
    pod = _pod(name, user.get("extra"))
    impersonated = event.get("impersonatedUser")
    if isinstance(impersonated, dict) and _text(impersonated, "username"):
        return _text(impersonated, "username"), name, pod
    return name, "", pod


def _pod(username: str, extra: object) -> str:
    """Return the "namespace/name" of the pod a service account's token is bound to.

    Read from the user's `extra` (a token bound to a pod names it: `authentication.kubernetes.io/pod-name`), in the
    service account's namespace; "" for other users. Only the name is read: the token's credential id and the pod's and
    node's uids stay where they are.
    """
    if not isinstance(extra, dict) or not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return ""
    names = extra.get(POD_NAME_KEY)
    if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str) or not names[0]:
        return ""
    namespace = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")[0]
    return f"{namespace}/{names[0]}" if namespace else ""


def _status(event: dict[str, Any]) -> tuple[int, str, str]:
    """(response code, failure reason, a 409's message) of an event; (0, "", "") when it records no response."""
    status = event.get("responseStatus")
    if not isinstance(status, dict):
        return 0, "", ""
    code = status.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    if code < 300:
        return code, "", ""
    reason = _text(status, "reason")
    if code != 409:
        # Only a 409's message is kept: it names the object, managers and field paths. Other failures' messages
        # (422 Invalid, 403) can quote values, which must not get past the decoder.
        return code, reason, ""
    message = _text(status, "message")
    if not message:  # the API server puts the Status whole in the response body (Request level and above)
        body = event.get("responseObject")
        if isinstance(body, dict) and body.get("kind") == "Status":
            message = _text(body, "message")
    return code, reason, message[:MESSAGE_MAX]


def _response_version(event: dict[str, Any]) -> str:
    """Return the resourceVersion of the object a response returned.

    Only in events at `RequestResponse` level.
    """
    body = event.get("responseObject")
    if not isinstance(body, dict) or body.get("kind") == "Status":
        return ""
    meta = body.get("metadata")
    return _text(meta, "resourceVersion") if isinstance(meta, dict) else ""


def _text(mapping: dict[str, Any], key: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


__all__ = ["AuditError", "AuditStats", "decode_audit", "read_audit_log", "read_audit_logs"]
