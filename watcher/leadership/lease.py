"""Leader election on a coordination.k8s.io/v1 Lease, so that of several replicas exactly one delivers.

kubernetes-asyncio's `leaderelection` (LeaderElection, electionconfig.Config, LeaseLock) does the election, with
controller-runtime's timings. This module wraps what it lacks for a service that must never deliver twice:

- Losing the Lease is noticed *at once*: as soon as a read shows another holder, or when no renewal succeeded
  within `renew_deadline` (each attempt is bounded by what is left of it, so a hanging API server cannot keep a
  stale leader delivering). The library itself only gives up after its renew loop has retried for the deadline.
- Every failure of an attempt (connection refused, timeouts, not only API errors, which the library lets escape
  and end the election) is one failed attempt, logged once per episode; the election then goes on.
- Times are written in UTC (the library writes local time with a `Z`), with microseconds even when the second
  is whole (the library then drops renewTime altogether), and `leaseTransitions` counts holder changes.
- `release()` gives the Lease up on a clean shutdown (no holder, duration 1 s): a standby takes over on its next
  attempt instead of waiting for the Lease to expire.
- A new leader learns when it last saw the previous leader renew (`LeaderChange.since`): what was found before
  then, the previous leader delivered; what came after may not have been (see `watcher.leadership.gate.catch_up`).

The identity gets a random suffix (as controller-runtime's does), so a restarted pod is a new candidate: it does
not resume an unexpired Lease with an empty state while a warm standby waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection.electionconfig import Config as ElectionConfig
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from watcher.config import LeaderElectionSettings

log = structlog.get_logger("fightwatch.election")
# The library logs every failed update (two candidates racing for the Lease is normal) with a traceback: this
# module logs what matters, once per episode.
logging.getLogger("kubernetes_asyncio.leaderelection").setLevel(logging.CRITICAL)

_RECORD_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")  # str(datetime), with and without microseconds


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """This replica started or stopped leading.

    `since` (when starting): the wall-clock time a leader (another one seen renewing, or this one before it lost
    the Lease) was last known to hold the Lease, minus `renew_deadline` (what it may have had queued): changes
    before it were delivered. None when no leader was ever seen (everything this replica knows may be new).
    `reason` (when stopping): `lost` (another holder, or no renewal within the deadline) or `released`.
    """

    leading: bool
    since: float | None = None
    reason: str = ""


def lease_namespace(settings: LeaderElectionSettings, service_account_dir: Path) -> str:
    """Return the Lease's namespace: configured, else $POD_NAMESPACE, else the service account's, else `default`."""
    if settings.lease_namespace:
        return settings.lease_namespace
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        return (service_account_dir / "namespace").read_text().strip() or "default"
    return "default"


def identity(settings: LeaderElectionSettings) -> str:
    """holderIdentity: configured as is, else $POD_NAME (else the host name) and a random suffix."""
    if settings.identity:
        return settings.identity
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class _Lock(LeaseLock):
    """LeaseLock with UTC times, leaseTransitions, errors reported (not swallowed) and `release`."""

    def __init__(self, name: str, namespace: str, identity: str, api_client: ApiClient) -> None:
        super().__init__(name, namespace, identity, api_client)
        self.error: ApiException | None = None  # of the last failed request

    async def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        found, record = await super().get(name, namespace)
        self.error = record if isinstance(record, ApiException) and record.status != 404 else None
        return found, record

    async def create(self, name: str, namespace: str, election_record: LeaderElectionRecord) -> bool:
        body = client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=self.update_lease(election_record))
        try:
            await self.api_instance.create_namespaced_lease(namespace, body)
        except ApiException as exc:
            self.error = exc
            return False
        return True

    async def update(self, name: str, namespace: str, updated_record: LeaderElectionRecord) -> bool:
        assert self.lease_reference is not None  # (update follows a get that found the Lease)
        self.lease_reference.spec = self.update_lease(updated_record, self.lease_reference.spec)
        try:
            self.lease_reference = await self.api_instance.replace_namespaced_lease(
                name=name, namespace=namespace, body=self.lease_reference
            )
        except ApiException as exc:
            self.error = exc
            return False
        return True

    def update_lease(self, record: LeaderElectionRecord, current_spec: client.V1LeaseSpec | None = None) -> Any:
        holder = current_spec.holder_identity if current_spec is not None else None
        transitions = (current_spec.lease_transitions or 0) if current_spec is not None else 0
        spec = super().update_lease(record, current_spec)
        if current_spec is not None and holder != record.holder_identity:  # (as client-go: a released one too)
            spec.lease_transitions = transitions + 1
        return spec

    def election_record(self, lease: client.V1Lease) -> LeaderElectionRecord:
        """Return the record with the Lease's times in the library's format (local time, as `str(datetime)`)."""
        record: LeaderElectionRecord = super().election_record(lease)
        spec = lease.spec
        if spec is not None:
            record.acquire_time = _record_time(spec.acquire_time) if spec.acquire_time else None
            record.renew_time = _record_time(spec.renew_time) if spec.renew_time else None
        return record

    def time_str_to_iso(self, str_time: str | None) -> str | None:
        """Convert a record time (local, as `str(datetime)`) to the Lease's MicroTime: UTC, with microseconds."""
        for fmt in _RECORD_FORMATS:
            try:
                moment = datetime.strptime(str_time or "", fmt)  # noqa: DTZ007 - the library's local time
            except ValueError:
                continue
            return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return None

    async def release(self) -> bool:
        """Give the Lease up if this identity holds it: no holder, 1 s duration. True when it was released."""
        lease = await self.api_instance.read_namespaced_lease(self.name, self.namespace)
        spec = lease.spec
        if spec is None or spec.holder_identity != self.identity:
            return False
        now = datetime.now(UTC)
        released = client.V1Lease(  # (no holderIdentity: nobody holds it)
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, resource_version=lease.metadata.resource_version
            ),
            spec=client.V1LeaseSpec(
                lease_duration_seconds=1,
                # (a MicroTime must show its microseconds: a whole second would be written without them)
                renew_time=now if now.microsecond else now.replace(microsecond=1),
                acquire_time=spec.acquire_time,
                lease_transitions=spec.lease_transitions,
            ),
        )
        await self.api_instance.replace_namespaced_lease(name=self.name, namespace=self.namespace, body=released)
        return True


