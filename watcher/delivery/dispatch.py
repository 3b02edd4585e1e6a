"""Delivery of finding changes to the sinks that tell people, without ever holding detection up.

`submit` is synchronous and O(1) per sink: it appends to each sink's bounded queue and returns. One asyncio
task per sink drains its queue, sends with a timeout, retries with exponential back-off and gives up after
`attempts`. A sink that is down or hangs only fills its own queue; when the queue is full the *oldest*
change is dropped (the newest state of a finding matters more than its history). Every failure, retry and
drop is counted in the metrics and logged, without the sink's URL or credentials.

Per incident (`delivery.per`, the default): sinks that notify people of root causes (Alertmanager, webhooks) get
incident changes (`IncidentChange`, from one `IncidentBook` fed with every finding change delivered), so forty
objects fought over by the same two writers are one alert and one message; Kubernetes Events stay per object.
A finding that follows from another (`related`: a cascade) is not delivered, its root cause is; one delivered
before it was found to follow from another goes on being delivered until it resolves (so its alert is ended).
Kubernetes Events are the exception (`Sink.every_finding`): every object with a finding gets its Event, which
names the finding it follows from.

With leader election only the leader delivers: `pause` stops every sink at once (attempts in flight are
abandoned, queued changes dropped as `lost_leadership`) and `submit` ignores changes while paused; `resume`
tells each sink to forget what it delivered before (`Sink.restart`) and queues the catch-up changes the new
leader computed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from watcher.config import DeliverySettings
from watcher.detection.incidents import IncidentBook
from watcher.metrics.exporter import Metrics
from watcher.model import ChangeKind, FindingChange, IncidentChange

Change = FindingChange | IncidentChange
"""What a sink delivers: finding changes, or incident changes for a sink `per_incident`."""

log = structlog.get_logger("fightwatch.delivery")


class DeliveryError(Exception):
    """A delivery attempt that failed; the message is safe to log (no URL, no credential).

    `retry=False`: the receiver refused the change for good (e.g. HTTP 400): it is not sent again.
    """

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class Sink(Protocol):
    """Something that delivers finding changes somewhere."""

    @property
    def name(self) -> str:
        """The `sink` label: `events`, `alertmanager:<host:port>`, `webhook:<name>`."""
        ...

    @property
    def batch_size(self) -> int:
        """Most changes handed to one `send`."""
        ...

    @property
    def per_incident(self) -> bool:
        """Whether it takes incident changes rather than finding changes."""
        ...

    @property
    def every_finding(self) -> bool:
        """Whether it takes the findings that follow from another too, not only root causes.

        Events do: one per object, each naming its cause.
        """
        ...

    @property
    def resend_interval(self) -> float | None:
        """When set, `send([])` is called after this many idle seconds (Alertmanager re-sends active alerts)."""
        ...

    def wants(self, change: Change) -> bool:
        """Whether this sink delivers this change at all (checked before it is queued)."""
        ...

    def restart(self) -> None:
        """Forget what was delivered so far.

        Delivery resumes after a leadership change, and the catch-up that follows tells the current findings again
        (`FindingChange.catch_up`).
        """
        ...

    async def send(self, changes: Sequence[Change]) -> None:
        """Deliver; raise DeliveryError (or any exception) when it did not work. Called again to retry."""
        ...

    async def close(self) -> None: ...


@dataclass
class _Lane:
    sink: Sink
    queue: deque[Change]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set while nothing is queued or in flight
    task: asyncio.Task[None] | None = None
    in_flight: int = 0

    def pending(self) -> int:
        return len(self.queue) + self.in_flight


class Delivery:
    """Fan finding changes out to sinks, one bounded queue and one task per sink."""

    def __init__(self, sinks: Sequence[Sink], settings: DeliverySettings, *, metrics: Metrics | None = None) -> None:
        names = [s.name for s in sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"two delivery sinks have the same name: {sorted(names)}")
        self.settings = settings
        self.metrics = metrics
        self._lanes = [_Lane(sink, deque()) for sink in sinks]
        self.paused = False
        self._book = IncidentBook() if any(s.per_incident for s in sinks) else None
        self._roots: set[str] = set()  # ids of the active findings delivered as root causes
        if metrics is not None:
            for lane in self._lanes:
                metrics.delivery_queue(lane.sink.name, lane.pending)

    @property
    def sinks(self) -> list[Sink]:
        return [lane.sink for lane in self._lanes]

    async def start(self, *, paused: bool = False) -> None:
        """Start delivering (`paused`: not until `resume`, e.g. until this replica leads)."""
        self.paused = paused
        if not paused:
            self._start_lanes()

    def _start_lanes(self) -> None:
        for lane in self._lanes:
            if lane.task is None:
                lane.task = asyncio.create_task(self._run(lane), name=f"delivery {lane.sink.name}")

    def pause(self) -> None:
        """Stop delivering at once.

        Every sink's task is cancelled (an attempt in flight is abandoned) and what is queued is dropped (counted as
        `lost_leadership`); `submit` ignores changes until `resume`.
        """
        self.paused = True
        for lane in self._lanes:
            if lane.task is not None:
                lane.task.cancel()
                lane.task = None
            left = lane.pending()
            lane.queue.clear()
            lane.in_flight = 0
            lane.idle.set()
            if left:
                self._dropped(lane.sink, "lost_leadership", left)

    def resume(self, catch_up: Sequence[FindingChange]) -> None:
        """Deliver again: each sink forgets what it delivered before, then gets `catch_up` (and what follows)."""
        self.paused = False
        self._roots.clear()
        if self._book is not None:
            self._book.reset()
        for lane in self._lanes:
            lane.sink.restart()
        self._start_lanes()
        self.submit(catch_up)

    def submit(self, changes: Sequence[FindingChange]) -> None:
        """Queue `changes` for every sink that wants them; never wait.

        The incident changes they make are queued too. Full queues drop their oldest.
        """
        if self.paused or not changes:
            return
        told = self._root_causes(changes)
        incidents = self._book.apply(told) if self._book is not None else []
        limit = self.settings.queue_size
        for lane in self._lanes:
            sink = lane.sink
            queued = 0
            for change in incidents if sink.per_incident else changes if sink.every_finding else told:
                if not sink.wants(change):
                    continue
                if len(lane.queue) >= limit:
                    lane.queue.popleft()
                    self._dropped(sink, "queue_full", 1)
                lane.queue.append(change)
                queued += 1
            if queued:
                lane.idle.clear()
                lane.wake.set()

    def _root_causes(self, changes: Sequence[FindingChange]) -> list[FindingChange]:
        """Return the changes to deliver.

        Not those of a finding that follows from another (a cascade), unless it was delivered before it was found to.
        """
        told = []
        for change in changes:
            finding_id = change.finding.id
            if change.finding.related is not None and finding_id not in self._roots:
                continue
            if change.kind is ChangeKind.RESOLVED:
                self._roots.discard(finding_id)
            else:
                self._roots.add(finding_id)
            told.append(change)
        return told

    def pending(self, sink: str) -> int:
        """Count the changes queued or being sent for the sink named `sink`."""
        return next(lane for lane in self._lanes if lane.sink.name == sink).pending()

    async def stop(self, *, drain: float = 5.0) -> None:
        """Give the queues up to `drain` seconds to empty (resolutions in flight), then stop and close sinks."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(drain):
                await asyncio.gather(*(lane.idle.wait() for lane in self._lanes if lane.task is not None))
        for lane in self._lanes:
            left = lane.pending()
            if lane.task is not None:
                lane.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.task
                lane.task = None
            if left:
                self._dropped(lane.sink, "stopped", left)
                log.warning("delivery stopped with changes undelivered", sink=lane.sink.name, changes=left)
            lane.queue.clear()
            try:
                await lane.sink.close()
            except Exception as exc:  # closing the others matters more
                log.warning("closing a delivery sink failed", sink=lane.sink.name, error=_describe(exc))

    # --------------------------------------------------------------------------------------------- worker

    async def _run(self, lane: _Lane) -> None:
        sink = lane.sink
        while True:
            if not lane.queue:
                lane.idle.set()
                try:
                    async with asyncio.timeout(sink.resend_interval):
                        await lane.wake.wait()
                except TimeoutError:
                    await self._send(lane, [])  # the periodic re-send of a stateful sink
                    continue
                finally:
                    lane.wake.clear()
            batch = [lane.queue.popleft() for _ in range(min(sink.batch_size, len(lane.queue)))]
            if batch:
                await self._send(lane, batch)

    async def _send(self, lane: _Lane, batch: list[Change]) -> None:
        sink, settings = lane.sink, self.settings
        lane.in_flight = len(batch)
        delay = settings.backoff_initial
        try:
            for attempt in range(1, settings.attempts + 1):
                try:
                    async with asyncio.timeout(settings.timeout):
                        await sink.send(batch)
                except Exception as exc:  # any failure of a sink is counted and logged, never raised
                    if self.metrics is not None:
                        self.metrics.delivery_failed(sink.name)
                    retry = not isinstance(exc, DeliveryError) or exc.retry
                    last = attempt == settings.attempts or not retry
                    log.warning(
                        "delivery failed",
                        sink=sink.name,
                        attempt=attempt,
                        error=_describe(exc),
                        changes=len(batch),
                        retry_in=None if last else round(delay, 3),
                    )
                    if last:
                        self._dropped(sink, "attempts" if retry else "rejected", len(batch))
                        return
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, settings.backoff_max)
                else:
                    if batch and self.metrics is not None:
                        self.metrics.delivery_sent(sink.name, len(batch))
                    return
        finally:
            lane.in_flight = 0

    def _dropped(self, sink: Sink, reason: str, changes: int) -> None:
        if self.metrics is not None:
            self.metrics.delivery_dropped(sink.name, reason, changes)
        if reason == "queue_full":
            log.warning("delivery queue full, oldest change dropped", sink=sink.name)
        elif changes:
            log.error("finding changes given up", sink=sink.name, reason=reason, changes=changes)


def _describe(exc: BaseException) -> str:
    """Describe what went wrong, safe to log.

    DeliveryError messages are written for that; others give their type.
    """
    if isinstance(exc, DeliveryError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return type(exc).__name__


__all__ = ["Change", "Delivery", "DeliveryError", "Sink"]
