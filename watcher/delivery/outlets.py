"""The delivery sinks a config asks for, built with their credentials read (from files or the environment).

The service passes them to `Delivery(build_sinks(config.delivery, api_client=...), config.delivery, ...)`;
without an ApiClient there are no Kubernetes Events (e.g. `replay`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from watcher.config import DeliverySettings
from watcher.delivery.alertmanager import AlertmanagerSink
from watcher.delivery.credentials import read_secret
from watcher.delivery.dispatch import Sink
from watcher.delivery.kube_events import KubeEventsSink
from watcher.delivery.webhook import WebhookSink
from watcher.model import Finding, Incident

if TYPE_CHECKING:  # the ApiClient comes from the service (kubernetes-asyncio loads lazily)
    from kubernetes_asyncio.client import ApiClient


def build_sinks(
    settings: DeliverySettings,
    *,
    api_client: ApiClient | None,
    page: str | None = None,
    incident_of: Callable[[Finding], Incident | None] | None = None,
    shard: int | None = None,
) -> list[Sink]:
    """Build every configured sink.

    Raises CredentialError or ValueError (naming the config key) at start-up. `page`: the watcher's address as users
    reach it (`serve.external_url`), which messages link to; `incident_of`: a finding's incident when it spans other
    objects too, which Events name; `shard`: this process's shard, when sharded (Alertmanager labels its incident alerts
    with it: each shard tells its own part).
    """
    sinks: list[Sink] = []
    if settings.events.enabled and api_client is not None:
        sinks.append(KubeEventsSink(api_client, settings.events, page=page, incident_of=incident_of))
    manager = settings.alertmanager
    token = (
        read_secret(manager.bearer_token, key="delivery.alertmanager.bearer_token")
        if manager.bearer_token is not None
        else None
    )
    per_incident = settings.per == "incident"
    sinks.extend(
        AlertmanagerSink(url, manager, per_incident=per_incident, bearer_token=token, page=page, shard=shard)
        for url in manager.urls
    )
    for index, hook in enumerate(settings.webhooks):
        key = f"delivery.webhooks.{index}"
        sinks.append(WebhookSink.from_settings(hook, key=key, page=page, per_incident=per_incident))
    return sinks


__all__ = ["build_sinks"]