def _record_time(moment: datetime) -> str:
    return str(moment.astimezone().replace(tzinfo=None))


class _Lost(Exception):  # noqa: N818 - a signal to leave the library's renew loop, not an error
    """Leadership ended: another holder took the Lease, or no renewal succeeded within the deadline."""


class _Election(LeaderElection):
    """The library's election, each attempt bounded and judged by the elector, and a standby's attempts timed.

    The library dates another holder's renewal when it *sees* it, up to a poll (`retry_period`) after it happened,
    and retries every `retry_period` after that, so a standby took over up to lease_duration + 2 x retry_period
    after the leader's last renewal. Here a renewal seen is dated `retry_period` earlier (when the previous poll
    did not show it yet: the earliest it can have happened, if polls succeed), and the standby tries again exactly
    when the Lease then expires: within lease_duration of the leader's last renewal. That is safe because the
    leader stops delivering `renew_deadline` after the *start* of its last successful renewal, and the config
    keeps lease_duration - retry_period longer than renew_deadline.
    """

    def __init__(self, config: ElectionConfig, lock: _Lock, elector: LeaderElector) -> None:
        super().__init__(config)
        self._lock = lock
        self._elector = elector

    async def acquire(self) -> bool:
        while True:
            if await self.try_acquire_or_renew():
                return True
            await asyncio.sleep(self._next_attempt())

    def _next_attempt(self) -> float:
        """Seconds to the next attempt of a candidate: the retry period, or less when the Lease expires sooner."""
        retry = float(self.election_config.retry_period)
        record = self.observed_record
        if record is None or record.holder_identity in (None, self._elector.identity):
            return retry
        expires = self.observed_time_milliseconds / 1000 + self.election_config.lease_duration
        return min(retry, max(0.05, expires - time.time()))

    async def try_acquire_or_renew(self) -> bool:
        elector = self._elector
        started = time.monotonic()
        seen = self.observed_time_milliseconds
        error: BaseException | None = None
        try:
            async with asyncio.timeout(elector.attempt_timeout()):
                renewed: bool = await super().try_acquire_or_renew()
        except Exception as exc:  # any failure is a failed attempt (the library lets non-API errors escape)
            error, renewed = exc, False
        record = self.observed_record
        holder = record.holder_identity if record is not None else None
        if self.observed_time_milliseconds != seen and holder not in (None, elector.identity):
            # Another holder's renewal, seen now: it happened after the previous poll, a retry period ago.
            earliest = self.observed_time_milliseconds - int(self.election_config.retry_period * 1000)
            self.observed_time_milliseconds = max(seen, earliest)
        elector.after_attempt(
            renewed=renewed,
            holder=holder,
            changed_at=self.observed_time_milliseconds / 1000,
            error=error or (None if renewed else self._lock.error),
            started=started,
        )
        return renewed


