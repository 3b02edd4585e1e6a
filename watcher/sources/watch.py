"""The list-and-watch loop of one resource, and the retry policy it follows when the API server does not answer.

The current objects come first: streamed as the start of the watch where the API server allows it (WatchList:
`sendInitialEvents`, ended by a bookmark annotated `k8s.io/initial-events-end`, one object at a time, served from
the server's watch cache), else listed in pages and watched from the list's resourceVersion. The watch has
bookmarks and resumes from the last version seen whenever the server ends it.

Watch lines are split straight from the socket's bytes and each goes to the engine's decoder (natively where the
native engine is built): no client models, no Python object per JSON node on the hot path. Each event is stamped
with its receive time; an invalid one is reported and skipped. After each read (past the initial state) the
connection rests for `watch.read_batch`, so that the events written meanwhile arrive in one chunk (one wake-up, one
TLS decryption, one HTTP parse for all of them).

What goes wrong is classified once (`Failure`) and retried by `retry_delay`, a plain function: `410 Gone`
relists (the relisted objects reach the engine as ADDED events, which re-read known objects instead of
counting writes, so a gap never shows up as phantom writes; objects gone meanwhile get a DELETED); connection
errors, truncated streams and 5xx reconnect with jittered exponential back-off; 429 backs off as long as the
server asks; 403 and 404 are retried slowly. A failing resource logs once per episode, not per attempt.

Each (re)start of the loop and each failure is told to a `WatchObserver` (the service passes its metrics),
with the reason and the HTTP status; what is cheap to count per chunk or per object (bytes, lists, objects
known) stays in plain counters of `ResourceStatus`, read when someone asks.
"""

from __future__ import annotations

import asyncio
import enum
import fnmatch
import random
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson
import structlog

from watcher.config import WatchSettings
from watcher.detection.attribution import Decoder
from watcher.detection.events import DecodeError, EventError, ObjectEvent, encode
from watcher.model import EventType, JSONObject, ResourceKey, observed_time
from watcher.sources.discovery import ApiResource, Target
from watcher.sources.heap import release_free_heap
from watcher.sources.kube import ApiError, KubeApi

ACCEPT_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
ACCEPT_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
ACCEPT_FULL = "application/json"
MAX_EVENT_BYTES = 64 * 2**20  # etcd stores at most 1.5 MiB per object: a longer line is a broken stream

INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the annotation of the bookmark that ends a watch's initial state

OnEvent = Callable[[ObjectEvent, ApiResource], object]  # each event of a watch, in order (what it returns is not read)
Invalid = Callable[[ApiResource, EventError], None]  # an event the decoder refused (it is skipped)

log = structlog.get_logger("fightwatch.watch")


class Failure(enum.StrEnum):
    EXPIRED = "expired"  # 410 Gone, "too old resource version": relist
    UNAUTHORIZED = "unauthorized"  # 401: credentials expired or rotated
    FORBIDDEN = "forbidden"  # 403: RBAC does not allow list/watch
    NOT_FOUND = "not_found"  # 404: the resource is no longer served (a CRD removed)
    THROTTLED = "throttled"  # 429
    SERVER_ERROR = "server_error"  # 5xx, other statuses, ERROR events
    CONNECTION = "connection"  # refused, reset, connect timeout, truncated or malformed stream
    STALLED = "stalled"  # nothing received within the read timeout
    INTERNAL = "internal"  # a bug of ours: logged with its traceback, retried like a server error


class State(enum.StrEnum):
    PENDING = "pending"
    LISTING = "listing"
    WATCHING = "watching"
    RETRYING = "retrying"
    FORBIDDEN = "forbidden"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial: float = 0.5
    maximum: float = 30.0
    slow: float = 300.0

    @classmethod
    def of(cls, settings: WatchSettings) -> RetryPolicy:
        return cls(initial=settings.backoff_initial, maximum=settings.backoff_max, slow=settings.slow_retry)


def retry_delay(
    failure: Failure, attempt: int, policy: RetryPolicy, *, jitter: float, retry_after: float | None = None
) -> float:
    """Seconds to wait before attempt `attempt + 1` after `attempt` consecutive failures; `jitter` in [0, 1).

    Back-off doubles from `initial` up to `maximum`, and each delay is drawn from its upper half, so that watches
    that broke together (an API server restart) do not come back together. A first 410 relists at once; 403
    and 404 wait `slow` (±25%); 429 waits at least what Retry-After asks, up to `slow`.
    """
    if failure in (Failure.FORBIDDEN, Failure.NOT_FOUND):
        return policy.slow * (0.75 + jitter / 2)
    if failure is Failure.EXPIRED and attempt <= 1:
        return 0.0
    base = min(policy.maximum, policy.initial * 2.0 ** max(attempt - 1, 0))
    delay = base * (0.5 + jitter / 2)
    if failure is Failure.THROTTLED and retry_after:
        delay = max(delay, min(retry_after, policy.slow))
    return delay


