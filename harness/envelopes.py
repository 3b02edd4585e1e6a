"""Recorded audit events written into the envelopes of managed clusters' logging services, as those services and
their CLIs publish them: EKS's CloudWatch Logs (`aws logs filter-log-events`, `get-log-events`, `tail`, a
subscription through Firehose to S3 or to an HTTP endpoint), GKE's Cloud Logging (`gcloud logging read`, a
Cloud Storage sink, Pub/Sub) and AKS's Azure Monitor (Event Hubs, a storage account's PT1H.json, the Log Analytics
tables through `az monitor log-analytics query`, the legacy AzureDiagnostics).

Each writer takes the raw events of a log (`audit.k8s.io/v1` dicts in file order) and returns the bytes of one
file. The shapes follow the services' published schemas and their CLIs' printers (indentation, key order, `str()`
of every value for `az`); the CloudWatch writers mix in the group's other streams, which a reader must skip.

GKE's `AuditLog` carries less than the raw event (no request URI, hence no `fieldManager`, `force` or `dryRun`
parameter but for a dry-run label; no user `extra`, no impersonation; objectRef's resourceVersion and uid only
through the request body): `gke_degraded` is the raw event with exactly those losses, which the GKE forms must be
read the same as.
"""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

AUDIT_STREAM = "kube-apiserver-audit-71976ca11bea5d3083393f7d32dab75b"
OTHER_STREAMS = ("authenticator-8c0c570ea5676c62c44d98da6189a02b", "kube-scheduler-bb3ea89d63fd2b9735ba06b144377db6")
LOG_GROUP = "/aws/eks/prod/cluster"
AKS_RESOURCE = (
    "/SUBSCRIPTIONS/C088DC46-D692-42AD-A4B6-9A542D28AD2A/RESOURCEGROUPS/PROD/PROVIDERS/"
    "MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/PROD"
)
BOM = b"\xef\xbb\xbf"

Writer = Callable[[list[dict[str, Any]]], bytes]


