"""Incidents (or findings) as alerts in Alertmanager, for routing, silencing and paging.

Alerts go to Alertmanager's API v2, `POST /api/v2/alerts`.

Per incident (`delivery.per`, the default), one alert per incident: labelled by its type and id (stable while it
grows and shrinks, so routing and silences hold), with its object count, namespaces, kinds and a few example
objects in the annotations; with sharding, one per incident and shard (each shard's leader tells its own objects).
Per finding, one alert per object, labelled by the object.

Alertmanager expects its clients to re-send active alerts (as Prometheus does), so this sink keeps the active
set and posts all of it on every change and every `resend_interval`. Each active alert carries an `endsAt` a
few re-send intervals ahead: if fightwatch stops, Alertmanager resolves the alerts on its own; a resolved
finding is sent once more with `endsAt` set to its resolution time. One sink per Alertmanager URL, so one
member of an HA cluster being down does not hold back the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from watcher.config import AlertmanagerSettings
from watcher.delivery.dispatch import Change
from watcher.delivery.http_client import JsonPoster, ssl_context
from watcher.model import ChangeKind, Finding, FindingChange, FindingType, Incident, format_time
from watcher.rendering.output import examples, finding_page, incident_page

ALERT_NAMES = {
    FindingType.FIGHT: "ControllerFightDetected",
    FindingType.HOT_LOOP: "ControllerHotLoop",
    FindingType.CONFLICT_STORM: "KubernetesConflictStorm",
    FindingType.APPLY_CONFLICT: "ServerSideApplyStuck",
    FindingType.NOOP_WRITES: "ControllerNoopWrites",
}
SEVERITY = "warning"
RUNBOOK = "https://github.com/fightwatch/fightwatch/blob/main/docs/runbook.md"
RUNBOOK_ANCHORS = {t: name.lower() for t, name in ALERT_NAMES.items()}
ENDS_AFTER_RESENDS = 4  # an active alert ends this many re-send intervals ahead unless re-sent (as Prometheus)


def alert(
    finding: Finding,
    *,
    now: float,
    resend_interval: float,
    generator_url: str | None = None,
    page: str | None = None,
) -> dict[str, Any]:
    """Return the Alertmanager API v2 `postableAlert` of a finding.

    `page`: the watcher's address as users reach it, for a `page_url` annotation linking to the finding's timeline.
    """
    ref = finding.object
    labels = {
        "alertname": ALERT_NAMES[finding.type],
        "severity": SEVERITY,
        "type": finding.type.value,
        "kind": ref.kind or ref.resource,
        "name": ref.name,
    }
    if ref.namespace:  # (cluster-scoped objects have none; an empty label is no label in Alertmanager)
        labels["namespace"] = ref.namespace
    annotations = {
        "summary": finding.summary,
        "object": ref.display(),
        "writers": ", ".join(f"{c.writer.display()} x{c.writes}" for c in finding.writers),
        "fields": ", ".join(finding.fields),
        "hint": finding.hint,
        "writes_per_minute": f"{finding.writes_per_minute:g}",
        "runbook_url": f"{RUNBOOK}#{RUNBOOK_ANCHORS[finding.type]}",
        "finding_id": finding.id,
    }
    if (url := finding_page(page, finding)) is not None:
        annotations["page_url"] = url
    if finding.type is FindingType.FIGHT:
        annotations["handovers"] = str(finding.handovers)
    if finding.clients:
        annotations["clients"] = ", ".join(
            f"{c.display()} {c.conflicts} conflicts/{c.writes} writes" for c in finding.clients
        )
    ends = finding.resolved_at if finding.resolved_at is not None else now + ENDS_AFTER_RESENDS * resend_interval
    return _postable(labels, annotations, finding.detected_at, ends, generator_url)


def incident_alert(
    incident: Incident,
    *,
    now: float,
    resend_interval: float,
    generator_url: str | None = None,
    page: str | None = None,
    shard: int | None = None,
) -> dict[str, Any]:
    """Return the Alertmanager API v2 `postableAlert` of an incident (see the module docstring).

    `shard`: labelled when sharded, as each shard's leader tells its part of an incident (one alert under one label set
    would take the annotations of whichever shard posted last, and end when any one shard's part ends).
    """
    labels = {
        "alertname": ALERT_NAMES[incident.type],
        "severity": SEVERITY,
        "type": incident.type.value,
        "incident": incident.id,
    }
    if shard is not None:
        labels["shard"] = str(shard)
    annotations = {
        "summary": incident.summary,
        "objects": str(incident.objects),
        "examples": examples(incident),
        "namespaces": ", ".join(n or "(cluster-scoped)" for n in incident.namespaces),
        "kinds": ", ".join(incident.kinds),
        "writers": ", ".join(f"{c.writer.display()} x{c.writes}" for c in incident.writers),
        "fields": ", ".join(incident.fields),
        "hint": incident.hint,
        "writes_per_minute": f"{incident.writes_per_minute:g}",
        "runbook_url": f"{RUNBOOK}#{RUNBOOK_ANCHORS[incident.type]}",
        "incident_id": incident.id,
    }
    if (url := incident_page(page, incident)) is not None:
        annotations["page_url"] = url
    ends = incident.resolved_at if incident.resolved_at is not None else now + ENDS_AFTER_RESENDS * resend_interval
    return _postable(labels, annotations, incident.detected_at, ends, generator_url)


def _postable(
    labels: dict[str, str], annotations: dict[str, str], starts: float, ends: float, generator_url: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "labels": labels,
        "annotations": annotations,
        "startsAt": format_time(starts),
        "endsAt": format_time(ends),
    }
    if generator_url:
        body["generatorURL"] = generator_url
    return body


class AlertmanagerSink:
    """Keep one Alertmanager told of the active incidents (or findings)."""

    batch_size = 100
    every_finding = False

    def __init__(
        self,
        url: str,
        settings: AlertmanagerSettings,
        *,
        per_incident: bool = True,
        bearer_token: str | None = None,
        page: str | None = None,
        shard: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts = urlsplit(url)
        self._page = page
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise ValueError(f"delivery.alertmanager.urls: {url!r} is not an http(s) URL")
        self.name = f"alertmanager:{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        self.settings = settings
        self.per_incident = per_incident
        self.shard = shard
        self.resend_interval: float | None = settings.resend_interval
        self._clock = clock
        headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else {}
        self._poster = JsonPoster(
            url.rstrip("/") + "/api/v2/alerts",
            headers=headers,
            tls=ssl_context(ca_file=settings.ca_file, verify=settings.tls_verify),
        )
        self._active: dict[str, Finding | Incident] = {}

    @property
    def active(self) -> list[Finding | Incident]:
        return list(self._active.values())

    def wants(self, change: Change) -> bool:  # noqa: ARG002 - every change alters the alert set
        return True

    def restart(self) -> None:
        """Forget the active set.

        A new leader's catch-up tells every active incident (or finding) again: Alertmanager merges alerts with the same
        labels, so re-sending what the previous leader sent is the normal re-send.
        """
        self._active.clear()

    async def send(self, changes: Sequence[Change]) -> None:
        resolved: list[Finding | Incident] = []
        for change in changes:
            subject = change.finding if isinstance(change, FindingChange) else change.incident
            if change.kind is ChangeKind.RESOLVED:
                self._active.pop(subject.id, None)
                resolved.append(subject)
            else:
                self._active[subject.id] = subject
        now = self._clock()
        told = [*self._active.values(), *resolved]
        if told:
            await self._poster.post([self._alert(subject, now) for subject in told])

    def _alert(self, subject: Finding | Incident, now: float) -> dict[str, Any]:
        interval, url = self.settings.resend_interval, self.settings.generator_url
        if isinstance(subject, Finding):
            return alert(subject, now=now, resend_interval=interval, generator_url=url, page=self._page)
        return incident_alert(
            subject, now=now, resend_interval=interval, generator_url=url, page=self._page, shard=self.shard
        )

    async def close(self) -> None:
        await self._poster.close()


__all__ = ["ALERT_NAMES", "AlertmanagerSink", "alert", "incident_alert"]