class LeaderElector:
    """Contend for a Lease for as long as `run` runs; `on_change` hears of every start and end of leadership."""

    def __init__(
        self,
        api_client: ApiClient,
        settings: LeaderElectionSettings,
        *,
        lease_name: str,
        namespace: str,
        identity: str,
        on_change: Callable[[LeaderChange], None],
    ) -> None:
        self.settings = settings
        self.lease_name = lease_name
        self.namespace = namespace
        self.identity = identity
        self.holder: str | None = None  # as last observed
        self._api_client = api_client
        self._on_change = on_change
        self._leading = False
        self._renewed_at = -float("inf")  # monotonic
        # Wall clock: when a leader (this one, or another seen renewing) last was known to hold the Lease.
        self._last_leader_seen: float | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._failing = ""

    @property
    def leading(self) -> bool:
        """Holds the Lease: the last renewal succeeded within `renew_deadline`."""
        return self._leading and not self.expired()

    def expired(self) -> bool:
        return time.monotonic() - self._renewed_at >= self.settings.renew_deadline

    def attempt_timeout(self) -> float:
        """Return how long an attempt may take.

        A leader's attempt may take what is left of its renew deadline; a candidate's, the whole deadline.
        """
        if not self._leading:
            return self.settings.renew_deadline
        return max(0.1, self._renewed_at + self.settings.renew_deadline - time.monotonic())

    def status(self) -> dict[str, Any]:
        """For /readyz."""
        return {
            "lease": f"{self.namespace}/{self.lease_name}",
            "identity": self.identity,
            "leading": self.leading,
            "holder": self.holder,
        }

    async def run(self) -> None:
        settings = self.settings
        while True:
            lock = _Lock(self.lease_name, self.namespace, self.identity, self._api_client)
            config = ElectionConfig(
                lock,
                lease_duration=int(settings.lease_duration),  # (the library writes it as the Lease's integer)
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
                onstarted_leading=_nothing,
                onstopped_leading=_nothing,
            )
            try:
                await _Election(config, lock, self).run()  # returns when a leader's renewals failed for the deadline
            except _Lost:
                pass
            except Exception:  # a bug here must not end the election for good: logged, and contended again
                log.exception("leader election failed", lease=self._lease())
            if self._leading:
                self._stop("lost")
            await asyncio.sleep(settings.retry_period)

    async def release(self) -> None:
        """On a clean shutdown, after delivery drained: give the Lease up so a standby takes over at once."""
        if not self._leading:
            return
        self._stop("released")
        lock = _Lock(self.lease_name, self.namespace, self.identity, self._api_client)
        try:
            async with asyncio.timeout(self.settings.renew_deadline):
                released = await lock.release()
        except Exception as exc:  # the Lease expires on its own: a standby takes over within lease_duration
            log.warning("could not release the lease", lease=self._lease(), error=_describe(exc))
            return
        if released:
            log.info("lease released", lease=self._lease())

    # -------------------------------------------------------------------------------- told by the election

    def after_attempt(
        self, *, renewed: bool, holder: str | None, changed_at: float, error: BaseException | None, started: float
    ) -> None:
        """Judge one attempt (begun at monotonic `started`) to acquire or renew.

        Raises _Lost when this leader must stop.
        """
        if holder is not None and holder != self.identity:
            if holder != self.holder:
                log.info("leader", lease=self._lease(), holder=holder)
            self._last_leader_seen = max(self._last_leader_seen or 0.0, changed_at)
        self.holder = holder
        if error is not None:
            self._failed(error)
        elif self._failing:
            log.info("lease requests work again", lease=self._lease())
            self._failing = ""
        if renewed and holder == self.identity:
            self._renewed(started)
        elif self._leading and (holder not in (None, self.identity) or self.expired()):
            self._stop("lost")
            raise _Lost

    def _renewed(self, started: float) -> None:
        """Record a successful renewal (or acquisition) whose request began at `started`.

        The deadline counts from there, since the Lease may have been written as early as that.
        """
        self._renewed_at = started
        loop = asyncio.get_running_loop()
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = loop.call_at(
            started + self.settings.renew_deadline - time.monotonic() + loop.time(), self._check_expiry
        )
        if not self._leading:
            self._leading = True
            seen = self._last_leader_seen
            since = None if seen is None else seen - self.settings.renew_deadline
            log.info("leading", lease=self._lease(), identity=self.identity)
            self._on_change(LeaderChange(leading=True, since=since))
        self._last_leader_seen = time.time()

    def _check_expiry(self) -> None:
        """Between two attempts too (the library sleeps retry_period after a failed one): stop at the deadline."""
        self._watchdog = None
        if self._leading and self.expired():
            self._stop("lost")

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, ApiException) and exc.status == 409:
            return  # another candidate updated the Lease first: the election at work, not a problem
        problem = _describe(exc)
        if problem != self._failing:
            log.warning("lease request failed", lease=self._lease(), error=problem, leading=self._leading)
            self._failing = problem

    def _stop(self, reason: str) -> None:
        self._leading = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if reason == "lost":
            log.warning("leadership lost", lease=self._lease(), holder=self.holder)
        self._on_change(LeaderChange(leading=False, reason=reason))

    def _lease(self) -> str:
        return f"{self.namespace}/{self.lease_name}"


async def _nothing() -> None:
    """Do nothing, as the library's leading callbacks.

    The elector tells its own listener, synchronously, on each change.
    """


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        reason = "RBAC forbids it" if exc.status == 403 else (exc.reason or "")
        return f"HTTP {exc.status}: {reason}".rstrip(": ")
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


__all__ = ["LeaderChange", "LeaderElector", "identity", "lease_namespace"]
