"""`serving.access` caching on its own (the API server's answers are stubs here; tests/integration/test_access.py
asks a real one): concurrent questions share one review, answers expire, errors fall back to recent answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from watcher.serving.access import TOKEN_REVIEWS, Access, AccessUnavailableError, Caller, Resource


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowApi:
    """Answers each review when `release` is set; counts them; fails while `down`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[str] = []
        self.down = False

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        self.calls.append(path)
        await self.release.wait()
        if self.down:
            raise ConnectionRefusedError("connection refused")
        if path == TOKEN_REVIEWS:
            return {"status": {"authenticated": True, "user": {"username": "alice", "groups": ["team"]}}}
        return {"status": {"allowed": body["spec"]["user"] == "alice"}}


async def test_concurrent_requests_with_one_new_token_are_one_review() -> None:
    api = SlowApi()
    access = Access(api.post, clock=Clock())
    asked = [asyncio.ensure_future(access.authenticate("new-token")) for _ in range(20)]
    await asyncio.sleep(0)  # (every request is waiting now)
    api.release.set()
    callers = await asyncio.gather(*asked)
    assert set(callers) == {Caller("alice", groups=("team",))}
    assert api.calls == [TOKEN_REVIEWS]
    assert access.stats.shared_answers == 19
    await access.authenticate("new-token")
    assert access.stats.cache_hits == 1  # (then answered from the cache)


async def test_a_failed_review_fails_every_waiter_and_the_next_question_asks_again() -> None:
    api = SlowApi()
    api.down = True
    access = Access(api.post, clock=Clock())
    want = Resource("get", path="/metrics")
    asked = [asyncio.ensure_future(access.allowed(Caller("alice"), want)) for _ in range(5)]
    await asyncio.sleep(0)
    api.release.set()
    results = await asyncio.gather(*asked, return_exceptions=True)
    assert all(isinstance(r, AccessUnavailableError) for r in results)
    assert len(api.calls) == 1
    api.down = False
    assert await access.allowed(Caller("alice"), want)
    assert len(api.calls) == 2


async def test_a_waiter_that_gives_up_does_not_cancel_the_review_for_the_others() -> None:
    api = SlowApi()
    access = Access(api.post, clock=Clock())
    first = asyncio.ensure_future(access.authenticate("token"))
    second = asyncio.ensure_future(access.authenticate("token"))
    await asyncio.sleep(0)
    first.cancel()
    api.release.set()
    caller = await second
    assert caller is not None
    assert caller.user == "alice"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert api.calls == [TOKEN_REVIEWS]


async def test_answers_expire_and_recent_ones_stand_in_while_the_api_server_is_down() -> None:
    api = SlowApi()
    api.release.set()
    clock = Clock()
    access = Access(api.post, clock=clock, allowed_ttl=300, denied_ttl=30, max_stale=3600)
    bob, alice, want = Caller("bob"), Caller("alice"), Resource("get", path="/metrics")
    assert await access.allowed(alice, want)
    assert not await access.allowed(bob, want)
    clock.now += 60  # bob's refusal expired (30 s), alice's permission not (300 s)
    assert await access.allowed(alice, want)
    assert not await access.allowed(bob, want)
    assert len(api.calls) == 3
    api.down = True
    clock.now += 600  # both expired; the API server down: recent answers stand in
    assert await access.allowed(alice, want)
    assert access.stats.stale_answers == 1
    clock.now += 3600  # expired longer ago than max_stale: no answer
    with pytest.raises(AccessUnavailableError):
        await access.allowed(alice, want)
