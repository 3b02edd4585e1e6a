"""Incidents (`detection.incidents`): the same fight on many objects is one incident with a stable id, whichever
order the objects were seen in; distinct patterns are never merged. On copies of recorded captures: the same
recorded fight played on several objects (new names, namespaces and uids), as many objects managed by the same two
writers would be; and on captures recorded with one root cause on many objects (`incident-replicas`: a GitOps tool and
an autoscaler over 6 Deployments in 3 namespaces; `incident-hot-loop`: one controller's hot loop on 4 Widgets in 2)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from tests.expectations import assert_incident
from tests.unit.captures import IMPLEMENTATIONS, analyse, capture
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.incidents import group, incident_id, normalised
from watcher.model import Finding, FindingState, FindingType
from watcher.rendering.page import render_findings
from watcher.sources.capture import ReadStats, read_captures

COPIES = 5


def _copies(name: str, out: Path, *, count: int = COPIES, reverse: bool = False) -> Path:
    """The events of a recorded capture played on `count` objects (each its own name, namespace and uid) at the
    same times, the copies in the order given (`reverse`: a replica that saw them the other way round)."""
    events = [orjson.loads(line) for line in capture(name).read_bytes().splitlines() if line.strip()]
    lines = []
    order = range(count - 1, -1, -1) if reverse else range(count)
    for copy in order:
        for event in events:
            obj = orjson.loads(orjson.dumps(event["object"]))
            meta = obj["metadata"]
            meta["name"] = f"{meta['name']}-{copy}"
            if meta.get("namespace"):
                meta["namespace"] = f"{meta['namespace']}-{copy}"
            meta["uid"] = f"{meta['uid'][:-4]}{copy:04d}"
            lines.append(event | {"object": obj})
    path = out / f"{name}{'-reversed' if reverse else ''}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    return path


@pytest.mark.parametrize(
    ("path", "name", "expected"),
    [
        ("spec.replicas", "web", "spec.replicas"),
        ("spec.template.spec.containers[name=web-app].image", "web-app", "spec.template.spec.containers[name=*].image"),
        ("data[web-app.conf]", "web-app", "data[*]"),
        ("data.web-app", "web-app", "data.*"),
        ("metadata.annotations[example.com/web-app-hash]", "web-app", "metadata.annotations[*]"),
        ("metadata.labels.tier", "ti", "metadata.labels.tier"),  # too short a name to tell
        (
            "webhooks[name=validate.example.com].clientConfig.caBundle",
            "cfg",
            "webhooks[name=validate.example.com].clientConfig.caBundle",
        ),
    ],
)
def test_keys_that_follow_the_object_are_normalised(path: str, name: str, expected: str) -> None:
    assert normalised(path, name) == expected


def test_one_fight_on_many_objects_is_one_incident(tmp_path: Path) -> None:
    findings = _analyse([_copies("fight-apply-vs-update-replicas", tmp_path)])
    assert len(findings) == COPIES
    (incident,) = group(findings)
    assert incident.type is FindingType.FIGHT
    assert incident.state is FindingState.ACTIVE
    assert incident.objects == COPIES
    assert len(incident.namespaces) == COPIES
    assert incident.kinds == ("Deployment",)
    assert incident.fields == ("spec.replicas",)
    assert set(incident.findings) == {f.id for f in findings}
    assert {c.writer.manager for c in incident.writers} == {"custom-autoscaler", "argocd-controller"}
    assert sum(c.writes for c in incident.writers) == sum(c.writes for f in findings for c in f.writers)
    assert incident.summary == (
        f"custom-autoscaler (Update) and argocd-controller (Apply) fight over spec.replicas on {COPIES} Deployments "
        f"in {COPIES} namespaces"
    )


def test_the_incident_id_is_the_same_whichever_object_was_seen_first(tmp_path: Path) -> None:
    forward = _analyse([_copies("fight-apply-vs-update-replicas", tmp_path)])
    backward = _analyse([_copies("fight-apply-vs-update-replicas", tmp_path, reverse=True)])
    assert {f.id for f in forward} == {f.id for f in backward}  # the findings themselves
    assert [i.id for i in group(forward)] == [i.id for i in group(backward)]
    assert len({incident_id(f) for f in forward}) == 1
    # and it does not depend on when or whether it resolved
    resolved = [replace(f, state=FindingState.RESOLVED, resolved_at=f.last_seen + 900) for f in forward]
    assert [i.id for i in group(resolved)] == [i.id for i in group(forward)]
    assert group(resolved)[0].state is FindingState.RESOLVED


def test_distinct_patterns_are_never_merged(tmp_path: Path) -> None:
    fights = _analyse([_copies("fight-apply-vs-update-replicas", tmp_path)])
    loops = _analyse([_copies("hot-loop-timestamp", tmp_path, count=3)])
    others = []
    for name in ("fight-scale-vs-apply", "fight-three-writers", "fight-update-vs-update-label", "fight-shared-manager"):
        others += analyse(name)[0]
    incidents = group([*fights, *loops, *others])
    assert sorted(i.objects for i in incidents) == [1, 1, 1, 1, 3, COPIES]
    assert incidents[0].objects == COPIES  # the widest first
    # same field and type, other writers: apart (fight-update-vs-update-label and fight-shared-manager both
    # contest metadata.labels.owner)
    owners = [i for i in incidents if i.fields == ("metadata.labels.owner",)]
    assert len(owners) == 2


def test_a_single_finding_is_an_incident_of_one_and_the_table_stays_as_it_was() -> None:
    result = run("replay", str(capture("fight-three-writers")))
    assert result.returncode == 0, result.stderr
    table = result.stdout.decode()
    assert "INCIDENT" not in table
    assert "Incident 1" not in table


def test_replay_names_each_findings_incident_and_prints_incidents_when_asked(tmp_path: Path) -> None:
    path = _copies("fight-apply-vs-update-replicas", tmp_path)
    other = str(capture("fight-three-writers"))
    findings = [orjson.loads(line) for line in run("replay", str(path), other, "-o", "json").stdout.splitlines()]
    assert len({f["incident"] for f in findings}) == 2
    incidents = [
        orjson.loads(line) for line in run("replay", str(path), other, "-o", "json", "--incidents").stdout.splitlines()
    ]
    assert [i["objects"] for i in incidents] == [COPIES, 1]
    assert set(incidents[0]["findings"]) == {f["id"] for f in findings if f["incident"] == incidents[0]["id"]}
    table = run("replay", str(path), other).stdout.decode()
    assert f"Incident 1 ({incidents[0]['id']}): {incidents[0]['summary']}." in table.replace("\n   ", " ")


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True, check=False, timeout=120)


def test_the_page_lists_incidents_of_several_findings_and_each_card_links_to_its_own(tmp_path: Path) -> None:
    fights = _analyse([_copies("fight-apply-vs-update-replicas", tmp_path)])
    alone = analyse("fight-three-writers")[0]
    html = render_findings([*fights, *alone], now=max(f.last_seen for f in fights))
    (incident,) = group(fights)
    assert html.count('<li class="incident') == 1  # the lone fight is no incident of its own on the page
    assert f'id="incident-{incident.id}"' in html
    assert html.count(f'href="#incident-{incident.id}"') == COPIES
    for finding_id in incident.findings:
        assert f'href="#finding-{finding_id}"' in html


# --------------------------------------------------------------------------------------------------------
# Recorded captures of one root cause on many objects (harness/scenarios.py: incident-replicas, incident-hot-loop)


def _analyse(paths: list[Path], implementation: str = "auto") -> list[Finding]:
    engine = Engine(Config().detection, attribution=implementation)
    for event in read_captures([str(p) for p in paths], engine.decode, stats=ReadStats()):
        engine.process(event)
    return engine.active() + engine.resolved()


def _by_object(name: str, out: Path, first: str) -> Path:
    """A recorded capture with each object's events together and in their own order, the objects of namespace
    `first` first, the others in the reverse of the order they first appeared in (a replica that saw them so)."""
    by_uid: dict[str, list[bytes]] = {}
    namespace: dict[str, str] = {}
    for line in capture(name).read_bytes().splitlines():
        if line.strip():
            meta = orjson.loads(line)["object"]["metadata"]
            by_uid.setdefault(meta["uid"], []).append(line)
            namespace[meta["uid"]] = meta.get("namespace", "")
    seen = {uid: n for n, uid in enumerate(by_uid)}
    order = sorted(by_uid, key=lambda uid: (namespace[uid] != first, -seen[uid]))
    assert order != list(by_uid)
    path = out / f"{name}-{first}-first.jsonl"
    path.write_bytes(b"".join(line + b"\n" for uid in order for line in by_uid[uid]))
    return path


def _groups(findings: list[Finding]) -> dict[str, set[tuple[str | None, str]]]:
    """Each incident's id and the objects of its findings."""
    objects = {f.id: (f.object.namespace, f.object.name) for f in findings}
    return {i.id: {objects[f] for f in i.findings} for i in group(findings)}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize(
    ("scenario", "objects", "summary"),
    [
        (
            "incident-replicas",
            6,
            "replica-autoscaler (Update) and gitops-sync (Apply) fight over spec.replicas on 6 Deployments in 3 "
            "namespaces",
        ),
        ("incident-hot-loop", 4, "widget-reconciler (Update) rewrites 4 Widgets in 2 namespaces in a hot loop"),
    ],
    ids=["fight-on-six-deployments-in-three-namespaces", "hot-loop-on-four-widgets-in-two-namespaces"],
)
def test_a_recorded_root_cause_on_many_objects_is_one_incident(
    scenario: str, objects: int, summary: str, implementation: str
) -> None:
    """Its objects, namespaces, kind, fields and writers as tests/expectations.py's INCIDENTS has them, its writes
    those of its findings, and a summary that says so."""
    findings = _analyse([capture(scenario)], implementation)
    assert len(findings) == objects
    incident = assert_incident(scenario, findings)
    assert incident.objects == objects
    assert sum(c.writes for c in incident.writers) == sum(c.writes for f in findings for c in f.writers)
    assert incident.summary == summary


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_recorded_incidents_and_an_unrelated_fight_replayed_together_are_never_merged(implementation: str) -> None:
    names = ("incident-replicas", "incident-hot-loop", "fight-three-writers")
    findings = _analyse([capture(n) for n in names], implementation)
    assert len(findings) == 6 + 4 + 1
    incidents = {i.objects: i for i in group(findings)}
    assert sorted(incidents) == [1, 4, 6]
    assert [incidents[n].type for n in (6, 4, 1)] == [FindingType.FIGHT, FindingType.HOT_LOOP, FindingType.FIGHT]
    assert {(f.object.kind, f.object.name) for f in findings if f.id in incidents[1].findings} == {
        ("ConfigMap", "placement")
    }
    # each the incident it is when its capture is replayed alone
    separately: dict[str, set[tuple[str | None, str]]] = {}
    for name in names:
        separately |= _groups(_analyse([capture(name)], implementation))
    assert _groups(findings) == separately


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize(
    ("name", "first"), [("incident-replicas", "incident-replicas-c"), ("incident-hot-loop", "incident-hot-loop-b")]
)
def test_a_recorded_incidents_id_does_not_depend_on_the_order_its_objects_were_seen_in(
    tmp_path: Path, implementation: str, name: str, first: str
) -> None:
    """(The engine never moves its clock backwards: seen object after object, later objects' writes are seen at
    later times. Their findings' times may differ, the incident and its objects may not.)"""
    recorded = _groups(_analyse([capture(name)], implementation))
    reordered = _groups(_analyse([_by_object(name, tmp_path, first)], implementation))
    assert len(recorded) == 1
    assert reordered == recorded


@pytest.mark.parametrize("name", ["incident-replicas", "incident-hot-loop"])
def test_a_recorded_incident_is_the_same_on_either_attribution_implementation(name: str) -> None:
    recorded = [_groups(_analyse([capture(name)], implementation)) for implementation in IMPLEMENTATIONS]
    assert all(groups == recorded[0] for groups in recorded)