def _ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _with_others(events: list[dict[str, Any]]) -> Iterator[tuple[str, int, str]]:
    """(stream, time in ms, message) of the audit events, with a line of another stream of the group after every
    fifth (klog and logfmt text, as EKS writes them)."""
    for index, event in enumerate(events):
        at = _ms(event["stageTimestamp"])
        yield AUDIT_STREAM, at, _compact(event)
        if index % 5 == 0:
            stream = OTHER_STREAMS[index // 5 % len(OTHER_STREAMS)]
            yield stream, at, f'time="{event["stageTimestamp"]}" level=info msg="access granted" username=admin'


def _event_id(index: int) -> str:
    return f"{37_000_000_000_000_000_000_000_000_000_000_000_000_000_000 + index:056d}"


# EKS


def eks_filter_log_events(events: list[dict[str, Any]]) -> bytes:
    """`aws logs filter-log-events --log-group-name /aws/eks/CLUSTER/cluster`: every page merged into one document
    (the CLI's pagination), indent 4, the streams interleaved."""
    items = [
        {
            "logStreamName": stream,
            "timestamp": at,
            "message": message,
            "ingestionTime": at + 850,
            "eventId": _event_id(i),
        }
        for i, (stream, at, message) in enumerate(_with_others(events))
    ]
    return (json.dumps({"events": items, "searchedLogStreams": []}, indent=4, ensure_ascii=False) + "\n").encode()


def eks_get_log_events(events: list[dict[str, Any]]) -> bytes:
    """`aws logs get-log-events --log-stream-name kube-apiserver-audit-...`: one stream's page, no stream names."""
    items = [{"timestamp": _ms(e["stageTimestamp"]), "message": _compact(e), "ingestionTime": 0} for e in events]
    page = {"events": items, "nextForwardToken": "f/3196120912244748858305", "nextBackwardToken": "b/319612091223582"}
    return (json.dumps(page, indent=4, ensure_ascii=False) + "\n").encode()


def _tail_time(at: int, *, short: bool = False) -> str:
    moment = datetime.fromtimestamp(at / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") if short else moment.isoformat(timespec="microseconds")


def eks_tail(events: list[dict[str, Any]]) -> bytes:
    """`aws logs tail /aws/eks/CLUSTER/cluster` (`--format detailed`, the default), colours on as on a terminal."""
    return "".join(
        f"\x1b[32m{_tail_time(at)}\x1b[0m \x1b[36m{stream}\x1b[0m {message}\n"
        for stream, at, message in _with_others(events)
    ).encode()


def eks_tail_short(events: list[dict[str, Any]]) -> bytes:
    """`aws logs tail --format short --log-stream-name-prefix kube-apiserver-audit`: no stream names."""
    return "".join(f"{_tail_time(_ms(e['stageTimestamp']), short=True)} {_compact(e)}\n" for e in events).encode()


def eks_tail_json(events: list[dict[str, Any]]) -> bytes:
    """`aws logs tail --format json`: the time and stream, then a JSON message pretty-printed (indent 4)."""
    out = []
    for stream, at, message in _with_others(events):
        moment = datetime.fromtimestamp(at / 1000, UTC).isoformat()
        try:
            out.append(f"{moment} {stream} \n{json.dumps(json.loads(message), indent=4)}\n")
        except json.JSONDecodeError:
            out.append(f"{moment} {stream} {message}\n")
    return "".join(out).encode()


def _insights_rows(events: list[dict[str, Any]]) -> Iterator[dict[str, str]]:
    """The rows of a CloudWatch Logs Insights query `fields @timestamp, @message, @logStream, @log` over the group
    (no filter on the stream: the group's other streams are in it), as Logs Insights gives them: every value a string,
    the time as `YYYY-MM-DD HH:MM:SS.mmm`."""
    for stream, at, message in _with_others(events):
        moment = datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        yield {"@timestamp": moment, "@message": message, "@logStream": stream, "@log": f"111122223333:{LOG_GROUP}"}


def eks_insights_json(events: list[dict[str, Any]]) -> bytes:
    """`aws logs get-query-results --query-id ...` (`--output json`, the default): the rows as lists of
    `{"field", "value"}`, `@ptr` last, then the query's statistics and status; indent 4."""
    rows = [
        [{"field": k, "value": v} for k, v in row.items()]
        + [{"field": "@ptr", "value": f"CmAKJwojMTExMTIyMjIzMzMz{i}"}]
        for i, row in enumerate(_insights_rows(events))
    ]
    statistics = {"recordsMatched": float(len(rows)), "recordsScanned": float(len(rows)), "bytesScanned": 1e6}
    document = {"results": rows, "statistics": statistics, "status": "Complete"}
    return (json.dumps(document, indent=4, ensure_ascii=False) + "\n").encode()


def eks_insights_csv(events: list[dict[str, Any]]) -> bytes:
    """The Logs Insights console's export of the same query's results (Export results, Download table (CSV)): a
    header row of the fields, quoted where a value holds a comma or a quote."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["@timestamp", "@message", "@logStream", "@log"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(_insights_rows(events))
    return out.getvalue().encode()


def eks_parsed_message(events: list[dict[str, Any]]) -> bytes:
    """CloudWatch Logs events as a log shipper delivers them with the message parsed as JSON (its JSON parser on
    the field): JSON Lines of `{"timestamp", "logStreamName", "message"}`, an audit message an object, another
    stream's a string."""
    lines = []
    for stream, at, message in _with_others(events):
        parsed: object = json.loads(message) if stream == AUDIT_STREAM else message
        lines.append(_compact({"timestamp": at, "logStreamName": stream, "message": parsed}) + "\n")
    return "".join(lines).encode()


def _subscription_messages(events: list[dict[str, Any]], batch: int = 7) -> Iterator[dict[str, Any]]:
    """CloudWatch Logs subscription messages (what Kinesis and Firehose carry): a CONTROL_MESSAGE, then each
    stream's events in DATA_MESSAGEs of `batch`."""
    yield {
        "messageType": "CONTROL_MESSAGE",
        "owner": "CloudwatchLogs",
        "logGroup": "",
        "logStream": "",
        "subscriptionFilters": [],
        "logEvents": [
            {"id": "", "timestamp": 0, "message": "CWL CONTROL MESSAGE: Checking health of destination Firehose."}
        ],
    }
    lines = list(_with_others(events))
    for start in range(0, len(lines), batch):
        chunk = lines[start : start + batch]
        for stream in dict.fromkeys(s for s, _, _ in chunk):
            yield {
                "messageType": "DATA_MESSAGE",
                "owner": "123456789012",
                "logGroup": LOG_GROUP,
                "logStream": stream,
                "subscriptionFilters": ["fightwatch"],
                "logEvents": [
                    {"id": _event_id(start + i), "timestamp": at, "message": message}
                    for i, (s, at, message) in enumerate(chunk)
                    if s == stream
                ],
            }


def eks_firehose_s3(events: list[dict[str, Any]]) -> bytes:
    """An S3 object of a Firehose stream fed by a subscription, without decompression: each record the gzip member
    CloudWatch Logs made, concatenated (no separator inside either)."""
    return b"".join(gzip.compress(_compact(m).encode(), mtime=0) for m in _subscription_messages(events))


def eks_firehose_s3_decompressed(events: list[dict[str, Any]]) -> bytes:
    """The same with Firehose's decompression on: the messages' JSON written one after the other, no delimiter."""
    return "".join(_compact(m) for m in _subscription_messages(events)).encode()


def eks_firehose_http(events: list[dict[str, Any]]) -> bytes:
    """A Firehose HTTP endpoint delivery's body: each record's data a gzipped subscription message, base64."""
    records = [
        {"data": base64.b64encode(gzip.compress(_compact(m).encode(), mtime=0)).decode()}
        for m in _subscription_messages(events)
    ]
    return _compact(
        {"requestId": "ed4acda5-034f-9f42-bba1-f29aea6d7d8f", "timestamp": 1680683311507, "records": records}
    ).encode()


# GKE


def _gke_group(group: str) -> str:
    """The group as methodName spells it: `rbac.authorization.k8s.io` -> `authorization.rbac`, "" -> `core`."""
    if not group:
        return "core"
    return ".".join(reversed(group.removesuffix(".k8s.io").split("."))) if group.endswith(".k8s.io") else group


def _rpc(code: int) -> int:
    return {400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 422: 3, 429: 8, 500: 13, 503: 14, 504: 4}.get(code, 2)


def gke_entry(event: dict[str, Any], project: str = "prod-project") -> dict[str, Any] | None:
    """The LogEntry GKE writes for a completed request (None for the events it has no entry for: other stages,
    non-resource requests)."""
    ref = event.get("objectRef")
    if event["stage"] != "ResponseComplete" or not ref:
        return None
    group = ref.get("apiGroup", "")
    version = ref.get("apiVersion", "v1")
    sub = ref.get("subresource", "")
    method = ".".join(p for p in ("io.k8s", _gke_group(group), version, ref["resource"], sub, event["verb"]) if p)
    path = [group or "core", version]
    if ref.get("namespace") and ref["resource"] != "namespaces":
        path += ["namespaces", ref["namespace"]]
    path.append(ref["resource"])
    if ref.get("name"):
        path += [ref["name"], *([sub] if sub else [])]
    resource_name = "/".join(path)
    status = event.get("responseStatus", {})
    code = status.get("code", 200)
    payload: dict[str, Any] = {
        "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
        "authenticationInfo": {"principalEmail": event["user"]["username"]},
        "authorizationInfo": [{"granted": True, "permission": method, "resource": resource_name}],
        "methodName": method,
        "requestMetadata": {"callerIp": event["sourceIPs"][0], "callerSuppliedUserAgent": event.get("userAgent", "")},
        "resourceName": resource_name,
        "serviceName": "k8s.io",
        "status": {}
        if code < 300
        else {"code": _rpc(code), "message": status.get("message", status.get("reason", ""))},
    }
    if isinstance(event.get("requestObject"), dict):
        payload["request"] = {
            "@type": f"{group or 'core'}.k8s.io/{version}.{event['requestObject'].get('kind', 'Patch')}",
            **event["requestObject"],
        }
    if isinstance(event.get("responseObject"), dict):
        payload["response"] = {
            "@type": f"core.k8s.io/v1.{event['responseObject'].get('kind', '')}",
            **event["responseObject"],
        }
    labels = dict(event.get("annotations", {}))
    if "dryRun" in parse_qs(urlsplit(event.get("requestURI", "")).query):
        labels["command.gke.io/dryRun"] = "All"
    write = event["verb"] not in ("get", "list", "watch")
    return {
        "insertId": event["auditID"],
        "labels": labels,
        "logName": f"projects/{project}/logs/cloudaudit.googleapis.com%2F{'activity' if write else 'data_access'}",
        "operation": {"first": True, "id": event["auditID"], "last": True, "producer": "k8s.io"},
        "protoPayload": payload,
        "receiveTimestamp": event["stageTimestamp"],
        "resource": {
            "labels": {"cluster_name": "prod", "location": "europe-west1", "project_id": project},
            "type": "k8s_cluster",
        },
        "severity": "NOTICE" if code < 400 else "ERROR",
        "timestamp": event["stageTimestamp"],
    }


def _entries(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in map(gke_entry, events) if e is not None]


def gke_degraded(event: dict[str, Any]) -> dict[str, Any] | None:
    """The raw event with what a GKE entry loses: what the GKE forms must be read as."""
    entry = gke_entry(event)
    if entry is None:
        return None
    out = {k: v for k, v in event.items() if k not in ("impersonatedUser",)}
    out["user"] = {"username": event["user"]["username"]}
    query = parse_qs(urlsplit(event.get("requestURI", "")).query)
    out["requestURI"] = "/" + entry["protoPayload"]["resourceName"] + ("?dryRun=All" if "dryRun" in query else "")
    ref = dict(event["objectRef"])
    body = event.get("requestObject")
    meta = body.get("metadata", {}) if isinstance(body, dict) else {}
    for key in ("resourceVersion", "uid"):
        if meta.get(key):
            ref[key] = meta[key]
        else:
            ref.pop(key, None)
    out["objectRef"] = ref
    return out


def gke_gcloud_read(events: list[dict[str, Any]]) -> bytes:
    """`gcloud logging read ... --order=asc --format=json`: one array, indent 2, keys sorted."""
    return (json.dumps(_entries(events), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def gke_gcloud_yaml(events: list[dict[str, Any]]) -> bytes:
    """`gcloud logging read ... --order=asc` (YAML, gcloud's default format): a document an entry, `---` between
    them, keys sorted, block style."""
    return yaml.safe_dump_all(
        _entries(events), default_flow_style=False, sort_keys=True, allow_unicode=True, width=80
    ).encode()


def _proto_names(value: object, *, data: bool = False) -> object:
    """A LogEntry as proto-plus's `to_dict` gives it (`gcloud logging tail`): the fields by their proto names
    (`proto_payload`, `method_name`); the keys of bodies and labels are data, kept."""
    if isinstance(value, list):
        return [_proto_names(v) for v in value]
    if not isinstance(value, dict) or data:
        return value
    out = {}
    for key, item in value.items():
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
        out[name] = _proto_names(item, data=key in ("labels", "request", "response", "metadata"))
    return out


def gke_gcloud_tail(events: list[dict[str, Any]]) -> bytes:
    """`gcloud beta logging tail FILTER` (YAML, gcloud's default format): `---` before every entry, each as proto-plus
    gives it (proto field names, the severity a number), keys sorted."""
    entries = [{**e, "severity": 300} for e in _entries(events)]
    return "".join(
        "---\n" + yaml.safe_dump(_proto_names(e), default_flow_style=False, sort_keys=True, width=80) for e in entries
    ).encode()


def gke_sink(events: list[dict[str, Any]]) -> bytes:
    """A Cloud Storage sink's hourly file: a LogEntry a line."""
    return "".join(_compact(e) + "\n" for e in _entries(events)).encode()


def _pubsub_message(entry: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "attributes": {"logging.googleapis.com/timestamp": entry["timestamp"]},
        "data": base64.b64encode((_compact(entry) + "\n").encode()).decode(),
        "messageId": str(5187581549398349 + index),
        "publishTime": entry["receiveTimestamp"],
    }


def gke_pubsub_push(events: list[dict[str, Any]]) -> bytes:
    """Pub/Sub push bodies of a log sink's topic, one a line."""
    subscription = "projects/prod-project/subscriptions/fightwatch"
    return "".join(
        _compact({"message": _pubsub_message(e, i), "subscription": subscription}) + "\n"
        for i, e in enumerate(_entries(events))
    ).encode()


def gke_pubsub_pull(events: list[dict[str, Any]]) -> bytes:
    """`gcloud pubsub subscriptions pull --format=json`: an array of received messages."""
    pulled = [{"ackId": f"ack-{i}", "message": _pubsub_message(e, i)} for i, e in enumerate(_entries(events))]
    return (json.dumps(pulled, indent=2, sort_keys=True) + "\n").encode()


# AKS


def _aks_record(event: dict[str, Any], category: str = "kube-audit") -> dict[str, Any]:
    return {
        "category": category,
        "operationName": "Microsoft.ContainerService/managedClusters/diagnosticLogs/Read",
        "properties": {
            "containerID": hashlib.sha256(b"apiserver").hexdigest(),
            "log": _compact(event) + "\n",
            "pod": "kube-apiserver-57b5944b45-94w49",
            "stream": "stdout",
        },
        "resourceId": AKS_RESOURCE,
        "time": event["stageTimestamp"],
    }


def _aks_records(events: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The kube-audit records, with a record of another category after every fifth."""
    for index, event in enumerate(events):
        yield _aks_record(event)
        if index % 5 == 0:
            other = _aks_record(event, "kube-apiserver")
            other["properties"]["log"] = "I1126 21:03:26.877194       1 handler.go:286] Adding GroupVersion apps v1\n"
            yield other


def aks_event_hubs(events: list[dict[str, Any]], batch: int = 9) -> bytes:
    """Event Hubs messages (`{"records": [...]}`), one a line, as a consumer saves them."""
    records = list(_aks_records(events))
    return "".join(_compact({"records": records[i : i + batch]}) + "\n" for i in range(0, len(records), batch)).encode()


def aks_event_hubs_document(events: list[dict[str, Any]]) -> bytes:
    """One Event Hubs message body, pretty-printed."""
    return (json.dumps({"records": list(_aks_records(events))}, indent=2) + "\n").encode()


def aks_storage(events: list[dict[str, Any]]) -> bytes:
    """A storage account's PT1H.json: a record a line (JSON Lines since 2018), after a byte-order mark."""
    return BOM + "".join(_compact(r) + "\n" for r in _aks_records(events)).encode()


_AKS_COLUMNS = {
    "Annotations": "annotations",
    "AuditId": "auditID",
    "Level": "level",
    "ObjectRef": "objectRef",
    "RequestObject": "requestObject",
    "RequestReceivedTime": "requestReceivedTimestamp",
    "RequestUri": "requestURI",
    "ResponseObject": "responseObject",
    "ResponseStatus": "responseStatus",
    "SourceIps": "sourceIPs",
    "Stage": "stage",
    "StageReceivedTime": "stageTimestamp",
    "User": "user",
    "UserAgent": "userAgent",
    "Verb": "verb",
}


def _az(value: object) -> str:
    """What `az monitor log-analytics query` prints of a value: str() of it, dynamic columns as JSON text."""
    return _compact(value) if isinstance(value, dict | list) else str(value)


def aks_log_analytics(events: list[dict[str, Any]], table: str = "AKSAudit") -> bytes:
    """`az monitor log-analytics query -w WORKSPACE --analytics-query "AKSAudit | ..." -o json`: rows of the
    resource-specific table, every value a string (null: "None"), keys sorted, indent 2."""
    rows = []
    for event in events:
        row = {column: _az(event.get(key)) for column, key in _AKS_COLUMNS.items()}
        row |= {"PodName": "kube-apiserver-57b5944b45-94w49", "TableName": "PrimaryResult", "Type": table}
        row |= {"TimeGenerated": event["stageTimestamp"], "_ResourceId": AKS_RESOURCE.lower()}
        rows.append(row)
    return (json.dumps(rows, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def aks_azure_diagnostics(events: list[dict[str, Any]]) -> bytes:
    """`az monitor log-analytics query` of the legacy AzureDiagnostics table: the event in log_s."""
    rows = [
        {
            "Category": "kube-audit",
            "ResourceId": AKS_RESOURCE,
            "TableName": "PrimaryResult",
            "TimeGenerated": e["stageTimestamp"],
            "log_s": _compact(e),
        }
        for e in events
    ]
    return (json.dumps(rows, indent=2, sort_keys=True) + "\n").encode()


# The envelopes a recorded log is written into, by name: (envelope, writer). The GKE forms are read as
# `gke_degraded` of the raw events.
WRITERS: dict[str, tuple[str, Writer]] = {
    "eks-filter-log-events": ("eks", eks_filter_log_events),
    "eks-get-log-events": ("eks", eks_get_log_events),
    "eks-tail": ("eks", eks_tail),
    "eks-tail-short": ("eks", eks_tail_short),
    "eks-tail-json": ("eks", eks_tail_json),
    "eks-firehose-s3": ("eks", eks_firehose_s3),
    "eks-firehose-s3-decompressed": ("eks", eks_firehose_s3_decompressed),
    "eks-firehose-http": ("eks", eks_firehose_http),
    "eks-insights-json": ("eks", eks_insights_json),
    "eks-insights-csv": ("eks", eks_insights_csv),
    "eks-parsed-message": ("eks", eks_parsed_message),
    "gke-gcloud-read": ("gke", gke_gcloud_read),
    "gke-gcloud-yaml": ("gke", gke_gcloud_yaml),
    "gke-gcloud-tail": ("gke", gke_gcloud_tail),
    "gke-sink": ("gke", gke_sink),
    "gke-pubsub-push": ("gke", gke_pubsub_push),
    "gke-pubsub-pull": ("gke", gke_pubsub_pull),
    "aks-event-hubs": ("aks", aks_event_hubs),
    "aks-event-hubs-document": ("aks", aks_event_hubs_document),
    "aks-storage": ("aks", aks_storage),
    "aks-log-analytics": ("aks", aks_log_analytics),
    "aks-azure-diagnostics": ("aks", aks_azure_diagnostics),
}


def raw_lines(events: Iterable[dict[str, Any]]) -> bytes:
    return "".join(_compact(e) + "\n" for e in events).encode()


__all__ = ["WRITERS", "gke_degraded", "gke_entry", "raw_lines"]
