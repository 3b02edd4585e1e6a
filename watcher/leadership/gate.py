"""Deliver only while leading: this replica's leader elector, and delivery gated on what it says.

With leader election every replica watches, detects and serves its endpoints, and only the Lease holder
delivers: delivery starts paused, resumes when this replica starts leading, with a catch-up of what the previous
leader may not have delivered (`catch_up`), and pauses the moment it stops. With sharding (`sharding.shard` of
`total_shards`) each shard elects its own leader, on a Lease of its own.

The election itself (the Lease, its timings, losing it at once) is `leadership.lease`; delivery's pause and resume
are `delivery.dispatch`'s. This module joins the two, so it sits above both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import structlog

from watcher.config import Config
from watcher.delivery.dispatch import Delivery
from watcher.metrics.exporter import Metrics
from watcher.model import ChangeKind, Finding, FindingChange, format_observed
from watcher.sources.kube import Connection

if TYPE_CHECKING:  # (imported where leader election is on: kubernetes-asyncio's election modules, 0.2 MiB)
    from watcher.leadership.lease import LeaderChange, LeaderElector

log = structlog.get_logger("fightwatch")


class Findings(Protocol):
    """What a new leader's catch-up reads: the findings detection holds (the command's `pipeline.Pipeline`)."""

    def active(self) -> list[Finding]: ...

    def resolved(self) -> list[Finding]: ...


def leader_elector(
    config: Config, connection: Connection, *, delivery: Delivery, metrics: Metrics, findings: Findings
) -> LeaderElector:
    """Build this replica's elector, on its shard's Lease; delivery follows what it says (`DeliveryGate`).

    The leader metric reads 0 until the elector says this replica leads.
    """
    from watcher.leadership.lease import LeaderElector, identity, lease_namespace  # noqa: PLC0415

    settings = config.leader_election
    sharding = config.sharding
    name = settings.lease_name
    if sharding.total_shards > 1:
        name = f"{name}-shard-{sharding.shard}"
    metrics.set_leader(False)
    return LeaderElector(
        connection.api_client,
        settings,
        lease_name=name,
        namespace=lease_namespace(settings, config.kube.service_account_dir),
        identity=identity(settings),
        on_change=DeliveryGate(delivery, metrics=metrics, findings=findings).on_change,
    )


class DeliveryGate:
    """Delivery open while this replica leads, and only then."""

    def __init__(self, delivery: Delivery, *, metrics: Metrics, findings: Findings) -> None:
        self.delivery = delivery
        self.metrics = metrics
        self.findings = findings

    def on_change(self, change: LeaderChange) -> None:
        """Resume delivery with a catch-up when leadership starts; pause it the moment leadership ends."""
        self.metrics.set_leader(change.leading)
        self.metrics.leader_change("acquired" if change.leading else change.reason)
        if not change.leading:
            self.delivery.pause()
            return
        changes = catch_up(self.findings, change.since)
        log.info("delivering", catch_up=len(changes), since=format_observed(change.since) if change.since else None)
        self.delivery.resume(changes)


def catch_up(findings: Findings, since: float | None) -> list[FindingChange]:
    """List what a new leader tells delivery first.

    Every active finding (sinks make it idempotent: the Event is created only if missing, Alertmanager gets its
    active set again), and findings that opened or resolved after `since` (when no leader was known to deliver)
    as opened or resolved, which webhooks post. `since` None: no leader was ever seen, everything may be new.
    """
    changes = [
        FindingChange(ChangeKind.RESOLVED, finding, catch_up=True)
        for finding in findings.resolved()
        if since is None or (finding.resolved_at or 0.0) >= since
    ]
    for finding in findings.active():
        new = since is None or finding.detected_at >= since
        changes.append(FindingChange(ChangeKind.OPENED if new else ChangeKind.UPDATED, finding, catch_up=True))
    return changes


__all__ = ["DeliveryGate", "catch_up", "leader_elector"]
