"""Fuzz tests of the audit log readers (`watcher.sources.audit`, `watcher.sources.envelopes`) with hypothesis.

Every envelope `harness.envelopes.WRITERS` writes, and raw JSON Lines and EventLists, is fuzzed two ways:

- files the writer makes of a few recorded events (tests/fixtures/audit), then damaged: values replaced with values
  of other types (in the events before writing, and in the records written, down into the JSON texts and base64
  data nested in them), bytes flipped, inserted and deleted, the file cut off, lines duplicated and removed; now
  and then behind a UTF-8 byte-order mark, gzipped, and the gzip stream damaged in turn;
- random JSON documents shaped like each envelope's records (its key names, with values that are mostly of the
  right shape and now and then any JSON value), laid out as JSON Lines, an array, pretty-printed or `}{`-joined.

The properties: `read_audit_log` and `read_audit_logs` (with and without `skip_invalid`, with the envelope found
or asked for) yield Requests or raise `AuditError`, never another exception; `decode_audit` with `skip_bad_items`
(the webhook's path) raises only ValueError; `Opener.events` raises only ValueError for any JSON value; a gzipped
file is read as what `gzip.decompress` makes of it, or, where that finds the stream broken, ends in an AuditError.
The code under test runs with the stack a program has under Python's default recursion limit (hypothesis raises the
limit while it runs a test), so that what recurses as deep as its input nests fails here as it would there.

FIGHTWATCH_FUZZ_EXAMPLES sets the number of examples of each test and of each of its parameters (25 in all); the
default, 100, takes about 12 s. A long run, about 20 minutes on 2 cores (FIGHTWATCH_PURE_PYTHON=1 to test the
modules as Python where they are not compiled):

    FIGHTWATCH_FUZZ_EXAMPLES=8000 PYTHONPATH=. .venv/bin/python -m pytest -p no:cacheprovider -q \
        tests/unit/test_audit_fuzz.py
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gzip
import json
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta, timezone
from pathlib import Path
from types import FrameType
from typing import Any, Final

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.envelopes import WRITERS, Writer, raw_lines
from watcher.detection.requests import Request
from watcher.sources.audit import AuditError, AuditStats, decode_audit, read_audit_log, read_audit_logs
from watcher.sources.envelopes import AUDIT_STREAM_PREFIX, GKE_DRY_RUN_LABEL, TRUNCATED, Envelope, EnvelopeStats, Opener

EXAMPLES: Final = int(os.environ.get("FIGHTWATCH_FUZZ_EXAMPLES", "100"))
FUZZ: Final = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,  # tmp_path: each example writes the same file anew
    ],
)

FIXTURES: Final = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
# The recorded events the files are made of (file, line): a non-resource request, a RequestReceived, a create, a 409 at
# Metadata level and with its bodies, a v1.20 update, a server-side apply's conflict.
SEED_LINES: Final = [
    ("configmap-race.jsonl", 0),
    ("configmap-race.jsonl", 2),
    ("configmap-race.jsonl", 3),
    ("configmap-race.jsonl", 11),
    ("configmap-race.jsonl", 31),
    ("v1.20/configmap-race.jsonl", 9),
    ("apply-stuck.request-response.jsonl", 1),
]
SEEDS: Final = [json.loads((FIXTURES / name).read_text().splitlines()[line]) for name, line in SEED_LINES]
BOM: Final = b"\xef\xbb\xbf"
GZIP_MAGIC: Final = b"\x1f\x8b"


def _event_list(events: list[dict[str, Any]]) -> bytes:
    """An EventList as the webhook backend posts it, pretty-printed (`kubectl get --raw` of a saved list)."""
    document = {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": events}
    return (json.dumps(document, indent=2) + "\n").encode()


# Every form of file, by name: the envelopes' writers, and raw events.
FORMATS: Final[dict[str, Writer]] = {name: writer for name, (_, writer) in WRITERS.items()} | {
    "raw-lines": raw_lines,
    "raw-event-list": _event_list,
}


# JSON values


# A string that `_dump` writes as arrays nested 1000 deep (orjson takes 1024 levels; Python's recursion limit is
# 1000 frames).
DEEP: Final = "\x01deep\x01"
DEEP_JSON: Final = json.dumps(DEEP)
DEEP_TEXT: Final = "[" * 1000 + "]" * 1000

KEYS: Final = (
    # raw events
    "kind", "apiVersion", "items", "level", "auditID", "stage", "requestURI", "verb", "user", "username", "extra",
    "impersonatedUser", "userAgent", "objectRef", "resource", "namespace", "name", "resourceVersion", "responseStatus",
    "code", "reason", "responseObject", "metadata", "stageTimestamp", "requestReceivedTimestamp",
    # EKS
    "events", "message", "logStreamName", "timestamp", "messageType", "logStream", "logEvents", "records", "data",
    # GKE
    "protoPayload", "serviceName", "methodName", "resourceName", "status", "operation", "last", "labels",
    # AKS
    "category", "Category", "properties", "log", "AuditId", "Type", "log_s", "Stage", "ObjectRef", "TimeGenerated",
)  # fmt: skip
STAGES: Final = ("ResponseComplete", "Panic", "RequestReceived", "ResponseStarted", "Unknown", "")
STREAMS: Final = (
    f"{AUDIT_STREAM_PREFIX}-71976ca1",
    AUDIT_STREAM_PREFIX,
    "authenticator-8c0c",
    "kube-scheduler",
    "",
    "-",
)
TIMES: Final = (
    "2026-11-26T21:05:30.951836Z",
    "2026-11-26T21:05:30Z",
    "2026-11-26T21:05:30.951836+02:00",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59.999999-14:00",
    "2026-11-26T21:05:30.Z",
    "2026-11-26T21:05:30.e5Z",
    "2026-11-26T21:05:30.9e999Z",
    "2026-11-26T21:05:30,5Z",
    "2026-13-26T21:05:30Z",
    "2026-11-26",
    "Z" * 20,
)
INTERESTING: Final = (
    "",
    "None",
    "Event",
    "EventList",
    "Status",
    "audit.k8s.io/v1",
    "audit.k8s.io/v1beta1",
    *STAGES,
    *STREAMS,
    *TIMES,
    "DATA_MESSAGE",
    "CONTROL_MESSAGE",
    "k8s.io",
    "kube-audit",
    "kube-audit-admin",
    "AKSAudit",
    "AzureDiagnostics",
    "io.k8s.core.v1.configmaps.update",
    "io.k8s.apps.v1.deployments.status.patch",
    "core/v1/namespaces/a/configmaps/b",
    "/api/v1/namespaces/a/configmaps/b?fieldManager=m&force=true&dryRun=All",
    "http://[::1/x",
    "system:serviceaccount:a:b",
    "{",
    "[]",
    '{"kind":"Event"}',
    "H4sIAAAAAAAA/w==",  # base64 of a gzip header without a body
    "e30=",  # base64 of {}
    f'{{"auditID":"a1"{TRUNCATED}',
    "\ud800",
    "\x00",
    DEEP,
)
STRINGS: Final = st.sampled_from(INTERESTING) | st.text(max_size=12)
INTEGERS: Final = st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from([0, 200, 300, 409, 500, 2**63, -1])
FLOATS: Final = st.floats(allow_nan=False, allow_infinity=False)
KEY: Final = st.sampled_from(KEYS) | st.text(max_size=6)
SCALARS: Final = st.none() | st.booleans() | INTEGERS | FLOATS | STRINGS
JSON: Final = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEY, inner, max_size=4), max_leaves=12
)
# A value of each JSON type, by Python type: a value is replaced with one of another type.
TYPED: Final[dict[type, st.SearchStrategy[Any]]] = {
    type(None): st.none(),
    bool: st.booleans(),
    int: INTEGERS,
    float: FLOATS,
    str: STRINGS,
    list: st.lists(JSON, max_size=3),
    dict: st.dictionaries(KEY, JSON, max_size=3),
}


def _dump(value: object, *, indent: int | None = None) -> str:
    """JSON text of a value (ASCII: lone surrogates escaped), DEEP written as deeply nested arrays."""
    separators = (",", ": ") if indent else (",", ":")
    return json.dumps(value, indent=indent, separators=separators).replace(DEEP_JSON, DEEP_TEXT)


@dataclass(frozen=True)
class Nested:
    """Arrays in arrays, `depth` deep (as a record: hypothesis prints this, not the arrays)."""

    depth: int

    def value(self) -> list[Any]:
        value: list[Any] = []
        for _ in range(self.depth):
            value = [value]
        return value


def _mostly(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The strategy, or now and then (and shrinking towards the strategy) any JSON value in its place."""
    return st.integers(0, 5).flatmap(lambda n: JSON if n == 5 else strategy)