def status_failure(code: int) -> Failure:
    """Return the failure an HTTP status (of an answer, or of an ERROR event's Status) stands for."""
    return {
        410: Failure.EXPIRED,
        401: Failure.UNAUTHORIZED,
        403: Failure.FORBIDDEN,
        404: Failure.NOT_FOUND,
        429: Failure.THROTTLED,
    }.get(code, Failure.SERVER_ERROR)


def error_event(status: JSONObject) -> WatchError:
    """Return the failure an ERROR watch event (its object a Status) stands for."""
    code = status.get("code")
    failure = status_failure(code) if isinstance(code, int) else Failure.SERVER_ERROR
    return WatchError(
        failure,
        f"ERROR event: {code} {status.get('reason', '')}: {status.get('message', '')}",
        code=code if isinstance(code, int) else None,
    )


class WatchError(Exception):
    """A classified failure of one list or watch; `code`: the HTTP status of the answer or ERROR event, if any."""

    def __init__(
        self, failure: Failure, message: str, retry_after: float | None = None, *, code: int | None = None
    ) -> None:
        super().__init__(message)
        self.failure = failure
        self.retry_after = retry_after
        self.code = code

    @property
    def error_code(self) -> int | str | None:
        """How the metrics name this failure.

        The HTTP status, `internal` (a bug of ours), `unknown` (an ERROR event without a code), None for no HTTP answer
        at all.
        """
        if self.code is not None:
            return self.code
        if self.failure is Failure.INTERNAL:
            return "internal"
        if self.failure in (Failure.CONNECTION, Failure.STALLED):
            return None
        return "unknown"

    @property
    def restart_reason(self) -> str:
        """Why the watch that failed this way starts again: `expired`, `network`, `stalled` or `error`."""
        return _RESTART_REASONS.get(self.failure, "error")


_RESTART_REASONS = {Failure.EXPIRED: "expired", Failure.CONNECTION: "network", Failure.STALLED: "stalled"}


class WatchObserver(Protocol):
    """Told of every (re)start and failure of a watch (the service's metrics)."""

    def watch_restart(self, resource: ResourceKey, reason: str) -> None: ...

    def watch_error(self, resource: ResourceKey, code: int | str | None) -> None: ...


class Unobserved:
    """A WatchObserver that drops everything (tests, tools)."""

    def watch_restart(self, resource: ResourceKey, reason: str) -> None:
        pass

    def watch_error(self, resource: ResourceKey, code: int | str | None) -> None:
        pass


def classify(exc: BaseException) -> WatchError:
    """Any exception of a list or watch attempt as a WatchError."""
    if isinstance(exc, WatchError):
        return exc
    if isinstance(exc, ApiError):
        return WatchError(
            status_failure(exc.status), f"HTTP {exc.status}: {exc.message}", exc.retry_after, code=exc.status
        )
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return WatchError(Failure.CONNECTION, "timed out connecting")
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return WatchError(Failure.STALLED, "timed out (no data within the read timeout)")
    if isinstance(exc, aiohttp.ClientError | OSError):
        return WatchError(Failure.CONNECTION, f"{type(exc).__name__}: {exc}".rstrip(": "))
    return WatchError(Failure.INTERNAL, f"{type(exc).__name__}: {exc}")


class NamespaceFilter:
    """Namespace include/exclude shell patterns; cluster-scoped objects always pass."""

    def __init__(self, include: Iterable[str], exclude: Iterable[str]) -> None:
        self._include = tuple(include)
        self._exclude = tuple(exclude)
        self._cache: dict[str, bool] = {}

    @property
    def everything(self) -> bool:
        return not self._include and not self._exclude

    def allows(self, namespace: str) -> bool:
        allowed = self._cache.get(namespace)
        if allowed is None:
            allowed = (not self._include or any(fnmatch.fnmatchcase(namespace, p) for p in self._include)) and not any(
                fnmatch.fnmatchcase(namespace, p) for p in self._exclude
            )
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[namespace] = allowed
        return allowed


