"""A JSON POST per incident change (or per finding change), for chat and incident tools.

Per incident (`delivery.per`, the default) the payload is `{"text", "event", "incident", "findings"}`: `incident` is
the JSON of `/api/v1/incidents`, `findings` that of its findings (the most severe first, MAX_FINDINGS at most). An
incident is posted when it opens, again (`event` "updated") each time it has at least doubled in objects since it
was last posted, and when it resolves (with every object it had); `updates: true` posts every change. Per finding
the payload is `{"text", "event", "finding"}`, `finding` being the stable JSON of `fightwatch replay --output json`.
`text` is a one-paragraph message that Slack-compatible incoming webhooks (Slack, Mattermost, Rocket.Chat, ...) show
as is. The URL and any headers come from a file or an environment variable (chat webhook URLs are credentials) and
appear in no log line or metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from watcher.config import WebhookSettings
from watcher.delivery.credentials import read_headers, read_secret
from watcher.delivery.dispatch import Change
from watcher.delivery.http_client import JsonPoster, ssl_context
from watcher.model import ChangeKind, FindingChange, FindingType, IncidentChange
from watcher.rendering.output import examples, finding_json, finding_page, incident_json, incident_page

MAX_FINDINGS = 20  # findings posted with an incident (its JSON lists every finding's id)

_TITLES = {
    FindingType.FIGHT: "Controller fight",
    FindingType.HOT_LOOP: "Controller hot loop",
    FindingType.CONFLICT_STORM: "Conflict storm",
    FindingType.APPLY_CONFLICT: "Server-side apply stuck",
    FindingType.NOOP_WRITES: "No-op write loop",
}


def text(change: FindingChange, page: str | None = None) -> str:
    """Write the chat message: what, where, who, which fields, how to stop it.

    And where its timeline is (`page`).
    """
    finding = change.finding
    title = _TITLES[finding.type]
    where = finding.object.display()
    if change.kind is ChangeKind.RESOLVED:
        return f":white_check_mark: {title} resolved on {where}: {finding.summary}."
    icon = ":rotating_light:" if change.kind is ChangeKind.OPENED else ":warning:"
    verb = "on" if change.kind is ChangeKind.OPENED else "still going on"
    fields = ", ".join(finding.fields) or "-"
    timeline = f" Timeline: {page}" if page else ""
    return f"{icon} {title} {verb} {where}: {finding.summary}. Fields: {fields}. Hint: {finding.hint}{timeline}"


def incident_text(change: IncidentChange, page: str | None = None) -> str:
    """Write the chat message of an incident.

    What, on how many objects (a few named), who, which fields, how to stop it, and where its findings are (`page`).
    """
    incident = change.incident
    title = _TITLES[incident.type]
    if change.kind is ChangeKind.RESOLVED:
        return f":white_check_mark: {title} resolved: {incident.summary}."
    icon = ":rotating_light:" if change.kind is ChangeKind.OPENED else ":warning:"
    verb = "" if change.kind is ChangeKind.OPENED else " still going on"
    objects = f" Objects: {examples(incident)}." if incident.objects > 1 else ""
    fields = ", ".join(incident.fields) or "-"
    timeline = f" Timelines: {page}" if page else ""
    return f"{icon} {title}{verb}: {incident.summary}.{objects} Fields: {fields}. Hint: {incident.hint}{timeline}"


def payload(change: Change, page_base: str | None = None) -> dict[str, Any]:
    """Return the JSON posted.

    `page_base`: the watcher's address as users reach it (`serve.external_url`), for `url`.
    """
    if isinstance(change, FindingChange):
        page = finding_page(page_base, change.finding)
        body: dict[str, Any] = {
            "text": text(change, page),
            "event": change.kind.value,
            "finding": finding_json(change.finding),
        }
    else:
        incident = change.incident
        page = incident_page(page_base, incident)
        body = {
            "text": incident_text(change, page),
            "event": change.kind.value,
            "incident": incident_json(incident),
            "findings": [finding_json(f, incident.id) for f in change.findings[:MAX_FINDINGS]],
        }
    if page is not None:
        body["url"] = page
    return body


class WebhookSink:
    batch_size = 1
    resend_interval = None
    every_finding = False

    def __init__(
        self,
        settings: WebhookSettings,
        *,
        url: str,
        headers: dict[str, str],
        page: str | None = None,
        per_incident: bool = True,
    ) -> None:
        self.name = f"webhook:{settings.name}"
        self.per_incident = per_incident
        self._posted: dict[str, int] = {}  # active incident id -> its objects when last posted
        self._page = page
        self.settings = settings
        tls = ssl_context(ca_file=settings.ca_file, verify=settings.tls_verify)
        self._poster = JsonPoster(url, headers=headers, tls=tls)

    @classmethod
    def from_settings(
        cls, settings: WebhookSettings, *, key: str, page: str | None = None, per_incident: bool = True
    ) -> WebhookSink:
        """Read the URL and headers from their file or environment variable; `key` names the config entry."""
        url = read_secret(settings.url, key=f"{key}.url")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{key}.url: not an http(s) URL (the value is not shown: it may be a credential)")
        headers = read_headers(settings.headers, key=f"{key}.headers")
        return cls(settings, url=url, headers=headers, page=page, per_incident=per_incident)

    def wants(self, change: Change) -> bool:
        """Take opened and resolved incidents or findings, and an incident that doubled in objects.

        An incident again each time it has doubled in objects since it was last posted (and every update when asked); a
        new leader's catch-up only re-posts what opened or resolved while no leader was known to deliver (updates of
        that time are left out).
        """
        if isinstance(change, IncidentChange):
            posted, objects = self._posted, change.incident.objects
            if change.kind is ChangeKind.RESOLVED:
                posted.pop(change.incident.id, None)
                return True
            last = posted.get(change.incident.id)
            grew = last is not None and objects >= 2 * last
            if change.kind is ChangeKind.OPENED or grew or last is None:
                posted[change.incident.id] = objects
        else:
            grew = False
        if change.kind is ChangeKind.UPDATED:
            return (self.settings.updates or grew) and not change.catch_up
        return True

    def restart(self) -> None:
        """Forget the sizes posted (a new leader's catch-up tells the incidents again)."""
        self._posted.clear()

    async def send(self, changes: Sequence[Change]) -> None:
        for change in changes:
            await self._poster.post(payload(change, self._page))

    async def close(self) -> None:
        await self._poster.close()


__all__ = ["MAX_FINDINGS", "WebhookSink", "incident_text", "payload", "text"]
