"""What each sink says: Alertmanager alerts, webhook payloads, Event names and notes; and how credentials and
the delivery config are read. Findings come from captures recorded from a real kube-apiserver."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.unit.captures import events
from watcher.config import (
    AlertmanagerSettings,
    Config,
    ConfigError,
    DeliverySettings,
    Secret,
    WebhookSettings,
    parse_config,
)
from watcher.delivery import alertmanager, kube_events, webhook
from watcher.delivery.credentials import CredentialError, read_headers, read_secret
from watcher.delivery.dispatch import Change, Delivery
from watcher.delivery.http_client import JsonPoster
from watcher.delivery.outlets import build_sinks
from watcher.detection.engine import Engine
from watcher.detection.incidents import IncidentBook, group
from watcher.model import ChangeKind, Finding, FindingChange, IncidentChange, ObjectRef, format_time


def _lifecycle(name: str) -> list[FindingChange]:
    engine = Engine(Config().detection)
    changes: list[FindingChange] = []
    for event in events(name, engine.decode):
        changes += engine.process(event)
    changes += engine.advance(max(f.last_seen for f in engine.active()) + 3600)
    return changes


FIGHT = _lifecycle("fight-apply-vs-update-replicas")
CABUNDLE = _lifecycle("fight-cabundle")  # a cluster-scoped object


class _RecordingPoster(JsonPoster):
    """Keeps the alerts a sink posts instead of sending them: the HTTP side is tested against a real Alertmanager."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9/", headers={}, tls=False)
        self.posted: list[list[dict[str, Any]]] = []

    async def post(self, payload: Any) -> None:
        self.posted.append(payload)


def _record_posts(sink: alertmanager.AlertmanagerSink) -> list[list[dict[str, Any]]]:
    """Return the list the sink's posts go to from now on (each one a list of alerts)."""
    poster = _RecordingPoster()
    sink._poster = poster
    return poster.posted


def test_an_active_alert_ends_a_few_resends_ahead_and_a_resolved_one_when_it_resolved() -> None:
    opened, resolved = FIGHT[0].finding, FIGHT[-1].finding
    assert FIGHT[-1].kind is ChangeKind.RESOLVED
    active = alertmanager.alert(opened, now=1000.0, resend_interval=60.0)
    assert active["labels"] == {
        "alertname": "ControllerFightDetected",
        "severity": "warning",
        "type": "fight",
        "namespace": "fight-apply-vs-update-replicas",
        "kind": "Deployment",
        "name": "web",
    }
    annotations = active["annotations"]
    assert annotations["summary"] == opened.summary
    assert annotations["hint"] == opened.hint
    assert annotations["fields"] == "spec.replicas"
    assert "argocd-controller (Apply)" in annotations["writers"]
    assert "custom-autoscaler (Update)" in annotations["writers"]
    assert annotations["runbook_url"].endswith("runbook.md#controllerfightdetected")
    assert active["startsAt"] == format_time(opened.detected_at)
    assert active["endsAt"] == format_time(1000.0 + 4 * 60.0)
    assert resolved.resolved_at is not None
    assert alertmanager.alert(resolved, now=1e10, resend_interval=60.0)["endsAt"] == format_time(resolved.resolved_at)


def test_a_cluster_scoped_object_has_no_namespace_label() -> None:
    labels = alertmanager.alert(CABUNDLE[0].finding, now=0.0, resend_interval=60.0)["labels"]
    assert "namespace" not in labels
    assert labels["kind"] == "ValidatingWebhookConfiguration"


async def test_the_alertmanager_sink_keeps_the_active_set_and_sends_resolved_once() -> None:
    sink = alertmanager.AlertmanagerSink("http://127.0.0.1:9/", AlertmanagerSettings())
    posted = _record_posts(sink)
    await sink.send(FIGHT[:1] + CABUNDLE[:1])
    assert len(posted[-1]) == 2
    await sink.send([])  # a re-send
    assert [a["labels"]["name"] for a in posted[-1]] == ["web", "fightwatch-test-validate"]
    await sink.send(FIGHT[-1:])
    assert [a["labels"]["name"] for a in posted[-1]] == ["fightwatch-test-validate", "web"]
    await sink.send([])
    assert [a["labels"]["name"] for a in posted[-1]] == ["fightwatch-test-validate"]
    assert sink.name == "alertmanager:127.0.0.1:9"


