"""The endpoints' security as `serve` configures it: TLS and a guard that asks the API server, or (development
only) neither; a failure of the reviews said once, and its end once.

(Callers reviewed by a real kube-apiserver, and certificates rotated under a running watcher:
tests/integration/test_secure_serving.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from watcher.config import ServeSettings
from watcher.serving import security as module
from watcher.serving.guard import KubeGuard, OpenGuard
from watcher.serving.security import ServingSecurity


async def _post(path: str, body: dict[str, Any]) -> Any:
    raise AssertionError(f"no review asked here: {path} {body}")


class _Log:
    """The events logged, with their level."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def info(self, event: str, **_: Any) -> None:
        self.events.append(("info", event))

    def warning(self, event: str, **_: Any) -> None:
        self.events.append(("warning", event))


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> _Log:
    recorder = _Log()
    monkeypatch.setattr(module, "log", recorder)
    return recorder


def test_by_default_the_endpoints_serve_tls_and_the_api_server_says_who_may_read(log: _Log) -> None:
    security = ServingSecurity(ServeSettings(), _post)
    assert isinstance(security.guard, KubeGuard)
    assert security.access is not None
    assert security.context is not None
    certificate = security.certificate()
    assert certificate is not None
    assert certificate["source"] == "self-signed"
    assert log.events == [("warning", "serving a self-signed certificate")]


def test_insecure_http_lets_everyone_read_without_tls_and_says_so(log: _Log) -> None:
    security = ServingSecurity(ServeSettings(insecure_http=True), _post)
    assert isinstance(security.guard, OpenGuard)
    assert security.access is None
    assert security.context is None
    assert security.certificate() is None
    assert log.events == [("warning", "serving plain HTTP without authentication or authorization: development only")]


def test_failing_reviews_are_logged_once_and_their_recovery_once(log: _Log) -> None:
    security = ServingSecurity(ServeSettings(), _post)
    assert security.access is not None
    log.events.clear()
    for error in ("HTTP 503", "HTTP 503", "", ""):  # (a tick every second while it lasts)
        security.access.stats.last_error = error
        security.check()
    assert log.events == [("warning", "cannot review access"), ("info", "access reviews work again")]
