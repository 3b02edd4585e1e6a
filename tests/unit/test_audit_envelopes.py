"""Every recorded audit scenario, written into every envelope of EKS, GKE and AKS (`harness/envelopes.py`, after the
services' published schemas and their CLIs' printers), gives the findings of its raw form: the same objects, users,
User-Agents and managers. GKE's entries carry less than the raw event, so its forms are held to the raw events with
those losses (`gke_degraded`), and what the losses cost is stated. Then bad input in envelopes."""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.envelopes import WRITERS, gke_degraded, raw_lines
from tests.unit.audit_recordings import CURRENT, LEVELS, SCENARIOS, V1_20
from watcher.config import load_config
from watcher.offline import Analysis
from watcher.rendering.output import write_json
from watcher.sources.audit import AuditError, AuditStats, decode_audit, read_audit_log
from watcher.sources.envelopes import Envelope, EnvelopeStats, Opener

# Every recorded log: each release's scenarios at each of its audit levels, as `fightwatch audit` is tested on them.
LOGS = {
    f"{'current' if recording is CURRENT else 'v1.20'}-{level}": [
        recording / f"{s}.{level}.jsonl" for s in SCENARIOS[recording]
    ]
    for recording in (CURRENT, V1_20)
    for level in LEVELS[recording]
}


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def analysed(paths: list[Path], envelope: Envelope | None = None) -> tuple[list[dict[str, Any]], Analysis]:
    analysis = Analysis(load_config(None), requests=[str(p) for p in paths], envelope=envelope)
    analysis.run(skip_invalid=False)
    out = io.BytesIO()
    write_json(analysis.findings(), out)
    return sorted((orjson.loads(line) for line in out.getvalue().splitlines()), key=lambda f: f["id"]), analysis


@pytest.fixture(scope="module")
def raw_findings(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], list[dict[str, Any]]]:
    """The findings of each set of raw logs, as they are and with GKE's losses."""
    out: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    folder = tmp_path_factory.mktemp("gke-degraded")
    for name, paths in LOGS.items():
        out[name, False] = analysed(paths)[0]
        degraded = []
        for path in paths:
            target = folder / f"{name}-{path.name}"
            target.write_bytes(raw_lines(e for e in map(gke_degraded, events(path)) if e is not None))
            degraded.append(target)
        out[name, True] = analysed(degraded)[0]
    return out


@pytest.mark.parametrize("logs", list(LOGS))
@pytest.mark.parametrize("form", list(WRITERS))
def test_every_scenario_in_every_envelope_gives_the_findings_of_its_raw_form(
    form: str, logs: str, tmp_path: Path, raw_findings: dict[tuple[str, bool], list[dict[str, Any]]]
) -> None:
    envelope, write = WRITERS[form]
    files = []
    for path in LOGS[logs]:
        target = tmp_path / f"{path.stem}.{form}"
        target.write_bytes(write(events(path)))
        files.append(target)
    found, analysis = analysed(files)
    assert found == raw_findings[logs, envelope == "gke"]
    assert found  # (the scenarios have findings: the comparison compares something)
    assert set(analysis.audit.envelopes.records) == {Envelope(envelope)}
    assert analysis.audit.read.skipped_invalid == 0
    # The format told by each file is the one --audit-format names.
    assert analysed(files, Envelope(envelope))[0] == found


def test_what_gke_entries_lose_costs_no_finding_but_no_op_writes_at_metadata_level(
    raw_findings: dict[tuple[str, bool], list[dict[str, Any]]],
) -> None:
    for logs in LOGS:
        raw = {(f["type"], f["object"]["namespace"]) for f in raw_findings[logs, False]}
        gke = {(f["type"], f["object"]["namespace"]) for f in raw_findings[logs, True]}
        # Without a request body, an entry carries no resourceVersion: two writes of one version are not told.
        lost = {("noop_writes", "noop-loop")} if logs.endswith("-metadata") else set()
        if logs == "v1.20-metadata":  # v1.20 logs no 409 message at Metadata level: only `fieldManager` told an applier
            lost.add(("apply_conflict", "apply-stuck"))
        assert raw - gke == lost, logs
        assert gke <= raw


