"""Reading audit logs (`watcher.sources.audit`) on events recorded from a real kube-apiserver (the current release,
and v1.20 for compatibility), and bad input."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watcher.detection.requests import FIELD_MANAGER_MAX_BYTES, Request, manager_from_user_agent
from watcher.sources.audit import AuditError, AuditStats, decode_audit, read_audit_log, read_audit_logs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
FIXTURE = FIXTURES / "configmap-race.jsonl"


@dataclass(frozen=True)
class Race:
    """A recording of tests/integration/test_audit_log.py: its two clients, and what the release logs."""

    path: Path
    team_a: str  # the users
    team_b: str
    pods: dict[str, str]  # user -> the pod its token is bound to
    message_at_metadata: bool  # a 409's message at Metadata level (v1.20: only in the body, Request level and up)


CURRENT = Race(
    FIXTURE,
    "system:serviceaccount:team-a:team-a-operator",
    "system:serviceaccount:team-b:team-b-operator",
    {
        "system:serviceaccount:team-a:team-a-operator": "team-a/team-a-operator-7f9c6d5b8-2kq4n",
        "system:serviceaccount:team-b:team-b-operator": "team-b/team-b-operator-5d8b7c6f9-x7wzp",
    },
    message_at_metadata=True,
)
V1_20 = Race(FIXTURES / "v1.20" / "configmap-race.jsonl", "team-a-operator", "team-b-operator", {}, False)
RACES = pytest.mark.parametrize("race", [CURRENT, V1_20], ids=["current", "v1.20"])


def _events(path: Path = FIXTURE) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, events: list[Any]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@RACES
def test_completed_resource_requests_are_read_and_other_stages_counted(race: Race) -> None:
    stats = AuditStats()
    requests = list(read_audit_log(str(race.path), stats=stats))
    events = _events(race.path)
    completed = [e for e in events if e["stage"] == "ResponseComplete" and "objectRef" in e]
    assert [r.audit_id for r in requests] == [e["auditID"] for e in completed]
    assert stats.events == len(events)
    assert stats.stages_skipped == {"RequestReceived": sum(e["stage"] == "RequestReceived" for e in events)}
    assert stats.without_object == 2  # /readyz, /openapi/v3
    assert stats.requests == len(requests)


@RACES
def test_a_conflict_is_read_at_both_levels_with_the_message_where_logged(race: Race) -> None:
    conflicts = [r for r in read_audit_log(str(race.path), stats=AuditStats()) if r.code == 409]
    assert {r.object.namespace for r in conflicts} == {"audit-metadata", "audit-bodies"}
    for request in conflicts:
        assert (request.user, request.manager, request.verb, request.reason) == (
            race.team_a,
            "team-a-operator",
            "update",
            "Conflict",
        )
        assert request.user_agent.startswith("team-a-operator/")
        assert request.resource_version
        # RequestResponse: the Status in the response body; current releases log the message in responseStatus too
        logged = request.object.namespace == "audit-bodies" or race.message_at_metadata
        assert ("the object has been modified" in request.message) == logged


@RACES
def test_a_write_without_field_manager_gets_the_user_agent_s_prefix(race: Race) -> None:
    derived = [r for r in read_audit_log(str(race.path), stats=AuditStats()) if r.user == race.team_b and r.is_write]
    assert derived
    assert {r.manager for r in derived} == {"team-b-operator"}


# Request URIs whose queries name the parameters read, plainly, %-escaped or with `+`, with and without values, and
# URIs `urlsplit` reads otherwise (a scheme, a host, a fragment, characters it removes).
_QUERY_PART = st.sampled_from(
    [
        "fieldManager",
        "field%4Danager",
        "dryRun",
        "dry%52un",
        "force",
        "f%6Frce",
        "true",
        "tr%75e",
        "All",
        "=",
        "&",
        "+",
        "%",
        "%2B",
        "%E2%9C%93",
        "%ZZ",
        "a",
        "?",
        "#",
        "\t",
        "\n",
        "/",
        "//",
        ":",
        "[",
        "]",
        "x:",
        " ",
        "é",
    ]
)
_URIS = st.lists(_QUERY_PART, max_size=14).map("".join).map(lambda rest: "/api/v1/namespaces/a/configmaps/b?" + rest)
_OTHER_URIS = st.lists(_QUERY_PART, max_size=14).map("".join)


@settings(max_examples=400, deadline=None)
@given(uri=_URIS | _OTHER_URIS)
def test_a_request_uri_s_query_is_read_as_parse_qs_reads_it(uri: str) -> None:
    event = {**_events()[-1], "requestURI": uri, "verb": "patch"}
    try:
        query = parse_qs(urlsplit(uri).query) if "?" in uri else {}  # (a URI without a query is not split)
    except ValueError as exc:  # (a host urlsplit refuses: the event is refused with its message)
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            decode_audit(json.dumps(event).encode(), AuditStats())
        return
    [request] = decode_audit(json.dumps(event).encode(), AuditStats())
    manager = (query.get("fieldManager") or [""])[0]
    assert (request.manager_given, request.dry_run, request.force) == (
        bool(manager),
        "dryRun" in query,
        (query.get("force") or [""])[0] == "true",
    )
    assert request.manager == (manager or manager_from_user_agent(request.user_agent))


@RACES
def test_a_client_with_a_pod_bound_token_is_read_with_its_pod(race: Race) -> None:
    requests = list(read_audit_log(str(race.path), stats=AuditStats()))
    assert {r.user: r.pod for r in requests} == {u: race.pods.get(u, "") for u in (race.team_a, race.team_b)}


def test_nothing_of_user_extra_but_the_pod_and_nothing_of_the_annotations_gets_past_the_decoder() -> None:
    events = [e for e in _events() if e["stage"] == "ResponseComplete" and "objectRef" in e]
    extra = {key: value for e in events for key, value in e["user"].get("extra", {}).items()}
    # (so that this could fail: the recording holds the token's credential id, the pod's and the node's uids)
    assert {"authentication.kubernetes.io/credential-id", "authentication.kubernetes.io/pod-uid"} <= set(extra)
    kept = {"authentication.kubernetes.io/pod-name"}
    secret = {v for key, values in extra.items() if key not in kept for v in values}
    secret |= {v for e in events for v in e["annotations"].values() if v not in ("", "allow")}
    assert any(v.startswith("RBAC: allowed by RoleBinding") for v in secret)
    for event in events:
        (request,) = decode_audit(json.dumps(event).encode(), AuditStats())
        assert not [v for v in secret if v in repr(request)]
        # annotations newer releases add now and then (latencies, Pod Security, credential ids) change nothing
        noted = {
            **event,
            "annotations": {
                **event["annotations"],
                "apiserver.latency.k8s.io/etcd": "512.1ms",
                "apiserver.latency.k8s.io/total": "1.2s",
                "pod-security.kubernetes.io/enforce-policy": "privileged:latest",
                "authentication.k8s.io/stale-token": "subject: system:serviceaccount:a:b",
            },
        }
        assert decode_audit(json.dumps(noted).encode(), AuditStats()) == [request]
        bare = {**event, "user": {k: v for k, v in event["user"].items() if k != "extra"}}
        assert decode_audit(json.dumps(bare).encode(), AuditStats()) == [replace(request, pod="")]


@pytest.mark.parametrize(
    ("agent", "manager"),
    [
        ("kubectl/v1.20.2 (linux/amd64) kubernetes/faddb5b", "kubectl"),
        ("kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faddb5b/leader-election", "kube-controller-manager"),
        ("no-slash at all", "no-slash at all"),
        ("tab\there/1", "tabhere"),  # unprintable characters are dropped
        ("", ""),
        ("é" * 100 + "/1", "é" * (FIELD_MANAGER_MAX_BYTES // 2)),  # cut at 128 bytes, not in a character
    ],
)
def test_manager_from_user_agent_as_the_api_server_derives_it(agent: str, manager: str) -> None:
    assert manager_from_user_agent(agent) == manager


def test_an_event_list_is_read_like_the_lines(tmp_path: Path) -> None:
    events = _events()
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": events}, indent=2))
    from_list = list(read_audit_log(str(listed), stats=AuditStats()))
    assert from_list == list(read_audit_log(str(FIXTURE), stats=AuditStats()))


def test_several_logs_are_merged_by_time(tmp_path: Path) -> None:
    events = [e for e in _events() if e["stage"] == "ResponseComplete" and "objectRef" in e]
    first = _write(tmp_path / "audit-1.log", events[0::2])
    second = tmp_path / "audit-2.log.gz"
    second.write_bytes(gzip.compress("".join(json.dumps(e) + "\n" for e in events[1::2]).encode()))
    merged = list(read_audit_logs([str(first), str(second)], stats=AuditStats()))
    assert [r.audit_id for r in merged] == [e["auditID"] for e in sorted(events, key=lambda e: e["stageTimestamp"])]


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda _: "{not json", "not valid JSON"),
        (lambda e: [e, "x"], "item 1 of the array: not an audit event nor a known envelope: a JSON string"),
        (lambda e: {**e, "kind": "ConfigMap"}, "kind 'ConfigMap'"),
        (lambda e: {**e, "apiVersion": "v1"}, "apiVersion 'v1'"),
        (lambda e: {**e, "stage": "Finished"}, "unknown stage 'Finished'"),
        (lambda e: {k: v for k, v in e.items() if k != "stage"}, "no stage"),
        (lambda e: {k: v for k, v in e.items() if k != "verb"}, "no verb"),
        (lambda e: {**e, "stageTimestamp": "yesterday"}, "is not an RFC 3339 time"),
        (lambda e: {**e, "objectRef": "configmaps"}, "objectRef is not an object"),
    ],
)
def test_a_bad_event_names_file_and_line_and_keeps_what_was_read(tmp_path: Path, mutate: Any, problem: str) -> None:
    events = [e for e in _events() if e["stage"] == "ResponseComplete" and "objectRef" in e]
    bad = mutate(events[3])
    path = tmp_path / "audit.log"
    path.write_text(
        "".join(json.dumps(e) + "\n" for e in events[:3])
        + (bad if isinstance(bad, str) else json.dumps(bad))
        + "\n"
        + "".join(json.dumps(e) + "\n" for e in events[4:])
    )
    read: list[Request] = []
    with pytest.raises(AuditError) as error:
        read.extend(read_audit_log(str(path), stats=AuditStats()))
    assert str(error.value).startswith(f"{path}:4: ")
    assert problem in str(error.value)
    assert len(read) == 3  # what came before the bad line was yielded
    stats = AuditStats()
    skipped = list(read_audit_log(str(path), stats=stats, skip_invalid=True))
    assert len(skipped) == len(events) - 1
    assert stats.read.skipped_invalid == 1
    assert stats.read.problems[0].startswith(f"{path}:4: ")


def test_a_truncated_gzip_log_says_how_far_it_was_read(tmp_path: Path) -> None:
    data = gzip.compress(FIXTURE.read_bytes())
    path = tmp_path / "audit.log.gz"
    path.write_bytes(data[: len(data) * 3 // 4])
    read: list[Request] = []
    with pytest.raises(AuditError) as error:
        read.extend(read_audit_log(str(path), stats=AuditStats()))
    assert "the compressed stream ends early" in str(error.value)
    assert "read up to line" in str(error.value)
    assert read  # the requests before the break


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="cannot open") as error:
        list(read_audit_log(str(tmp_path / "nope.log"), stats=AuditStats()))
    assert str(tmp_path / "nope.log") in str(error.value)


def test_a_bad_item_of_an_eventlist_fails_the_document_or_with_skip_bad_items_only_itself() -> None:
    events = [e for e in _events() if e["stage"] == "ResponseComplete" and "objectRef" in e][:2]
    document = {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [events[0], {"stage": 7}, events[1], 5]}
    text = json.dumps(document).encode()
    with pytest.raises(ValueError, match="item 1 of the record: no stage"):
        decode_audit(text, AuditStats())
    stats = AuditStats()
    kept = decode_audit(text, stats, skip_bad_items=True)  # (what the webhook does: the rest of the batch counts)
    assert [r.audit_id for r in kept] == [events[0]["auditID"], events[1]["auditID"]]
    assert stats.invalid_items == 2