class WatchList:
    """Whether to stream watches' initial state: on by setting, off for good once the API server refuses it.

    Shared by a cluster's watches, so that a server without WatchList (before 1.27; 1.27 to 1.31 and 1.33, where
    its feature gate is off by default) refuses one request, not one per resource.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def refused(self, error: ApiError, resource: str) -> None:
        """Turn streaming off after the server refused it (logged once)."""
        if self.enabled:
            self.enabled = False
            log.info("listing instead of streaming the initial state", resource=resource, error=error.message)


def refuses_watch_list(error: ApiError) -> bool:
    """Tell whether an answer to a watch with `sendInitialEvents` refuses the parameter itself.

    A server without WatchList answers 422 Invalid: the parameter is forbidden (its feature gate is off), or, before
    1.27, `resourceVersionMatch` on a watch is. A 422 to a watch at its start can be about nothing else.
    """
    return error.status == 422


@dataclass
class ResourceStatus:
    """What a resource's watch is doing, and its counters (read by /readyz and /metrics)."""

    state: State = State.PENDING
    since: float = field(default_factory=time.time)  # of the current state
    synced: bool = False  # listed at least once
    failure: Failure | None = None  # of the current failure episode
    error: str = ""
    failures: int = 0  # consecutive
    bytes: int = 0  # received by lists and watches
    lists: int = 0  # completed, by a list or by a watch's initial state
    objects: int = 0

    @property
    def ready(self) -> bool:
        return self.state is State.WATCHING