# Values nested in other values: JSON texts (a CloudWatch message, AKS's properties.log, dynamic columns) and
# base64 data (Firehose records, gzipped or not; Pub/Sub messages). A path steps into them with INSIDE.
INSIDE: Final = object()
ValuePath = tuple[Any, ...]


def _inner(text: str) -> tuple[str, Any] | None:
    """(how the string encodes it, the JSON value) of a string that holds a JSON object or array, else None."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return "json", json.loads(text)
        except (ValueError, RecursionError):  # (DEEP in DEEP)
            return None
    if len(text) < 8 or len(text) % 4:
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    packed = data[:2] == GZIP_MAGIC
    try:
        value = json.loads(gzip.decompress(data) if packed else data)
    except (ValueError, OSError, EOFError, zlib.error, RecursionError):
        return None
    return ("base64-gzip" if packed else "base64"), value


def _held(text: str) -> tuple[str, Any]:
    """`_inner` of a string a path steps INSIDE of (`_paths` steps only into strings that hold JSON)."""
    inner = _inner(text)
    assert inner is not None
    return inner


def _outer(how: str, value: object, original: str) -> str:
    """The string that holds `value` the way `original` held its value."""
    text = _dump(value)
    if how == "json":
        return text + ("\n" if original.endswith("\n") else "")
    data = text.encode()
    return base64.b64encode(gzip.compress(data, mtime=0) if how == "base64-gzip" else data).decode()


def _paths(value: object, path: ValuePath = ()) -> Iterator[ValuePath]:
    """The paths of every value inside a value (itself first), into the JSON its strings hold too; 40 steps deep at
    most (DEEP's arrays are not walked)."""
    yield path
    if len(path) >= 40:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))
    elif isinstance(value, str) and (inner := _inner(value)) is not None:
        yield from _paths(inner[1], (*path, INSIDE))