async def test_a_new_leader_s_alertmanager_sink_re_sends_the_active_set_it_is_told() -> None:
    sink = alertmanager.AlertmanagerSink("http://127.0.0.1:9/", AlertmanagerSettings())
    posted = _record_posts(sink)
    await sink.send(FIGHT[:1] + CABUNDLE[:1])  # leading once, then a standby while CABUNDLE's fight resolved
    sink.restart()  # leading again: the catch-up tells the current findings
    await sink.send([replace(FIGHT[0], catch_up=True)])
    assert [a["labels"]["name"] for a in posted[-1]] == ["web"]


def test_alertmanager_urls_must_be_http() -> None:
    with pytest.raises(ValueError, match="not an http"):
        alertmanager.AlertmanagerSink("alertmanager:9093", AlertmanagerSettings())


def test_the_webhook_payload_has_slack_text_and_the_stable_finding_json() -> None:
    body = webhook.payload(FIGHT[0])
    assert body["event"] == "opened"
    assert body["finding"]["object"]["name"] == "web"
    assert body["finding"]["state"] == "active"
    assert body["text"].startswith(
        ":rotating_light: Controller fight on Deployment.apps fight-apply-vs-update-replicas/web"
    )
    assert "Fields: spec.replicas" in body["text"]
    assert "Hint: " in body["text"]
    resolved = webhook.payload(FIGHT[-1])
    assert resolved["event"] == "resolved"
    assert resolved["text"].startswith(":white_check_mark: Controller fight resolved")


def test_the_webhook_posts_updates_only_when_asked() -> None:
    update = next(c for c in _lifecycle("fight-three-writers") if c.kind is ChangeKind.UPDATED)
    quiet = webhook.WebhookSink(WebhookSettings(name="chat", url=Secret(env="X")), url="http://h/", headers={})
    chatty = webhook.WebhookSink(
        WebhookSettings(name="chat", url=Secret(env="X"), updates=True), url="http://h/", headers={}
    )
    assert not quiet.wants(update)
    assert quiet.wants(FIGHT[0])
    assert quiet.wants(FIGHT[-1])
    assert chatty.wants(update)


def test_a_new_leader_s_webhook_posts_what_opened_or_resolved_meanwhile_but_no_update() -> None:
    """The catch-up holds only what opened or resolved while no leader was known to deliver (the service picks
    those): posted; the still-active findings it re-tells as updates are not, even with `updates: true`."""
    chatty = webhook.WebhookSink(
        WebhookSettings(name="chat", url=Secret(env="X"), updates=True), url="http://h/", headers={}
    )
    still_active = FindingChange(ChangeKind.UPDATED, FIGHT[0].finding, catch_up=True)
    assert not chatty.wants(still_active)
    assert chatty.wants(replace(FIGHT[0], catch_up=True))
    assert chatty.wants(replace(FIGHT[-1], catch_up=True))


def _named(finding: Finding, name: str) -> Finding:
    return replace(finding, object=ObjectRef("rbac.authorization.k8s.io/v1", "ClusterRole", None, name, "u"))


@pytest.mark.parametrize("name", ["web", "system:controller:Job_Thing", "x" * 253, "..."])
def test_event_names_are_valid_and_stable_whatever_the_object_is_called(name: str) -> None:
    finding = _named(FIGHT[0].finding, name)
    event_name = kube_events.event_name(finding)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", event_name)
    assert len(event_name) <= 253
    assert event_name == kube_events.event_name(finding)
    assert event_name != kube_events.event_name(finding, resolved=True)
    # A cluster-scoped object: the one namespace each Events API accepts for it on every server version.
    assert kube_events.event_namespace(finding, kube_events.EVENTS_V1) == "kube-system"
    assert kube_events.event_namespace(finding, kube_events.CORE_V1) == "default"


def test_the_event_note_names_writers_fields_rate_and_hint_within_1kib() -> None:
    finding = FIGHT[0].finding
    note = kube_events.note(finding)
    assert "argocd-controller (Apply)" in note
    assert "spec.replicas" in note
    assert "writes/min" in note
    assert f"Hint: {finding.hint}" in note
    long = replace(finding, fields=tuple(f"metadata.labels.l{i}" for i in range(200)))
    assert len(kube_events.note(long).encode()) <= 1024
    assert kube_events.note(FIGHT[-1].finding).startswith("Resolved, quiet since ")