def test_writers_keep_their_users_and_user_agents_in_gke_entries_but_not_their_pods(
    raw_findings: dict[tuple[str, bool], list[dict[str, Any]]],
) -> None:
    def clients(findings: list[dict[str, Any]], *, pods: bool) -> set[tuple[Any, ...]]:
        return {
            (
                f["type"],
                f["object"]["namespace"],
                f["object"]["name"],
                c["user"],
                c["user_agent"],
                c["pod"] if pods else None,
            )
            for f in findings
            for c in f.get("clients", [])
        }

    raw, gke = raw_findings["current-metadata", False], raw_findings["current-metadata", True]
    assert clients(gke, pods=False) <= clients(raw, pods=False)
    assert any(c[-1] for c in clients(raw, pods=True))  # the raw events name pods ...
    assert not any(c[-1] for c in clients(gke, pods=True))  # ... GKE's entries do not


def test_records_without_audit_events_are_skipped_and_counted_by_stream_and_category(tmp_path: Path) -> None:
    logs = events(CURRENT / "rmw-fight.metadata.jsonl")
    counts = {}
    for form in ("eks-filter-log-events", "eks-firehose-s3", "aks-storage"):
        path = tmp_path / form
        path.write_bytes(WRITERS[form][1](logs))
        stats = AuditStats()
        assert list(read_audit_log(str(path), stats=stats))
        counts[form] = dict(stats.envelopes.skipped)
    others = (len(logs) + 4) // 5
    assert counts["eks-filter-log-events"] == {
        "EKS stream authenticator": (others + 1) // 2,
        "EKS stream kube-scheduler": others // 2,
    }
    assert counts["eks-firehose-s3"]["EKS CONTROL_MESSAGE"] == 1
    assert counts["aks-storage"] == {"AKS category kube-apiserver": others}


def _one(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))


EVENT = events(CURRENT / "rmw-fight.metadata.jsonl")[1]


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (
            {"logStreamName": "kube-apiserver-audit-71976ca1", "timestamp": 1, "message": "I1126 started"},
            "the message of the event is not an audit event (not JSON: 'I1126 started'",
        ),
        (
            {"logStreamName": "kube-apiserver-audit-71976ca1", "timestamp": 1, "message": '{"kind":"Pod"}'},
            "the message of the event is not an audit event (kind 'Pod')",
        ),
        (
            {
                "logStreamName": "kube-apiserver-audit-1",
                "timestamp": 1,
                "message": _one(EVENT)[:300] + "[Truncated...]",
            },
            f"is an audit event (auditID {EVENT['auditID']}) CloudWatch Logs cut off at its size limit",
        ),
        (
            {"category": "kube-audit", "properties": {"log": "I1126 21:03:26 handler.go:286] not an event"}},
            "properties.log is not an audit event (not JSON",
        ),
        ({"category": "kube-audit", "properties": {"stream": "stdout"}}, "a kube-audit record without properties.log"),
        ({"protoPayload": ["not", "an", "AuditLog"]}, "protoPayload is not an object"),
        (
            {"messageType": "DATA_MESSAGE", "logStream": "kube-apiserver-audit-1"},
            "a DATA_MESSAGE without a list of logEvents",
        ),
        ({"records": [{"data": "not base64!"}]}, "records[0] is not base64"),
        (
            {"hello": "world"},
            "not an audit event nor a record of EKS, GKE or AKS (kind null; a JSON object with keys hello)",
        ),
    ],
)
def test_an_envelope_that_holds_no_audit_event_is_named_by_file_and_line(
    record: dict[str, Any], problem: str, tmp_path: Path
) -> None:
    good = {"logStreamName": "kube-apiserver-audit-71976ca1", "timestamp": 1, "message": _one(EVENT)}
    if "category" in record:
        good = {"category": "kube-audit", "properties": {"log": _one(EVENT)}}
    elif "protoPayload" in record:
        good = json.loads(WRITERS["gke-sink"][1]([EVENT]))
    elif "records" in record:
        good = json.loads(WRITERS["eks-firehose-http"][1]([EVENT]))
    path = tmp_path / "log.json"
    path.write_text(_one(good) + "\n" + _one(record) + "\n" + _one(good) + "\n")
    read: list[Any] = []
    with pytest.raises(AuditError) as error:
        read.extend(read_audit_log(str(path), stats=AuditStats()))
    assert str(error.value).startswith(f"{path}:2: ")
    assert problem in str(error.value)
    assert len(read) == 1  # the record before it was read
    stats = AuditStats()
    assert len(list(read_audit_log(str(path), stats=stats, skip_invalid=True))) == 2
    assert stats.read.skipped_invalid == 1


