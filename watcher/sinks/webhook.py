"""A JSON POST per finding change, for chat and incident tools.

The payload is `{"text", "event", "finding"}`: `text` is a one-paragraph message that Slack-compatible
incoming webhooks (Slack, Mattermost, Rocket.Chat, ...) show as is; `finding` is the stable JSON of
`fightwatch replay --output json` for programs. The URL and any headers come from a file or an environment
variable (chat webhook URLs are credentials) and appear in no log line or metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from watcher.config import WebhookSettings
from watcher.model import ChangeKind, FindingChange, FindingType
from watcher.sinks.credentials import read_headers, read_secret
from watcher.sinks.http_client import JsonPoster, ssl_context
from watcher.sinks.report import finding_json, finding_page

_TITLES = {
    FindingType.FIGHT: "Controller fight",
    FindingType.HOT_LOOP: "Controller hot loop",
    FindingType.CONFLICT_STORM: "Conflict storm",
    FindingType.APPLY_CONFLICT: "Server-side apply stuck",
    FindingType.NOOP_WRITES: "No-op write loop",
}


def text(change: FindingChange, page: str | None = None) -> str:
    """The chat message: what, where, who, which fields, how to stop it, and where its timeline is (`page`)."""
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


def payload(change: FindingChange, page_base: str | None = None) -> dict[str, Any]:
    """The JSON posted; `page_base`: the watcher's address as users reach it (`serve.external_url`), for `url`."""
    page = finding_page(page_base, change.finding)
    body = {"text": text(change, page), "event": change.kind.value, "finding": finding_json(change.finding)}
    if page is not None:
        body["url"] = page
    return body


class WebhookSink:
    batch_size = 1
    resend_interval = None

    def __init__(
        self, settings: WebhookSettings, *, url: str, headers: dict[str, str], page: str | None = None
    ) -> None:
        self.name = f"webhook:{settings.name}"
        self._page = page
        self.settings = settings
        tls = ssl_context(ca_file=settings.ca_file, verify=settings.tls_verify)
        self._poster = JsonPoster(url, headers=headers, tls=tls)

    @classmethod
    def from_settings(cls, settings: WebhookSettings, *, key: str, page: str | None = None) -> WebhookSink:
        """Read the URL and headers from their file or environment variable; `key` names the config entry."""
        url = read_secret(settings.url, key=f"{key}.url")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{key}.url: not an http(s) URL (the value is not shown: it may be a credential)")
        return cls(settings, url=url, headers=read_headers(settings.headers, key=f"{key}.headers"), page=page)

    def wants(self, change: FindingChange) -> bool:
        """Opened and resolved findings (and updates when asked); a new leader's catch-up only re-posts what
        opened or resolved while no leader was known to deliver (updates of that time are left out)."""
        if change.kind is ChangeKind.UPDATED:
            return self.settings.updates and not change.catch_up
        return True

    def restart(self) -> None:
        """Nothing to forget: each post stands alone."""

    async def send(self, changes: Sequence[FindingChange]) -> None:
        for change in changes:
            await self._poster.post(payload(change, self._page))

    async def close(self) -> None:
        await self._poster.close()


__all__ = ["WebhookSink", "payload", "text"]