class ResourceWatch:
    """List and watch one resource for as long as `run` runs; hand its events to `on_event`, in order."""

    def __init__(
        self,
        target: Target,
        api: KubeApi,
        *,
        on_event: OnEvent,
        decode: Decoder,
        on_invalid: Invalid | None = None,
        settings: WatchSettings,
        namespaces: NamespaceFilter,
        on_gone: Callable[[], None] = lambda: None,
        on_state: Callable[[], None] = lambda: None,
        rng: random.Random | None = None,
        observer: WatchObserver | None = None,
        watch_list: WatchList | None = None,
    ) -> None:
        """Watch `target` through `api`.

        `on_gone`: the resource is no longer served (404); `on_state`: `status.state` changed; `watch_list`: shared
        by the watches of one server (default: one of this watch's own, as `settings.watch_list` says).
        """
        self.target = target
        self.resource = resource = target.resource
        self.key: ResourceKey = (resource.group, resource.plural)
        self.status = ResourceStatus()
        self._observer = observer or Unobserved()
        self._start_reason = "initial"
        self._api = api
        self._on_event = on_event
        self._decode = decode
        self._on_invalid = on_invalid or _ignored
        self._settings = settings
        self._policy = RetryPolicy.of(settings)
        self._namespaces = None if namespaces.everything or not resource.namespaced else namespaces
        self._on_gone = on_gone
        self._on_state = on_state
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._list_accept = ACCEPT_FULL if target.full_objects else ACCEPT_METADATA_LIST
        self._watch_accept = ACCEPT_FULL if target.full_objects else ACCEPT_METADATA
        self._kind = resource.kind
        self._api_version = resource.api_version
        self._watch_list = watch_list or WatchList(settings.watch_list)
        self._rv: str | None = None
        self._initial: set[str] | None = None  # while a watch streams the initial state: the uids it sent
        self._known: dict[str, tuple[str | None, str]] = {}  # uid -> (namespace, name): to see what vanished
        self._path = target.path
        self._selector = [("labelSelector", settings.label_selector)] if settings.label_selector else []
        self._log = log.bind(resource=target.name)

    # ---------------------------------------------------------------------------------------------- the loop

    async def run(self) -> None:
        reason = self._start_reason
        while True:
            self._observer.watch_restart(self.key, reason)
            try:
                if self._rv is None and not self._watch_list.enabled:
                    await self._list()
                await self._watch()
                reason = "timeout"  # the server ended the watch (timeoutSeconds): resume from the last version
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure is classified and retried, one resource at a time
                failure = classify(exc)
                self._observer.watch_error(self.key, failure.error_code)
                reason = failure.restart_reason
                await self._retry(failure, exc)

    def adopt(self, previous: ResourceWatch) -> None:
        """Take over what a watch of the same objects knew (in another version): the first list diffs against it."""
        self._known = previous._known
        self._start_reason = "discovery"

    def forget(self) -> int:
        """Hand a DELETED event over for every object this watch knows (the resource is no longer watched)."""
        now = observed_time(time.time())
        uids = list(self._known)
        for uid in uids:
            self._vanished(uid, now)
        return len(uids)

    async def _retry(self, failure: WatchError, exc: BaseException) -> None:
        status = self.status
        kind = failure.failure
        status.failures += 1
        if kind is Failure.EXPIRED:
            self._rv = None
            self._log.info("relisting", reason=str(failure))
        elif kind is Failure.INTERNAL:
            self._log.error("watch failed", error=str(failure), exc_info=exc)
        elif kind is not status.failure:  # once per episode, not once per attempt
            level = "info" if kind is Failure.NOT_FOUND else "warning"
            getattr(self._log, level)(
                _FAILURE_EVENTS.get(kind, "watch failing"), failure=kind.value, error=str(failure)
            )
        if kind is not Failure.EXPIRED or status.failure is None:  # (a 410 met on reconnecting ends no episode)
            status.failure = kind
        status.error = str(failure)
        if kind is Failure.FORBIDDEN:
            self._set(State.FORBIDDEN)
        elif kind is Failure.NOT_FOUND:
            self._set(State.GONE)
            self._on_gone()
        elif kind is not Failure.EXPIRED:
            self._set(State.RETRYING)
        delay = retry_delay(
            kind, status.failures, self._policy, jitter=self._rng.random(), retry_after=failure.retry_after
        )
        await asyncio.sleep(delay)

    def _recovered(self) -> None:
        self._clear_failure()
        self._set(State.WATCHING)

    def _clear_failure(self) -> None:
        status = self.status
        if status.failure is not None and status.failure is not Failure.EXPIRED:
            self._log.info("watch recovered", after_failures=status.failures, failure=status.failure.value)
        status.failure, status.error, status.failures = None, "", 0

    def _set(self, state: State) -> None:
        if self.status.state is not state:
            self.status.state = state
            self.status.since = time.time()
            self._on_state()

    # ------------------------------------------------------------------------------------------------- list

    async def _list(self) -> None:
        self._set(State.LISTING)
        status = self.status
        seen: set[str] = set()
        page = [("limit", str(self._settings.page_size)), *self._selector]
        token = ""
        while True:
            query = [*page, ("continue", token)] if token else page
            doc, size = await self._api.get(self._path, query=query, accept=self._list_accept)
            status.bytes += size
            now = observed_time(time.time())
            for obj in doc.get("items") or ():
                # (an item is encoded again for the decoder: lists are rare, watch events are many)
                event = self._event(encode(EventType.ADDED, obj) if isinstance(obj, dict) else b"{}", now)
                if event is not None:
                    seen.add(event.uid)
                    self._emit(event)
            metadata = doc.get("metadata") or {}
            token = metadata.get("continue") or ""
            if not token:
                break
        version = metadata.get("resourceVersion")
        if not version:
            raise WatchError(Failure.SERVER_ERROR, f"the list of {self.target.name} has no resourceVersion")
        self._synced(seen, str(version), now)

    def _synced(self, seen: set[str], version: str, now: float) -> None:
        """Take the current objects as read (`seen`, at `version`): the known ones not among them were deleted."""
        for uid in [uid for uid in self._known if uid not in seen]:  # deleted while we were not watching
            self._vanished(uid, now)
        self._rv = version
        status = self.status
        status.lists += 1
        status.synced = True
        status.objects = len(self._known)
        release_free_heap()  # (the list's pages and documents, freed: returned, not kept resident)

    # ------------------------------------------------------------------------------------------------ watch

    async def _watch(self) -> None:
        response = await self._open()
        batch = self._settings.read_batch
        status = self.status
        started = time.monotonic()
        lines = 0
        pending = b""
        clean = False
        try:
            content = response.content
            while chunk := await content.readany():
                status.bytes += len(chunk)
                if pending:
                    chunk = pending + chunk
                parts = chunk.split(b"\n")
                pending = parts.pop()
                if len(pending) > MAX_EVENT_BYTES:
                    raise WatchError(Failure.CONNECTION, f"a watch event longer than {MAX_EVENT_BYTES} bytes")
                now = observed_time(time.time())
                for line in parts:
                    if line:
                        lines += 1
                        self._on_line(line, now)
                if batch and self._initial is None:  # (after handling what was read: a burst's first is not held)
                    await _gathered(response, batch)
            clean = True
        finally:
            self._initial = None  # (a stream ended before its initial state did: the next one starts it again)
            if clean:
                response.release()
            else:
                response.close()  # a broken stream: do not hand its connection back to the pool
        status.objects = len(self._known)
        if pending.strip():
            raise WatchError(Failure.CONNECTION, "the watch ended inside an event (truncated)")
        if lines == 0 and time.monotonic() - started < 1.0:
            raise WatchError(Failure.CONNECTION, "the server ended the watch at once")

    async def _open(self) -> aiohttp.ClientResponse:
        """Open the watch from the last version seen; with none yet, one that starts with the current objects.

        When the server refuses to stream them (no WatchList), they are listed first, and watched from the list.
        """
        settings = self._settings
        server_timeout = int(self._rng.uniform(settings.watch_timeout, 2 * settings.watch_timeout))
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(server_timeout))]
        version = self._rv
        initial = version is None
        if version is None:  # (the objects as of now, a consistent read, then their changes)
            query += [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")]
        else:
            query.append(("resourceVersion", version))
        query += self._selector
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=settings.request_timeout, sock_read=server_timeout + settings.read_timeout
        )
        try:
            response = await self._api.open(self._path, query=query, accept=self._watch_accept, client_timeout=timeout)
        except ApiError as exc:
            if not (initial and refuses_watch_list(exc)):
                raise
            self._watch_list.refused(exc, self.target.name)
            await self._list()
            return await self._open()
        if initial:
            self._initial = set()
            self._clear_failure()
            self._set(State.LISTING)
        else:
            self._recovered()
        self._log.debug("watch open", resource_version=self._rv, timeout_seconds=server_timeout, initial=initial)
        return response

    def _on_line(self, line: bytes, now: float) -> None:
        event = self._event(line, now)
        if event is None:
            return
        initial = self._initial
        if initial is None:
            self._rv = event.resource_version or self._rv
        else:  # (the initial objects come in no order of version: the stream resumes only from its end bookmark)
            initial.add(event.uid)
        self._emit(event)

    def _event(self, data: bytes, now: float) -> ObjectEvent | None:
        """Decode the event of a line (None: a BOOKMARK, handled here, or an invalid event, skipped)."""
        try:
            event = self._decode(data, observed_at=now, api_version=self._api_version, kind=self._kind)
        except DecodeError:
            raise WatchError(Failure.CONNECTION, f"malformed watch event: {data[:120]!r}") from None
        except EventError as exc:
            self._on_invalid(self.resource, exc)
            return None
        if event is None:
            self._control(data)
        return event

    def _control(self, line: bytes) -> None:
        """Handle a BOOKMARK (remember its resourceVersion; one may end the initial state) or an ERROR (raise it)."""
        doc = orjson.loads(line)
        obj = doc.get("object")
        if not isinstance(obj, dict):
            raise WatchError(Failure.CONNECTION, f"malformed watch event: {line[:120]!r}")
        if doc.get("type") == "ERROR":  # a Status, with or without metadata
            raise error_event(obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return
        version = meta.get("resourceVersion")
        initial = self._initial
        if initial is None:
            self._rv = version or self._rv
        elif (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
            if not version:
                raise WatchError(Failure.SERVER_ERROR, f"{self.target.name}: the initial state has no resourceVersion")
            self._initial = None
            self._synced(initial, str(version), observed_time(time.time()))
            self._set(State.WATCHING)

    def _emit(self, event: ObjectEvent) -> None:
        namespace = event.namespace
        if self._namespaces is not None and not self._namespaces.allows(namespace or ""):
            return
        uid = event.uid
        if event.type == "DELETED":
            self._known.pop(uid, None)
        elif event.type == "ADDED" or uid not in self._known:
            # (namespaces interned: thousands of objects share each, and this index holds every watched object)
            self._known[uid] = (sys.intern(namespace) if namespace else None, event.name)
        self._on_event(event, self.resource)

    def _vanished(self, uid: str, now: float) -> None:
        namespace, name = self._known.pop(uid)
        metadata: dict[str, Any] = {"name": name, "uid": uid}
        if namespace is not None:
            metadata["namespace"] = namespace
        obj = {"apiVersion": self._api_version, "kind": self._kind, "metadata": metadata}
        event = self._event(encode(EventType.DELETED, obj), now)
        if event is not None:
            self._on_event(event, self.resource)


async def _gathered(response: aiohttp.ClientResponse, seconds: float) -> None:
    """Let a watch's next events gather for `seconds`.

    Its connection is not read meanwhile, so they are received, decrypted (TLS) and parsed in one go, and handed over in
    one chunk, instead of one wake-up each.
    """
    connection = response.connection
    transport = connection.transport if connection is not None else None
    if transport is None or transport.is_closing():
        return
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()


def _ignored(resource: ApiResource, error: EventError) -> None:
    """Skip the event and tell no one: the default `on_invalid`."""


_FAILURE_EVENTS = {
    Failure.FORBIDDEN: "watch forbidden",
    Failure.NOT_FOUND: "resource gone",
    Failure.UNAUTHORIZED: "watch unauthorized",
    Failure.THROTTLED: "watch throttled",
}
