"""`fightwatch run` against the real API server while real clients fight: what it serves, logs and records.

The session's `live_run` ran every scenario with the watcher following (see conftest.py). Its findings must be
the injected ones, the same as the engine finds on the harness recorder's full objects, each logged once when
it opened (at the third handover), and a replay of its own recording must give exactly its findings.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.monitoring import promtool
from harness.scenarios import scenario_of
from tests.expectations import BENIGN, FINDINGS, status_as_one
from tests.integration.conftest import LiveRun
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.model import ChangeKind, FindingType
from watcher.rendering.output import finding_json


def _scenario(finding: dict[str, Any]) -> str | None:
    ref = finding["object"]
    return scenario_of({"kind": ref["kind"], "metadata": {"namespace": ref["namespace"], "name": ref["name"]}})


def _of(live_run: LiveRun, scenario: str) -> list[dict[str, Any]]:
    return [f for f in live_run.findings if _scenario(f) == scenario]


def _essence(finding: dict[str, Any]) -> tuple[Any, ...]:
    ref = finding["object"]
    managers = frozenset(w["manager"] for w in finding["writers"])
    return (finding["type"], ref["kind"], ref["namespace"], ref["name"], status_as_one(finding["fields"]), managers)


@pytest.mark.parametrize("scenario", sorted(FINDINGS))
def test_the_watcher_serves_each_injected_fight_and_hot_loop(live_run: LiveRun, scenario: str) -> None:
    expected = FINDINGS[scenario]
    (found,) = _of(live_run, scenario)
    assert found["type"] == expected.type.value
    assert found["state"] == "active"
    assert (found["object"]["kind"], found["object"]["name"]) == (expected.kind, expected.name)
    assert status_as_one(found["fields"]) >= status_as_one(expected.fields)
    if expected.driver is None and expected.type is FindingType.FIGHT:
        assert set(found["fields"]) == expected.fields
    if expected.driver is not None:
        assert (found["writers"][0]["manager"], frozenset(found["writers"][0]["fields"])) == (
            expected.driver,
            expected.fields,
        )
    assert {w["manager"] for w in found["writers"]} == expected.managers
    assert (expected.metadata_hint or expected.hint) in found["hint"]  # (the watcher watches metadata only)
    if expected.type is FindingType.FIGHT:
        assert found["handovers"] >= 3


@pytest.mark.parametrize("scenario", BENIGN)
def test_the_watcher_flags_no_benign_churn(live_run: LiveRun, scenario: str) -> None:
    assert _of(live_run, scenario) == []


def test_the_watcher_finds_what_the_engine_finds_on_full_objects_of_the_same_traffic(live_run: LiveRun) -> None:
    engine = Engine(Config().detection)
    for doc in sorted(live_run.events, key=lambda e: str(e["observedAt"])):
        event = engine.decode(orjson.dumps(doc))
        assert event is not None
        engine.process(event)
    reference = {_essence(finding_json(f)) for f in engine.active() + engine.resolved()}
    watched = {_essence(f) for f in live_run.findings if _scenario(f) is not None}
    assert watched == reference
    assert len(reference) == len(FINDINGS)


def test_each_finding_is_logged_once_as_soon_as_it_is_a_fight_with_writers_fields_and_hint(live_run: LiveRun) -> None:
    """Opened at the write that made it a fight (the third handover; the fourth for three writers in turn, whose
    third handover is not yet a return), as the engine opens it on the reference full objects."""
    engine = Engine(Config().detection)
    at_opening: dict[tuple[str, str | None, str], int] = {}
    for doc in sorted(live_run.events, key=lambda e: str(e["observedAt"])):
        event = engine.decode(orjson.dumps(doc))
        assert event is not None
        for change in engine.process(event):
            if change.kind is ChangeKind.OPENED:
                ref = change.finding.object
                at_opening[(ref.kind, ref.namespace, ref.name)] = change.finding.handovers
    opened = [e for e in live_run.log if e.get("event") == "finding opened"]
    assert sorted(e["id"] for e in opened) == sorted(f["id"] for f in live_run.findings)
    for entry in opened:
        assert entry["level"] == "warning"
        assert entry["writers"]
        assert entry["fields"]
        assert entry["hint"]
        assert entry["summary"]
        assert entry["handovers"] == at_opening[(entry["kind"], entry["namespace"], entry["name"])]
        if entry["type"] == "fight":  # (5: one field manager alone, whose fight needs twice the flips)
            assert entry["handovers"] in (3, 4, 5)


def test_a_replay_of_the_recording_gives_exactly_the_served_findings(live_run: LiveRun) -> None:
    replay = subprocess.run(
        [sys.executable, "-m", "watcher", "replay", "--output", "json", str(live_run.recording)],
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr.decode()
    replayed = [orjson.loads(line) for line in replay.stdout.splitlines()]
    assert sorted(replayed, key=lambda f: f["id"]) == sorted(live_run.findings, key=lambda f: f["id"])


def test_the_watcher_logs_the_api_servers_release(live_run: LiveRun) -> None:
    """A current release: logged as such, with no warning of what an old server cannot show."""
    (server,) = [e for e in live_run.log if e.get("event") == "API server"]
    assert server["server_version"] == live_run.server_version
    assert not [e for e in live_run.log if e.get("event") == "old API server"]


def test_sigterm_ends_the_watcher_cleanly_with_its_recording_complete(live_run: LiveRun) -> None:
    assert live_run.returncode == 0
    assert live_run.log[-1]["event"] == "stopped"
    lines = live_run.recording.read_bytes().splitlines()
    assert lines
    for line in lines:
        orjson.loads(line)  # every line complete: the buffer was flushed, nothing cut off


def test_the_watcher_was_ready_watched_metadata_only_and_resumed_its_watches(live_run: LiveRun) -> None:
    assert live_run.readiness["ready"] is True
    resources = live_run.readiness["resources"]
    assert resources["configmaps"]["state"] == "watching"
    assert resources["configmaps"]["metadata_only"] is True
    assert resources["deployments.apps"]["metadata_only"] is True  # (managedFields name every writer: no values needed)
    assert resources["widgets.example.com"]["state"] == "watching"
    for denied in ("events", "leases.coordination.k8s.io", "endpoints", "pods"):
        assert denied not in resources
    assert live_run.metrics["ready"] == 1
    assert (live_run.metrics["writes"] or 0) > 0
    assert live_run.metrics["watched"] == len(resources)  # one watch per resource, none forbidden
    assert (live_run.metrics["rewatches"] or 0) >= 1  # the server ended watches (timeoutSeconds), they resumed
    assert (live_run.metrics["configmap events"] or 0) > 0
    assert (live_run.metrics["configmap bytes"] or 0) > 0
    assert live_run.metrics["configmap watches"] == 1


def test_the_live_run_logged_at_info_level_without_errors(live_run: LiveRun) -> None:
    assert not [e for e in live_run.log if e.get("level") == "debug"]
    problems = [
        e for e in live_run.log if e.get("level") in ("error", "critical") or e.get("event") == "invalid event skipped"
    ]
    assert problems == []


def test_every_finding_of_the_live_run_was_told_as_a_kubernetes_event(live_run: LiveRun) -> None:
    """Events are on by default: every change of every finding (namespaced and cluster-scoped objects alike)
    reached the real API server through events.k8s.io/v1, none failed, none was left queued at SIGTERM."""
    (started,) = [e for e in live_run.log if e.get("event") == "started"]
    assert started["delivery"] == ["events"]
    undelivered = ("delivery failed", "delivery stopped with changes undelivered")
    assert not [e for e in live_run.log if e.get("event") in undelivered]
    changes = [e for e in live_run.log if str(e.get("event", "")).startswith("finding ")]
    assert changes
    assert live_run.metrics["events sent"] == len(changes)


def test_a_scrape_after_the_live_run_is_clean_for_promtool_and_shows_every_fight(live_run: LiveRun) -> None:
    check = promtool("check", "metrics", stdin=live_run.metrics_text.encode())
    assert (check.returncode, check.stdout.strip(), check.stderr.strip()) == (0, "", "")  # nothing reported
    infos = [
        s.labels
        for family in text_string_to_metric_families(live_run.metrics_text)
        for s in family.samples
        if s.name == "fightwatch_finding_info"
    ]
    active = [f for f in live_run.findings if f["state"] == "active"]
    assert sorted((i["type"], i["kind"], i["name"]) for i in infos) == sorted(
        (f["type"], f["object"]["kind"], f["object"]["name"]) for f in active
    )