def _at(value: Any, path: ValuePath) -> Any:
    for step in path:
        value = _held(value)[1] if step is INSIDE else value[step]
    return value


def _replaced(value: Any, path: ValuePath, new: object) -> Any:
    """A copy of the value with the value at `path` replaced."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if step is INSIDE:
        how, inner = _held(value)
        return _outer(how, _replaced(inner, rest, new), value)
    copy = list(value) if isinstance(value, list) else dict(value)
    copy[step] = _replaced(value[step], rest, new)
    return copy


@st.composite
def _retyped(draw: st.DrawFn, value: Any) -> Any:
    """The value with one value inside it (maybe itself) replaced with a value of another JSON type."""
    paths = list(_paths(value))
    path = paths[draw(st.integers(0, len(paths) - 1))]
    old = _at(value, path)
    kind = draw(st.sampled_from([t for t in TYPED if type(old) is not t]))
    return _replaced(value, path, draw(TYPED[kind] | st.just(DEEP)))


# Damaged files


def _json_texts(text: str) -> list[tuple[int, int, Any]]:
    """(start, end, value) of the JSON objects and arrays in a text, outermost only, in order."""
    decoder = json.JSONDecoder()
    out: list[tuple[int, int, Any]] = []
    position = 0
    while True:
        starts = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
        if not starts:
            return out
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        except RecursionError:  # (DEEP in DEEP: the texts before it will do)
            return out
        out.append((start, end, value))
        position = end


@st.composite
def _retyped_record(draw: st.DrawFn, data: bytes) -> bytes:
    """The file with a value inside one of its records replaced with a value of another type; the record written
    back as it was (on one line, or pretty-printed)."""
    text = data.decode("utf-8", "surrogateescape")
    texts = _json_texts(text)
    if not texts:
        return data
    start, end, value = texts[draw(st.integers(0, len(texts) - 1))]
    indent = 2 if "\n" in text[start:end] else None
    try:
        new = _dump(draw(_retyped(value)), indent=indent)
    except RecursionError:  # (DEEP in DEEP)
        return data
    return (text[:start] + new + text[end:]).encode("utf-8", "surrogateescape")


# Bytes worth inserting: JSON's structure, encodings and their magic, numbers out of range, bad UTF-8.
TOKENS: Final = (
    b"\x00", b"\xff", BOM, GZIP_MAGIC, b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"\n", b"\r\n", b" ",
    b"}{", b"}\n{", b"{\n", b"\n}\n", b"NaN", b"Infinity", b"-", b"1e999", b"18446744073709551616", b'"\\ud800"',
    b"\\u0000", b"\xc3", b"\xed\xa0\x80", b"null", b"\x1b[32m", b"2026-11-26T21:05:30Z ", DEEP_TEXT.encode(),
)  # fmt: skip


def _flip(draw: st.DrawFn, data: bytes) -> bytes:
    if not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]


def _cut(draw: st.DrawFn, data: bytes) -> bytes:
    return data[: draw(st.integers(0, len(data)))]


def _insert(draw: st.DrawFn, data: bytes) -> bytes:
    at = draw(st.integers(0, len(data)))
    return data[:at] + draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=8)) + data[at:]


def _delete(draw: st.DrawFn, data: bytes) -> bytes:
    at = draw(st.integers(0, len(data)))
    return data[:at] + data[at + draw(st.integers(1, 32)) :]


def _duplicate_line(draw: st.DrawFn, data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    if not lines:
        return data
    at = draw(st.integers(0, len(lines) - 1))
    return b"".join([*lines[: at + 1], *lines[at:]])


def _remove_line(draw: st.DrawFn, data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    if not lines:
        return data
    at = draw(st.integers(0, len(lines) - 1))
    return b"".join(lines[:at] + lines[at + 1 :])


def _retype(draw: st.DrawFn, data: bytes) -> bytes:
    return draw(_retyped_record(data))


Damage = Callable[[st.DrawFn, bytes], bytes]
DAMAGES: Final[list[Damage]] = [_retype, _flip, _cut, _insert, _delete, _duplicate_line, _remove_line]
BYTE_DAMAGES: Final[list[Damage]] = [_flip, _cut, _insert, _delete]


@st.composite
def _damaged(draw: st.DrawFn, data: bytes, damages: list[Damage], most: int) -> bytes:
    for _ in range(draw(st.integers(0, most))):
        data = draw(st.sampled_from(damages))(draw, data)
    return data


@st.composite
def _files(draw: st.DrawFn, name: str) -> tuple[bytes, bytes]:
    """(the content, the file: the content, maybe gzipped and the gzip damaged) of a damaged file of a form."""
    write = FORMATS[name]
    events = [SEEDS[i] for i in draw(st.lists(st.integers(0, len(SEEDS) - 1), min_size=1, max_size=4))]
    if draw(st.booleans()):  # a value of the events replaced before they are written
        retyped = draw(_retyped(events))
        try:
            content = write(retyped)
        except Exception:  # (the writer needs what it reads of an event): the events as they are
            content = write(events)
    else:
        content = write(events)
    content = draw(_damaged(content, DAMAGES, 3))
    if draw(st.booleans()):
        content = BOM + content
    data = content
    if draw(st.booleans()):
        data = draw(_damaged(gzip.compress(content, mtime=0), BYTE_DAMAGES, 2))
    return content, data


# Random records shaped like each envelope's


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """An object of the keys given (the optional ones or not), each value mostly of its strategy's shape."""
    return st.fixed_dictionaries(
        {k: _mostly(v) for k, v in required.items()}, optional={k: _mostly(v) for k, v in (optional or {}).items()}
    )