def test_a_document_cut_off_mid_record_keeps_the_records_before_and_names_the_record(tmp_path: Path) -> None:
    data = WRITERS["gke-gcloud-read"][1](events(CURRENT / "rmw-fight.metadata.jsonl"))
    path = tmp_path / "gcloud.json"
    path.write_bytes(data[: len(data) // 2])
    read: list[Any] = []
    with pytest.raises(AuditError, match=r"the document ends inside record [\d,]+ \(truncated file\?\)") as error:
        read.extend(read_audit_log(str(path), stats=AuditStats()))
    assert str(error.value).startswith(f"{path}: ")
    assert read  # the records before the cut


def test_a_byte_order_mark_is_skipped_in_plain_and_gzipped_files(tmp_path: Path) -> None:
    data = WRITERS["aks-log-analytics"][1](events(CURRENT / "rmw-fight.metadata.jsonl"))
    plain, packed = tmp_path / "rows.json", tmp_path / "rows.json.gz"
    plain.write_bytes(b"\xef\xbb\xbf" + data)
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbf" + data))
    expected = list(read_audit_log(str(CURRENT / "rmw-fight.metadata.jsonl"), stats=AuditStats()))
    assert list(read_audit_log(str(plain), stats=AuditStats())) == expected
    assert list(read_audit_log(str(packed), stats=AuditStats())) == expected


def test_a_page_with_no_events_reads_as_nothing(tmp_path: Path) -> None:
    path = tmp_path / "page.json"
    path.write_text(json.dumps({"events": [], "searchedLogStreams": []}, indent=4))
    stats = AuditStats()
    assert list(read_audit_log(str(path), stats=stats)) == []
    assert stats.read.skipped_invalid == 0


def test_mixed_envelopes_in_one_file_are_an_error_at_the_first_of_another(tmp_path: Path) -> None:
    eks = WRITERS["eks-tail-short"][1]([EVENT]).decode()
    gke = WRITERS["gke-sink"][1]([EVENT]).decode()
    path = tmp_path / "mixed.log"
    path.write_text(eks + eks + gke + eks)
    with pytest.raises(AuditError) as error:
        list(read_audit_log(str(path), stats=AuditStats()))
    assert str(error.value) == (
        f"{path}:3: a record of GKE (Cloud Logging) in a file of EKS (CloudWatch Logs): one file holds one envelope "
        "(split it)"
    )
    with pytest.raises(AuditError, match=r":1: a raw audit event, not a record of GKE \(Cloud Logging\)"):
        list(read_audit_log(str(CURRENT / "rmw-fight.metadata.jsonl"), stats=AuditStats(), envelope=Envelope.GKE))


def test_gke_maps_methods_resource_names_and_statuses_as_its_entries_spell_them() -> None:
    entry: dict[str, Any] = {  # (a Cloud Logging entry: JSON)
        "protoPayload": {
            "serviceName": "k8s.io",
            "methodName": "io.k8s.authorization.rbac.v1.clusterrolebindings.update",
            "resourceName": "rbac.authorization.k8s.io/v1/clusterrolebindings/system:controller:glbc",
            "authenticationInfo": {"principalEmail": "system:serviceaccount:kube-system:glbc"},
            "requestMetadata": {"callerSuppliedUserAgent": "glbc/v1.2.3"},
            "status": {
                "code": 10,
                "message": 'Operation cannot be fulfilled on clusterrolebindings "x": the object has been modified',
            },
        },
        "operation": {"id": "44d5f968", "first": True, "last": True},
        "timestamp": "2024-06-26T04:10:49.129747Z",
        "labels": {"command.gke.io/dryRun": "All"},
    }
    (request,) = decode_audit(orjson.dumps(entry), AuditStats())
    assert (request.object.api_group, request.object.resource, request.object.name) == (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "system:controller:glbc",
    )
    assert (request.verb, request.code, request.reason, request.dry_run) == ("update", 409, "Conflict", True)
    assert (request.audit_id, request.manager, request.user) == (
        "44d5f968",
        "glbc",
        "system:serviceaccount:kube-system:glbc",
    )
    scale = {
        **entry,
        "labels": {},
        "protoPayload": {
            **entry["protoPayload"],
            "methodName": "io.k8s.apps.v1.deployments.scale.update",
            "resourceName": "apps/v1/namespaces/web/deployments/web/scale",
            "status": {"code": 10, "message": 'deployments.apps "web" already exists'},
        },
    }
    (request,) = decode_audit(orjson.dumps(scale), AuditStats())
    assert (request.object.namespace, request.object.subresource, request.reason, request.dry_run) == (
        "web",
        "scale",
        "AlreadyExists",
        False,
    )
    other = {**entry, "protoPayload": {"serviceName": "container.googleapis.com"}}
    stats = EnvelopeStats()
    assert Opener(stats).events(other) == []
    assert stats.skipped == {"GKE service container.googleapis.com": 1}


def _gke(method: str, resource_name: str, verb_time: str = "2026-11-26T21:10:00Z") -> dict[str, Any]:
    return {
        "insertId": f"{method}-{resource_name}",
        "protoPayload": {
            "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
            "serviceName": "k8s.io",
            "methodName": method,
            "resourceName": resource_name,
            "authenticationInfo": {"principalEmail": "system:anonymous"},
            "status": {"code": 0},
        },
        "timestamp": verb_time,
    }


def test_gke_requests_to_no_resource_are_read_and_counted_and_unknown_forms_counted_with_an_example(
    tmp_path: Path,
) -> None:
    """GKE logs health checks, discovery and probes of odd paths as `io.k8s.get` of the path; a methodName or
    resourceName of a form the reader cannot map is counted with an example, not an error."""
    entries = [
        _gke("io.k8s.get", "readyz"),
        _gke("io.k8s.get", "apis/apps/v1"),
        _gke("io.k8s.get", "/.git/config"),
        _gke("io.k8s.post", "api/v1/nonsense"),
        json.loads(WRITERS["gke-sink"][1]([EVENT])),
        _gke("io.k8s.configmaps.update", "core/v1/namespaces/a/configmaps/b"),
        _gke("io.k8s.core.v1.configmaps.update", "core/v1/namespaces/a/pods/b"),
        _gke("io.k8s.core.v1.configmaps.update", "core/v1/namespaces/a/pods/b"),
    ]
    path = tmp_path / "gke.json"
    path.write_text(json.dumps(entries, indent=2))
    stats = AuditStats()
    read = list(read_audit_log(str(path), stats=stats))
    assert [r.audit_id for r in read] == [EVENT["auditID"]]
    assert stats.without_object == 4
    assert stats.envelopes.records == {Envelope.GKE: 8}
    assert stats.envelopes.unread == {
        "GKE methodName not io.k8s.GROUP.VERSION.RESOURCE[.SUBRESOURCE].VERB": 1,
        "GKE resourceName not naming its methodName's resource": 2,
    }
    assert stats.envelopes.examples["GKE resourceName not naming its methodName's resource"] == (
        "'core/v1/namespaces/a/pods/b' (configmaps)"
    )
    analysis = analysed([path])[1]
    totals = analysis.totals()
    assert "4 non-resource requests" in totals
    assert "not read, 3 records: 2 of GKE resourceName not naming its methodName's resource (e.g. " in totals


def test_a_log_newest_first_is_warned_of(tmp_path: Path) -> None:
    """`gcloud logging read` prints newest first unless given --order=asc: such a log is read, with a warning."""
    entries = json.loads(WRITERS["gke-gcloud-read"][1](events(CURRENT / "rmw-fight.metadata.jsonl")))
    newest_first = tmp_path / "gcloud.json"
    newest_first.write_text(json.dumps(entries[::-1], indent=2))
    analysis = analysed([newest_first])[1]
    assert "Warning: requests older than one read before them by more than a minute (" not in analysis.totals()
    spread = [{**e, "timestamp": f"2026-11-26T21:{10 + i // 60:02}:{i % 60:02}Z"} for i, e in enumerate(entries)]
    newest_first.write_text(json.dumps(spread[::-1], indent=2))
    analysis = analysed([newest_first])[1]
    older = len(spread) - 61  # (read newest first: those over a minute older than the first)
    assert f"more than a minute ({older:,} in gcloud.json): is the log newest first?" in analysis.totals()
    ordered = tmp_path / "ordered.json"
    ordered.write_text(json.dumps(spread, indent=2))
    assert "newest first" not in analysed([ordered])[1].totals()


@pytest.mark.parametrize("pretty", [False, True])
def test_a_loop_of_gcloud_reads_with_quiet_windows_reads_as_one_log(pretty: bool, tmp_path: Path) -> None:
    """`gcloud logging read` in a loop (the live recipe) prints an array a window, `[]` for a quiet one."""
    recorded = events(CURRENT / "rmw-fight.metadata.jsonl")
    entries = json.loads(WRITERS["gke-gcloud-read"][1](recorded))
    windows = [[], entries[:30], [], entries[30:], []]
    path = tmp_path / "loop.json"
    path.write_text("".join((json.dumps(w, indent=2) if pretty else json.dumps(w)) + "\n" for w in windows))
    expected = list(read_audit_log(str(CURRENT / "rmw-fight.metadata.jsonl"), stats=AuditStats()))
    degraded = [r for r in expected if r.object.name]  # (GKE has an entry for every completed request)
    read = list(read_audit_log(str(path), stats=AuditStats()))
    assert [r.audit_id for r in read] == [r.audit_id for r in degraded]


def test_a_value_in_a_message_is_shown_short_whatever_it_is() -> None:
    from watcher.sources.envelopes import shown  # noqa: PLC0415 - the one test of it

    assert shown("x" * 100) == repr("x" * 60 + "...")
    assert [shown(v) for v in (None, True, 7, 1.5)] == ["null", "true", "7", "1.5"]
    assert shown(-(2**63) - 1) == "a number of over 18 digits"  # (a streamed document's numbers have any size)
    assert shown([[[]]]) == "a JSON array"


@pytest.mark.parametrize("head", [b"[", b'{\n"events": ['])
def test_a_document_nested_beyond_any_record_is_refused_not_parsed(head: bytes, tmp_path: Path) -> None:
    """Nesting deeper than orjson takes (1024 levels) is no record: the streaming parser stops there (its memory
    grows with the square of the depth: 200 KB of `[` would take gigabytes)."""
    path = tmp_path / "deep.json"
    path.write_bytes(head + WRITERS["gke-sink"][1]([EVENT]).rstrip() + b"," + b"[" * 200_000 + b"]" * 200_000 + b"]")
    read: list[Any] = []
    with pytest.raises(AuditError, match="nested deeper than 1024 levels") as error:
        read.extend(read_audit_log(str(path), stats=AuditStats()))
    assert str(error.value).startswith(f"{path}: ")
    assert len(read) == 1  # the record before it


@pytest.mark.parametrize("indent", ["  ", "\t", "    "])
def test_pretty_printed_json_is_read_whatever_the_indentation_of_its_closing_braces(
    indent: str, tmp_path: Path
) -> None:
    """Objects pretty-printed and then indented (pasted from a document, written by PowerShell's ConvertTo-Json) have
    no brace at column 0: they are streamed as values one after the other."""
    source = CURRENT / "rmw-fight.metadata.jsonl"
    pretty = "".join(
        "".join(indent + line + "\n" for line in json.dumps(event, indent=2).splitlines()) for event in events(source)
    )
    path = tmp_path / "pretty.json"
    path.write_text(pretty)
    expected = list(read_audit_log(str(source), stats=AuditStats()))
    assert list(read_audit_log(str(path), stats=AuditStats())) == expected
    path.write_text(pretty[: len(pretty) // 2])
    read: list[Any] = []
    with pytest.raises(AuditError, match=r"the document ends inside record [\d,]+ \(truncated file\?\)"):
        read.extend(read_audit_log(str(path), stats=AuditStats()))
    assert read


def test_records_are_counted_as_the_cloud_counts_them_not_by_the_bodies_holding_them(tmp_path: Path) -> None:
    """An Event Hubs body of 22 audit records (and records of other categories) is that many records of AKS, not one;
    a CloudWatch page, a record per log event."""
    logs = events(CURRENT / "rmw-fight.metadata.jsonl")[:22]
    for form, envelope in (("aks-event-hubs-document", Envelope.AKS), ("eks-filter-log-events", Envelope.EKS)):
        path = tmp_path / form
        path.write_bytes(WRITERS[form][1](logs))
        assert len(orjson.loads(path.read_bytes())) <= 2  # (one document: a body, a page)
        stats = AuditStats()
        assert len(list(read_audit_log(str(path), stats=stats))) == 22
        others = sum(stats.envelopes.skipped.values())
        assert others  # (the writers mix in records of other categories and streams)
        assert stats.envelopes.records == {envelope: 22 + others}


@pytest.mark.parametrize(
    ("form", "cut", "problem"),
    [
        ("gke-gcloud-yaml", 0.5, r":(\d+): the log ends inside this YAML document \(truncated file\?\)"),
        ("gke-gcloud-tail", 0.5, r":(\d+): the log ends inside this YAML document \(truncated file\?\)"),
        ("eks-insights-csv", 0.5, r":(\d+): not CSV \(unexpected end of data; truncated file\?\)"),
    ],
)
def test_a_yaml_or_csv_export_cut_in_the_middle_names_the_line_of_the_cut_record(
    form: str, cut: float, problem: str, tmp_path: Path
) -> None:
    data = WRITERS[form][1](events(CURRENT / "rmw-fight.metadata.jsonl"))
    # (cut inside a quoted field of the CSV, or a value of the YAML: the middle of a line)
    end = data.index(b'""kind""' if form.endswith("csv") else b"principal", int(len(data) * cut)) + 5
    path = tmp_path / "cut"
    path.write_bytes(data[:end])
    read: list[Any] = []
    with pytest.raises(AuditError, match=problem) as error:
        read.extend(read_audit_log(str(path), stats=AuditStats()))
    line = int(re.search(problem, str(error.value)).group(1))  # type: ignore[union-attr]
    assert 1 < line <= data[:end].count(b"\n") + 1
    assert read  # the records before the cut


def test_a_yaml_document_that_is_not_yaml_is_named_and_skipped_with_skip_invalid(tmp_path: Path) -> None:
    data = WRITERS["gke-gcloud-yaml"][1](events(CURRENT / "rmw-fight.metadata.jsonl")).decode()
    documents = data.split("---\n")
    documents[3] = "protoPayload: [unclosed\n  - x: {\n"
    path = tmp_path / "entries.yaml"
    path.write_text("---\n".join(documents))
    with pytest.raises(AuditError, match=r"entries.yaml:(\d+): not YAML \("):
        list(read_audit_log(str(path), stats=AuditStats()))
    stats = AuditStats()
    read = list(read_audit_log(str(path), stats=stats, skip_invalid=True))
    assert stats.read.skipped_invalid == 1
    assert len(read) == len(documents) - 1 - sum(  # (every entry but the broken one; GKE has no non-resource here)
        1 for d in documents if "io.k8s.get" in d
    )


def test_every_event_read_is_in_one_count_of_the_totals(tmp_path: Path) -> None:
    """Reviews and token requests store nothing, a request to a path names no object: each is counted as what it is,
    and the counts add up to the events read."""
    review = {
        **EVENT,
        "auditID": "review",
        "verb": "create",
        "objectRef": {"resource": "subjectaccessreviews", "apiGroup": "authorization.k8s.io", "apiVersion": "v1"},
        "responseStatus": {"code": 201},
    }
    token = {
        **review,
        "auditID": "token",
        "objectRef": {"resource": "serviceaccounts", "namespace": "ops", "name": "labeler", "subresource": "token"},
    }
    health = {key: value for key, value in EVENT.items() if key != "objectRef"} | {"requestURI": "/readyz"}
    old = {key: value for key, value in EVENT.items() if key not in ("apiVersion", "stageTimestamp")}
    old |= {"auditID": "v1alpha1", "timestamp": EVENT["stageTimestamp"]}  # (no apiVersion, v1alpha1's one time)
    logged = events(CURRENT / "cascade.metadata.jsonl")
    path = tmp_path / "audit.log"
    path.write_bytes(raw_lines([*logged, review, token, health, old]))
    findings, analysis = analysed([path])
    s, audit = analysis.pipeline.requests.stats, analysis.audit  # type: ignore[union-attr]
    assert (s.stores_nothing, audit.without_object) == (2, 1)
    analysed_writes = s.writes + s.conflicts + s.apply_conflicts + s.failed
    assert s.requests == analysed_writes + s.reads + s.ignored + s.stores_nothing + s.without_name + s.dry_run
    assert audit.events == s.requests + audit.without_object + sum(audit.stages_skipped.values())
    assert audit.events == len(logged) + 4
    totals = analysis.totals()
    assert "2 reviews and token requests (nothing stored)" in totals
    assert "; 1 non-resource requests" in totals
    assert findings == analysed([CURRENT / "cascade.metadata.jsonl"])[0]


@pytest.mark.parametrize(
    ("head", "form"),
    [
        (b"---\ninsertId: a\n", "yaml"),
        (b"# a comment\n\ninsertId: abc\nlabels:\n", "yaml"),
        (b"'@type': type.googleapis.com/google.cloud.audit.AuditLog\n", "yaml"),
        (b"@timestamp,@message,@logStream,@log\n2026-11-26 21:03:26.879,...", "csv"),
        (b'"@timestamp","@message"\n', "csv"),
        (b'2026-11-26T21:03:26.879187+00:00 kube-apiserver-audit-1 {"@message":1,"a":2}\n', None),
        (b"I1126 21:03:26.123456 1 handler.go:286] started\n", None),
        (b'{"kind":"Event"}\n', None),
        (b"[\n", None),
    ],
)
def test_yaml_and_csv_exports_are_told_by_their_first_line(head: bytes, form: str | None) -> None:
    from watcher.sources.exports import sniff  # noqa: PLC0415 - the one test of it

    assert sniff(head) == form
