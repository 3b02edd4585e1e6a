"""Reading audit logs (`watcher.sources.audit`) on events recorded from a real kube-apiserver, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from watcher.detection.requests import FIELD_MANAGER_MAX_BYTES, Request, manager_from_user_agent
from watcher.sources.audit import AuditError, AuditStats, decode_audit, read_audit_log, read_audit_logs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "v1.20" / "configmap-race.jsonl"


def _events() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def _write(path: Path, events: list[Any]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_completed_resource_requests_are_read_and_other_stages_counted() -> None:
    stats = AuditStats()
    requests = list(read_audit_log(str(FIXTURE), stats=stats))
    events = _events()
    completed = [e for e in events if e["stage"] == "ResponseComplete" and "objectRef" in e]
    assert [r.audit_id for r in requests] == [e["auditID"] for e in completed]
    assert stats.events == len(events)
    assert stats.stages_skipped == {"RequestReceived": sum(e["stage"] == "RequestReceived" for e in events)}
    assert stats.without_object == 2  # /readyz
    assert stats.requests == len(requests)


def test_a_conflict_is_read_at_both_levels_with_the_message_where_logged() -> None:
    conflicts = [r for r in read_audit_log(str(FIXTURE), stats=AuditStats()) if r.code == 409]
    assert {r.object.namespace for r in conflicts} == {"audit-metadata", "audit-bodies"}
    for request in conflicts:
        assert (request.user, request.manager, request.verb, request.reason) == (
            "team-a-operator",
            "team-a-operator",
            "update",
            "Conflict",
        )
        assert request.user_agent.startswith("team-a-operator/")
        assert request.resource_version
        logged = request.object.namespace == "audit-bodies"  # RequestResponse: the Status in the response body
        assert ("the object has been modified" in request.message) == logged


def test_a_write_without_field_manager_gets_the_user_agent_s_prefix() -> None:
    derived = [
        r for r in read_audit_log(str(FIXTURE), stats=AuditStats()) if r.user == "team-b-operator" and r.is_write
    ]
    assert derived
    assert {r.manager for r in derived} == {"team-b-operator"}


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
        (lambda e: [e], "not an audit event: a JSON list"),
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
    with pytest.raises(ValueError, match="item 1 of the EventList: no stage"):
        decode_audit(text, AuditStats())
    stats = AuditStats()
    kept = decode_audit(text, stats, skip_bad_items=True)  # (what the webhook does: the rest of the batch counts)
    assert [r.audit_id for r in kept] == [events[0]["auditID"], events[1]["auditID"]]
    assert stats.invalid_items == 2