def _some(*values: object) -> st.SearchStrategy[Any]:
    return st.sampled_from(values) | STRINGS


OFFSETS: Final = st.integers(-1439, 1439).map(lambda minutes: timezone(timedelta(minutes=minutes)))
TIME: Final = (
    st.sampled_from(TIMES)
    | st.datetimes(timezones=OFFSETS).map(lambda moment: moment.isoformat())
    | st.datetimes(timezones=st.just(UTC)).map(lambda moment: moment.isoformat().replace("+00:00", "Z"))
)
OBJECT_REF: Final = _object(
    {"resource": _some("configmaps", "namespaces", "deployments")},
    {
        "namespace": _some("a", "kube-system"),
        "name": _some("b", "a"),
        "apiGroup": _some("", "apps", "rbac.authorization.k8s.io"),
        "apiVersion": _some("v1", "v1beta1"),
        "subresource": _some("status", "scale"),
        "resourceVersion": _some("123"),
        "uid": STRINGS,
    },
)
USER: Final = _object(
    {"username": _some("system:serviceaccount:a:b", "system:serviceaccount::b", "admin")},
    {"extra": _object({"authentication.kubernetes.io/pod-name": st.lists(STRINGS, max_size=2)})},
)
STATUS: Final = _object(
    {"code": st.sampled_from([200, 201, 300, 404, 409, 500]) | INTEGERS},
    {"reason": _some("Conflict", "AlreadyExists"), "message": STRINGS, "status": _some("Failure")},
)
RAW_EVENT: Final = _object(
    {"kind": _some("Event"), "apiVersion": _some("audit.k8s.io/v1", "audit.k8s.io/v1beta1")},
    {
        "level": _some("Metadata", "RequestResponse"),
        "auditID": STRINGS,
        "stage": _some(*STAGES),
        "requestURI": _some("/api/v1/namespaces/a/configmaps/b?fieldManager=m&force=true&dryRun=All", "http://[::1"),
        "verb": _some("get", "update", "patch", "create"),
        "user": USER,
        "impersonatedUser": USER,
        "userAgent": _some("kubectl/v1.30.0 (linux/amd64)", "\x00/x"),
        "objectRef": OBJECT_REF,
        "responseStatus": STATUS,
        "responseObject": _object(
            {"kind": _some("Status", "ConfigMap")},
            {"metadata": _object({"resourceVersion": STRINGS}), "message": STRINGS, "code": INTEGERS},
        ),
        "requestReceivedTimestamp": TIME,
        "stageTimestamp": TIME,
        "annotations": st.dictionaries(STRINGS, STRINGS, max_size=2),
    },
)
EVENT_LIST: Final = _object(
    {"kind": st.just("EventList"), "items": st.lists(_mostly(RAW_EVENT), max_size=3)},
    {"apiVersion": _some("audit.k8s.io/v1")},
)
# An audit event as a JSON text: whole, or cut off where CloudWatch Logs cuts messages, or any text.
EVENT_TEXT: Final = (
    RAW_EVENT.map(_dump)
    | RAW_EVENT.map(lambda event: _dump(event)[:40] + TRUNCATED)
    | RAW_EVENT.map(lambda event: _dump(event, indent=4) + "\n")
    | STRINGS
)