def test_secrets_come_from_files_or_the_environment_and_errors_never_show_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "url").write_text("https://hooks.example/T0/B0/s3cret\n")
    assert read_secret(Secret(file=tmp_path / "url"), key="k") == "https://hooks.example/T0/B0/s3cret"
    monkeypatch.setenv("FW_TOKEN", " tok ")
    assert read_secret(Secret(env="FW_TOKEN"), key="k") == "tok"
    with pytest.raises(CredentialError, match=r"delivery.x: \$FW_MISSING is empty or unset"):
        read_secret(Secret(env="FW_MISSING"), key="delivery.x")
    with pytest.raises(CredentialError, match="cannot read"):
        read_secret(Secret(file=tmp_path / "nope"), key="k")
    (tmp_path / "headers").write_text("Authorization: Bearer abc\nX-Count: 3\n")
    assert read_headers(Secret(file=tmp_path / "headers"), key="k") == {"Authorization": "Bearer abc", "X-Count": "3"}
    (tmp_path / "bad").write_text("- s3cret-list\n")
    with pytest.raises(CredentialError) as info:
        read_headers(Secret(file=tmp_path / "bad"), key="k")
    assert "s3cret" not in str(info.value)
    (tmp_path / "not-a-url").write_text("s3cret")
    with pytest.raises(ValueError, match="not an http") as bad_url:
        webhook.WebhookSink.from_settings(
            WebhookSettings(name="x", url=Secret(file=tmp_path / "not-a-url")), key="delivery.webhooks.0"
        )
    assert "s3cret" not in str(bad_url.value)


def test_the_config_builds_one_sink_per_alertmanager_and_webhook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_HOOK", "http://127.0.0.1:1/hook")
    monkeypatch.setenv("FW_AM_TOKEN", "t")
    config = parse_config(
        {
            "delivery": {
                "alertmanager": {
                    "urls": ["http://am-0:9093", "https://am-1"],
                    "bearer_token": {"env": "FW_AM_TOKEN"},
                },
                "webhooks": [{"name": "chat", "url": {"env": "FW_HOOK"}}],
            }
        },
        source="test",
    )
    sinks = build_sinks(config.delivery, api_client=None)
    assert [s.name for s in sinks] == ["alertmanager:am-0:9093", "alertmanager:am-1:443", "webhook:chat"]


@pytest.mark.parametrize(
    ("delivery", "message"),
    [
        ({"webhooks": [{"name": "chat", "url": "https://hooks/x"}]}, "delivery.webhooks.0.url"),
        ({"webhooks": [{"name": "chat", "url": {"file": "/a", "env": "B"}}]}, "exactly one of file or env"),
        ({"webhooks": [{"name": "Chat Room", "url": {"env": "B"}}]}, "delivery.webhooks.0.name"),
        ({"events": {"api": "v2"}}, "delivery.events.api"),
        ({"queue_sise": 3}, "did you mean 'queue_size'"),
        ({"alertmanager": {"resend_interval": "soon"}}, "delivery.alertmanager.resend_interval"),
    ],
)
def test_delivery_config_errors_name_the_key(delivery: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config({"delivery": delivery}, source="test")


def test_metrics_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=re.escape("metrics.top_managers")):
        parse_config({"metrics": {"top_managers": 0}}, source="test")


def test_with_the_watchers_address_every_message_links_to_the_findings_timeline() -> None:
    finding = FIGHT[0].finding
    page = f"https://fightwatch.example.com/findings#finding-{finding.id}"
    assert f"Timeline: {page} " in kube_events.note(finding, page)
    annotations = alertmanager.alert(finding, now=0.0, resend_interval=60.0, page="https://fightwatch.example.com")
    assert annotations["annotations"]["page_url"] == page
    body = webhook.payload(FindingChange(ChangeKind.OPENED, finding), "https://fightwatch.example.com")
    assert body["url"] == page
    assert body["text"].endswith(f"Timeline: {page}")
    # without one, nothing points anywhere
    assert "Timeline" not in kube_events.note(finding)
    assert "page_url" not in alertmanager.alert(finding, now=0.0, resend_interval=60.0)["annotations"]
    assert "url" not in webhook.payload(FindingChange(ChangeKind.OPENED, finding))


@pytest.mark.parametrize("url", ["fightwatch.example.com", "ftp://x", "https://x/findings?a=1", "https://x/#y"])
def test_the_watchers_address_must_be_an_http_url_without_query_or_fragment(url: str) -> None:
    with pytest.raises(ConfigError, match=r"serve\.external_url"):
        parse_config({"serve": {"external_url": url}}, source="test")
    assert parse_config({"serve": {"external_url": "https://x/fw/"}}, source="t").serve.external_url == "https://x/fw"


