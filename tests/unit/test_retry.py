"""The retry policy of the watch loop: a plain function, tested as a table."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from watcher.sources.kube import ApiError
from watcher.sources.watch import (
    Failure,
    RetryPolicy,
    WatchError,
    classify,
    error_event,
    refuses_watch_list,
    retry_delay,
    status_failure,
)

POLICY = RetryPolicy(initial=0.5, maximum=30.0, slow=300.0)


@pytest.mark.parametrize(
    ("failure", "attempt", "jitter", "delay"),
    [
        (Failure.CONNECTION, 1, 0.0, 0.25),  # half of the base at the lowest jitter ...
        (Failure.CONNECTION, 1, 0.999999, 0.5),  # ... up to the base: sub-second at first
        (Failure.CONNECTION, 2, 0.0, 0.5),
        (Failure.SERVER_ERROR, 4, 0.0, 2.0),  # doubling
        (Failure.SERVER_ERROR, 7, 0.999999, 30.0),  # 0.5 * 2**6 = 32, capped at 30
        (Failure.CONNECTION, 50, 0.0, 15.0),  # never more than the maximum, never overflowing
        (Failure.UNAUTHORIZED, 1, 0.0, 0.25),
        (Failure.EXPIRED, 1, 0.7, 0.0),  # a first 410 relists at once ...
        (Failure.EXPIRED, 3, 0.0, 1.0),  # ... repeated ones back off
        (Failure.FORBIDDEN, 1, 0.0, 225.0),  # slow: 300 s -25% ...
        (Failure.NOT_FOUND, 9, 0.999999, 375.0),  # ... +25%, whatever the attempt
    ],
)
def test_retry_delays(failure: Failure, attempt: int, jitter: float, delay: float) -> None:
    assert retry_delay(failure, attempt, POLICY, jitter=jitter) == pytest.approx(delay, rel=1e-5)


@pytest.mark.parametrize(
    ("retry_after", "delay"),
    [(None, 0.25), (10.0, 10.0), (0.1, 0.25), (9999.0, 300.0)],
)
def test_throttling_waits_at_least_what_the_server_asks_up_to_the_slow_delay(
    retry_after: float | None, delay: float
) -> None:
    assert retry_delay(Failure.THROTTLED, 1, POLICY, jitter=0.0, retry_after=retry_after) == delay


@pytest.mark.parametrize(
    ("code", "failure"),
    [
        (410, Failure.EXPIRED),
        (401, Failure.UNAUTHORIZED),
        (403, Failure.FORBIDDEN),
        (404, Failure.NOT_FOUND),
        (429, Failure.THROTTLED),
        (500, Failure.SERVER_ERROR),
        (503, Failure.SERVER_ERROR),
        (406, Failure.SERVER_ERROR),
    ],
)
def test_status_codes(code: int, failure: Failure) -> None:
    assert status_failure(code) is failure


def test_exceptions_are_classified_with_their_context() -> None:
    gone = classify(ApiError(410, "/api/v1/configmaps", b'{"kind":"Status","reason":"Expired","message":"too old"}'))
    assert gone.failure is Failure.EXPIRED
    assert "too old" in str(gone)
    throttled = classify(ApiError(429, "/api/v1/configmaps", b"slow down", retry_after=7.0))
    assert (throttled.failure, throttled.retry_after) == (Failure.THROTTLED, 7.0)
    assert classify(aiohttp.ClientPayloadError("Response payload is not completed")).failure is Failure.CONNECTION
    assert classify(ConnectionRefusedError(111, "Connection refused")).failure is Failure.CONNECTION
    assert classify(TimeoutError()).failure is Failure.STALLED
    assert classify(aiohttp.SocketTimeoutError()).failure is Failure.STALLED  # nothing read within sock_read
    assert classify(aiohttp.ConnectionTimeoutError()).failure is Failure.CONNECTION
    assert classify(KeyError("bug")).failure is Failure.INTERNAL
    own = WatchError(Failure.SERVER_ERROR, "ERROR event: 500")
    assert classify(own) is own


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (classify(ApiError(410, "/api/v1/configmaps", b"")), 410, "expired"),
        (classify(ApiError(403, "/api/v1/secrets", b"")), 403, "error"),
        (classify(ApiError(503, "/api/v1/secrets", b"")), 503, "error"),
        (error_event({"kind": "Status", "code": 410}), 410, "expired"),
        (error_event({"kind": "Status", "code": 500}), 500, "error"),
        (error_event({"kind": "Status"}), "unknown", "error"),
        (classify(ConnectionResetError(104, "reset")), None, "network"),
        (classify(aiohttp.SocketTimeoutError()), None, "stalled"),
        (classify(KeyError("bug")), "internal", "error"),
    ],
)
def test_failures_as_the_metrics_name_them(error: WatchError, code: int | str | None, reason: str) -> None:
    """fightwatch_watch_errors_total{code} and fightwatch_watch_restarts_total{reason} of each failure."""
    assert (error.error_code, error.restart_reason) == (code, reason)


def _status(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}
    )


@pytest.mark.parametrize(
    ("code", "reason", "message", "refused"),
    [
        # kube-apiserver v1.37.2 with --feature-gates=WatchList=false (as 1.27 to 1.31 and 1.33 by default)
        (
            422,
            "Invalid",
            'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is '
            "forbidden for watch unless the WatchList feature gate is enabled",
            True,
        ),
        # releases before 1.27 (their ValidateListOptions: resourceVersionMatch forbidden on a watch, and without a
        # resourceVersion), which know no sendInitialEvents
        (
            422,
            "Invalid",
            'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is '
            "forbidden for watch, resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided]",
            True,
        ),
        (400, "BadRequest", "unable to parse requirement: found '=', expected: identifier", False),
        (403, "Forbidden", 'configmaps is forbidden: User "x" cannot watch resource "configmaps"', False),
        (500, "InternalError", "sendInitialEvents: etcd unavailable", False),
    ],
)
def test_a_server_without_watch_list_is_told_by_its_answer(code: int, reason: str, message: str, refused: bool) -> None:
    error = ApiError(code, "/api/v1/configmaps", _status(code, reason, message))
    assert refuses_watch_list(error) is refused