CLOUDWATCH_EVENT: Final = _object(
    {"message": EVENT_TEXT},
    {"logStreamName": _some(*STREAMS), "timestamp": INTEGERS, "ingestionTime": INTEGERS, "eventId": STRINGS},
)
SUBSCRIPTION: Final = _object(
    {"messageType": _some("DATA_MESSAGE", "CONTROL_MESSAGE")},
    {
        "logStream": _some(*STREAMS),
        "logGroup": _some("/aws/eks/prod/cluster"),
        "logEvents": st.lists(_object({"message": EVENT_TEXT}, {"id": STRINGS, "timestamp": INTEGERS}), max_size=3),
    },
)


def _base64(data: bytes, *, packed: bool) -> str:
    return base64.b64encode(gzip.compress(data, mtime=0) if packed else data).decode()


FIREHOSE_DATA: Final = (
    st.builds(_base64, SUBSCRIPTION.map(lambda m: _dump(m).encode()), packed=st.booleans())
    | st.builds(
        _base64,
        st.lists(EVENT_TEXT, max_size=3).map(lambda t: "\n".join(t).encode(errors="surrogatepass")),
        packed=st.booleans(),
    )
    | st.builds(_base64, st.binary(max_size=16), packed=st.booleans())
    | st.builds(_base64, st.binary(max_size=16).map(lambda junk: gzip.compress(junk)[:-3]), packed=st.just(False))
    | STRINGS
)
FIREHOSE_RECORD: Final = _object({"data": FIREHOSE_DATA})
EKS: Final = st.one_of(
    CLOUDWATCH_EVENT,
    _object({"events": st.lists(_mostly(CLOUDWATCH_EVENT), max_size=3)}, {"nextForwardToken": STRINGS}),
    SUBSCRIPTION,
    _object({"records": st.lists(_mostly(FIREHOSE_RECORD), max_size=3)}, {"requestId": STRINGS, "timestamp": INTEGERS}),
    FIREHOSE_RECORD,
)
# Lines of `aws logs tail`: TIME [STREAM] MESSAGE (colours, a stream alone before a pretty-printed message).
TAIL_LINE: Final = st.builds(
    lambda colour, time, stream, message: f"{colour}{time}{colour} {stream}{message}".encode(errors="surrogatepass"),
    st.sampled_from(["", "\x1b[32m", "\x1b[0m"]),
    TIME | STRINGS,
    st.sampled_from(STREAMS).map(lambda stream: f"{stream} ") | st.just(""),
    EVENT_TEXT,
) | st.binary(max_size=40)