def test_the_event_note_names_the_incident_a_finding_is_part_of() -> None:
    finding = FIGHT[0].finding
    twin = replace(finding, id="0" * 16, object=replace(finding.object, name="web-2", uid="another"))
    (incident,) = group([finding, twin])
    note = kube_events.note(finding, None, incident)
    assert f"Incident {incident.id} on 2 objects: {incident.summary}. " in note
    assert note.startswith(f"{finding.summary}. Incident ")
    assert len(kube_events.note(replace(finding, summary="x" * 2000), None, incident).encode()) <= 1024


REPLICAS = _lifecycle("incident-replicas")  # one fight on 6 Deployments in 3 namespaces (recorded), then resolved


def _active_incident() -> tuple[IncidentChange, list[IncidentChange]]:
    book = IncidentBook()
    told = [c for change in REPLICAS for c in book.apply([change])]
    active = [c for c in told if c.kind is not ChangeKind.RESOLVED]
    return max(active, key=lambda c: c.incident.objects), told


def test_an_incident_is_one_alert_labelled_by_its_id_with_its_size_and_a_few_examples() -> None:
    change, _ = _active_incident()
    incident = change.incident
    assert incident.objects == 6
    body = alertmanager.incident_alert(incident, now=0.0, resend_interval=60.0, page="https://fw.example.com")
    assert body["labels"] == {
        "alertname": "ControllerFightDetected",
        "severity": "warning",
        "type": "fight",
        "incident": incident.id,
    }
    notes = body["annotations"]
    assert notes["summary"] == incident.summary
    assert "fight over spec.replicas on 6 Deployments in 3 namespaces" in notes["summary"]
    assert notes["objects"] == "6"
    assert notes["examples"].endswith(" and 3 more")
    assert len(notes["examples"].split(", ")) == 3
    assert notes["namespaces"] == "incident-replicas-a, incident-replicas-b, incident-replicas-c"
    assert notes["page_url"] == f"https://fw.example.com/findings?incident={incident.id}"
    assert "autoscaler" in notes["hint"]


async def test_per_incident_alertmanager_gets_one_alert_per_incident_and_ends_it_once() -> None:
    sink = alertmanager.AlertmanagerSink("http://127.0.0.1:9/", AlertmanagerSettings())
    assert sink.per_incident
    posted = _record_posts(sink)
    delivery = Delivery([sink], DeliverySettings(queue_size=1000))
    await delivery.start()
    delivery.submit([c for c in REPLICAS if c.kind is not ChangeKind.RESOLVED])
    await delivery.stop()
    assert {len(p) for p in posted} == {1}  # one alert, however many objects it grew to
    assert posted[-1][0]["annotations"]["objects"] == "6"
    assert len({p[0]["labels"]["incident"] for p in posted}) == 1
    await sink.send(_active_incident()[1][-1:])  # the last finding resolved: the incident resolves
    assert posted[-1][0]["endsAt"] == format_time(_active_incident()[1][-1].incident.resolved_at or 0)
    resolution = posted[-1][0]
    assert resolution["annotations"]["objects"] == "6"  # the incident as a whole ended
    count = len(posted)
    await sink.send([])
    assert len(posted) == count  # nothing active is left to re-send
    assert sink.active == []


def test_the_incident_webhook_payload_names_the_size_examples_and_every_finding() -> None:
    change, told = _active_incident()
    body = webhook.payload(change, "https://fw.example.com")
    assert body["event"] == change.kind.value
    assert body["incident"]["id"] == change.incident.id
    assert body["incident"]["objects"] == 6
    assert len(body["incident"]["examples"]) == 3
    assert [f["incident"] for f in body["findings"]] == [change.incident.id] * 6
    assert body["url"] == f"https://fw.example.com/findings?incident={change.incident.id}"
    assert "on 6 Deployments in 3 namespaces" in body["text"]
    assert "and 3 more" in body["text"]
    assert body["text"].endswith(f"Timelines: {body['url']}")
    resolved = webhook.payload(told[-1])
    assert told[-1].kind is ChangeKind.RESOLVED
    assert resolved["event"] == "resolved"
    assert resolved["text"].startswith(":white_check_mark: Controller fight resolved: ")