METHOD: Final = st.lists(
    st.sampled_from(["io", "k8s", "core", "apps", "v1", "v1beta1", "configmaps", "namespaces", "status", "update", ""]),
    max_size=7,
).map(".".join) | _some("io.k8s.core.v1.configmaps.update", "io.k8s.apps.v1.deployments.status.patch")
RESOURCE_NAME: Final = st.lists(
    st.sampled_from(["core", "apps", "v1", "namespaces", "a", "configmaps", "b", "status", ""]), max_size=7
).map("/".join) | _some("core/v1/namespaces/a/configmaps/b", "core/v1/namespaces/a")
AUDIT_LOG: Final = _object(
    {"serviceName": _some("k8s.io", "container.googleapis.com")},
    {
        "methodName": METHOD,
        "resourceName": RESOURCE_NAME,
        "status": _object({}, {"code": st.integers(-1, 17) | INTEGERS, "message": _some("x already exists")}),
        "authenticationInfo": _object({"principalEmail": STRINGS}),
        "requestMetadata": _object({}, {"callerSuppliedUserAgent": STRINGS, "callerIp": STRINGS}),
        "request": _object({}, {"metadata": _object({}, {"resourceVersion": STRINGS, "uid": STRINGS})}),
        "response": _object(
            {"kind": _some("Status", "ConfigMap")},
            {"code": INTEGERS, "reason": STRINGS, "message": STRINGS, "status": STRINGS},
        ),
    },
)
LOG_ENTRY: Final = _object(
    {"protoPayload": AUDIT_LOG},
    {
        "operation": _object({}, {"id": STRINGS, "first": st.booleans(), "last": st.booleans()}),
        "labels": st.dictionaries(st.just(GKE_DRY_RUN_LABEL) | STRINGS, STRINGS, max_size=2),
        "timestamp": TIME,
        "receiveTimestamp": TIME,
        "insertId": STRINGS,
    },
)
PUBSUB_MESSAGE: Final = _object(
    {"data": LOG_ENTRY.map(lambda e: _base64(_dump(e).encode(), packed=False)) | FIREHOSE_DATA},
    {"messageId": STRINGS, "attributes": st.dictionaries(STRINGS, STRINGS, max_size=2)},
)
GKE: Final = st.one_of(
    LOG_ENTRY,
    _object({"message": PUBSUB_MESSAGE}, {"subscription": STRINGS}),
    st.lists(_mostly(_object({"message": PUBSUB_MESSAGE}, {"ackId": STRINGS})), max_size=3),
    st.lists(_mostly(LOG_ENTRY), max_size=3),
)