def test_alerts_and_webhooks_are_per_incident_unless_the_config_says_per_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FW_HOOK", "http://127.0.0.1:1/hook")
    delivery = {"alertmanager": {"urls": ["http://am:9093"]}, "webhooks": [{"name": "chat", "url": {"env": "FW_HOOK"}}]}
    default = build_sinks(parse_config({"delivery": delivery}, source="test").delivery, api_client=None)
    assert [s.per_incident for s in default] == [True, True]
    per_finding = parse_config({"delivery": delivery | {"per": "finding"}}, source="test").delivery
    assert [s.per_incident for s in build_sinks(per_finding, api_client=None)] == [False, False]
    with pytest.raises(ConfigError, match=re.escape("delivery.per")):
        parse_config({"delivery": {"per": "object"}}, source="test")


def test_an_incident_webhook_posts_when_it_opens_doubles_and_resolves() -> None:
    _, told = _active_incident()
    quiet = webhook.WebhookSink(WebhookSettings(name="chat", url=Secret(env="X")), url="http://h/", headers={})
    posted = [(c.kind, c.incident.objects) for c in told if quiet.wants(c)]
    sizes = [c.incident.objects for c in told if c.kind is not ChangeKind.RESOLVED]
    assert max(sizes) == 6  # it grew from 1 to 6, then shrank as its findings resolved one by one
    assert len(told) > len(posted)  # (growth by one object, and shrinking, is not posted)
    assert posted[0] == (ChangeKind.OPENED, sizes[0])
    updates = [n for kind, n in posted if kind is ChangeKind.UPDATED]
    assert updates
    assert all(n >= 2 * before for before, n in zip([sizes[0], *updates], updates, strict=False))
    assert posted[-1] == (ChangeKind.RESOLVED, 6)
    chatty = webhook.WebhookSink(
        WebhookSettings(name="chat", url=Secret(env="X"), updates=True), url="http://h/", headers={}
    )
    assert all(chatty.wants(c) for c in told)


def test_with_sharding_each_shard_tells_its_part_of_an_incident_under_its_own_labels() -> None:
    change, _ = _active_incident()
    alone = alertmanager.incident_alert(change.incident, now=0.0, resend_interval=60.0)
    assert "shard" not in alone["labels"]
    sharded = alertmanager.AlertmanagerSink("http://am:9093", AlertmanagerSettings(), shard=1)
    labels = sharded._alert(change.incident, 0.0)["labels"]
    assert labels == alone["labels"] | {"shard": "1"}
    assert "shard" not in sharded._alert(FIGHT[0].finding, 0.0)["labels"]  # (a finding is in one shard anyway)


async def test_events_tell_every_finding_alerts_and_webhooks_only_root_causes() -> None:
    """A ReplicaSet churned because its Deployment is fought over gets its Event (naming the fight it follows
    from); Alertmanager and webhooks tell only the fight's incident."""
    engine = Engine(Config().detection)
    changes = [c for event in events("cascade-replicas", engine.decode) for c in engine.process(event)]
    assert {c.finding.related is not None for c in changes} == {True, False}

    class Recorder:
        resend_interval = None
        batch_size = 1000

        def __init__(self, name: str, *, per_incident: bool, every_finding: bool) -> None:
            self.name, self.per_incident, self.every_finding = name, per_incident, every_finding
            self.sent: list[Any] = []

        def wants(self, change: object) -> bool:  # noqa: ARG002
            return True

        def restart(self) -> None:
            return None

        async def send(self, batch: Sequence[Change]) -> None:
            self.sent += batch

        async def close(self) -> None:
            return None

    kube = Recorder("events", per_incident=False, every_finding=kube_events.KubeEventsSink.every_finding)
    alerts = Recorder("alerts", per_incident=True, every_finding=alertmanager.AlertmanagerSink.every_finding)
    delivery = Delivery([kube, alerts], DeliverySettings(queue_size=1000))
    await delivery.start()
    delivery.submit(changes)
    await delivery.stop()
    assert {c.finding.object.kind for c in kube.sent if c.kind is ChangeKind.OPENED} == {"Deployment", "ReplicaSet"}
    assert any("follows from the fight on its controller" in c.finding.summary for c in kube.sent)
    assert {c.incident.id for c in alerts.sent} == {group(engine.active())[0].id}  # the fight's incident only
    assert {f.type.value for c in alerts.sent for f in c.findings} == {"fight"}