AKS_CATEGORY: Final = _some("kube-audit", "kube-audit-admin", "kube-apiserver", "guard")
AKS_PROPERTIES: Final = _object({"log": EVENT_TEXT | RAW_EVENT}, {"pod": STRINGS, "stream": _some("stdout")})
AKS_RECORD: Final = st.one_of(
    _object({"category": AKS_CATEGORY, "properties": AKS_PROPERTIES | AKS_PROPERTIES.map(_dump)}, {"time": TIME}),
    _object({"Category": AKS_CATEGORY, "properties": AKS_PROPERTIES}),
)


def _column(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A dynamic column: an object, or its JSON text, or "None" (null as `az` prints it)."""
    return strategy | strategy.map(_dump) | st.just("None")


AKS_ROW: Final = _object(
    {"AuditId": STRINGS},
    {
        "Type": _some("AKSAudit", "AKSAuditAdmin", "AzureDiagnostics"),
        "Stage": _some(*STAGES),
        "Verb": _some("update"),
        "RequestUri": STRINGS,
        "User": _column(USER),
        "ImpersonatedUser": _column(USER),
        "ObjectRef": _column(OBJECT_REF),
        "ResponseStatus": _column(STATUS),
        "ResponseObject": _column(JSON),
        "UserAgent": STRINGS,
        "StageReceivedTime": TIME,
        "TimeGenerated": TIME,
    },
)
AKS: Final = st.one_of(
    AKS_RECORD,
    _object({"records": st.lists(_mostly(AKS_RECORD), max_size=3)}),
    AKS_ROW,
    st.lists(_mostly(AKS_ROW), max_size=3),
    _object({"log_s": EVENT_TEXT}, {"Category": AKS_CATEGORY, "category": AKS_CATEGORY, "ResourceId": STRINGS}),
)
SHAPED: Final = {"raw": RAW_EVENT | EVENT_LIST, "eks": EKS, "gke": GKE, "aks": AKS}
ANY_RECORD: Final = st.one_of(*SHAPED.values(), JSON)
NESTED: Final = st.builds(Nested, st.integers(0, 3000))  # deeper than any parser lets through


def _layout(records: list[Any], layout: str) -> bytes:
    """Records written as a file: JSON Lines, an array, pretty-printed one after the other, `}{`-joined, or YAML
    documents as gcloud prints them; a bytes record (a line of `aws logs tail`) as it is, on a line of its own."""
    if layout == "array":
        return (_dump([r for r in records if not isinstance(r, bytes)], indent=2) + "\n").encode()
    if layout == "yaml":
        documents = [r for r in records if not isinstance(r, bytes)]
        return yaml.safe_dump_all(documents, default_flow_style=False, sort_keys=True, allow_unicode=True).encode()
    texts = [
        r if isinstance(r, bytes) else _dump(r, indent=2 if layout == "pretty" else None).encode() for r in records
    ]
    return b"".join(texts) if layout == "joined" else b"".join(text + b"\n" for text in texts)


# The properties


@contextlib.contextmanager
def _stack_of_a_program() -> Iterator[None]:
    """The frames a program has free under Python's default recursion limit (1000), which hypothesis raises by 2000
    while it runs a test: what recurses as deep as its input nests must fail here as it would there."""
    limit = sys.getrecursionlimit()
    depth = 0
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    sys.setrecursionlimit(depth + 950)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)  # (hypothesis's own, which it checks when the example ends)


Outcome = tuple[list[str], bool]  # the audit ids of the requests read, and whether an AuditError ended the reading


def _outcome(path: Path, *, skip_invalid: bool = False, envelope: Envelope | None = None) -> Outcome:
    """Reading the file yields Requests or raises AuditError (anything else is raised)."""
    ids: list[str] = []
    with _stack_of_a_program():
        try:
            for request in read_audit_log(str(path), stats=AuditStats(), skip_invalid=skip_invalid, envelope=envelope):
                assert isinstance(request, Request)
                ids.append(request.audit_id)
        except AuditError:
            return ids, True
    return ids, False


def _read(path: Path, envelope: Envelope | None = None) -> Outcome:
    """Reading the file yields Requests or raises AuditError: with and without skip_invalid, and in `envelope`. The
    outcome of the plain reading."""
    if envelope is not None:
        _outcome(path, skip_invalid=True, envelope=envelope)
    _outcome(path, skip_invalid=True)
    return _outcome(path)


def _decode(body: bytes) -> None:
    """The webhook's decoding of a body raises only ValueError."""
    with contextlib.suppress(ValueError), _stack_of_a_program():
        for request in decode_audit(body.strip(), AuditStats(), skip_bad_items=True):
            assert isinstance(request, Request)


def _write(directory: Path, data: bytes, name: str = "audit") -> Path:
    path = directory / (f"{name}.jsonl.gz" if data[:2] == GZIP_MAGIC else f"{name}.jsonl")
    path.write_bytes(data)
    return path


def _gunzipped(data: bytes) -> bytes | None:
    """What gzip makes of the data, None where it finds the stream broken."""
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return None


@pytest.mark.parametrize("name", sorted(FORMATS))
@FUZZ
@given(data=st.data())
def test_a_damaged_file_is_read_or_refused_with_an_audit_error(name: str, data: st.DataObject, tmp_path: Path) -> None:
    content, file = data.draw(_files(name), label="(content, file)")
    outcome = _read(_write(tmp_path, file), Envelope(WRITERS[name][0] if name in WRITERS else "raw"))
    if file[:2] == GZIP_MAGIC:  # a gzip stream: read as what gzip makes of it, or reported broken
        unpacked = _gunzipped(file)
        if unpacked is None:
            assert outcome[1], "a broken gzip stream was read without an AuditError"
        elif unpacked[:2] != GZIP_MAGIC:  # (not gzipped twice)
            assert outcome == _outcome(_write(tmp_path, unpacked, "unpacked"))
    _decode(content)
    for line in content.splitlines():
        _decode(line)


@pytest.mark.parametrize("envelope", list(SHAPED))
@FUZZ
@given(data=st.data())
def test_random_records_shaped_like_an_envelope_are_read_or_refused(
    envelope: str, data: st.DataObject, tmp_path: Path
) -> None:
    shaped = SHAPED[envelope] | TAIL_LINE if envelope == "eks" else SHAPED[envelope]
    records = data.draw(st.lists(shaped, min_size=1, max_size=4), label="records")
    layout = data.draw(st.sampled_from(["lines", "array", "pretty", "joined", "yaml"]), label="layout")
    content = _layout(records, layout)
    if data.draw(st.booleans(), label="gzipped"):
        content = gzip.compress(content, mtime=0)
    path = _write(tmp_path, content)
    _read(path, Envelope(envelope))
    with contextlib.suppress(AuditError), _stack_of_a_program():  # (two files merged: the same one twice)
        for request in read_audit_logs([str(path), str(path)], stats=AuditStats()):
            assert isinstance(request, Request)
    opener = Opener(EnvelopeStats())
    for record in records:
        _decode(record if isinstance(record, bytes) else _dump(record).encode())
        with contextlib.suppress(ValueError), _stack_of_a_program():
            assert isinstance(opener.line_events(record) if isinstance(record, bytes) else opener.events(record), list)


@FUZZ
@given(
    records=st.lists(ANY_RECORD | NESTED, min_size=1, max_size=3),
    envelope=st.none() | st.sampled_from(Envelope),
)
def test_opening_any_json_value_raises_only_value_errors(
    records: list[Any | Nested], envelope: Envelope | None
) -> None:
    opener = Opener(EnvelopeStats(), envelope=envelope)  # (one opener: the records of one file)
    for record in records:
        value = record.value() if isinstance(record, Nested) else record
        with contextlib.suppress(ValueError), _stack_of_a_program():
            assert isinstance(opener.events(value), list)


@FUZZ
@given(body=st.binary(max_size=64) | st.sampled_from(TOKENS) | ANY_RECORD.map(lambda r: _dump(r).encode()))
def test_decoding_any_body_raises_only_value_errors(body: bytes) -> None:
    _decode(body)
    with contextlib.suppress(ValueError), _stack_of_a_program():
        assert isinstance(Opener(EnvelopeStats()).line_events(body), list)
