"""The Lease's times as the leader-election wrapper writes and reads them, whatever the local time zone.

(kubernetes-asyncio's LeaseLock writes local time marked `Z`, and no renewTime at all on a whole second; the
election itself runs against the real kube-apiserver in tests/integration/test_high_availability.py.)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord

from watcher.leadership.lease import _Lock


@pytest.fixture(params=["UTC", "America/Los_Angeles", "Asia/Kolkata"])
def local_zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
async def lock() -> AsyncIterator[_Lock]:
    api_client = ApiClient(Configuration())
    try:
        yield _Lock("fightwatch", "default", "me_1234", api_client)
    finally:
        await api_client.close()


@pytest.mark.usefixtures("local_zone")
@pytest.mark.parametrize("moment", [1795271498.668189, 1795271498.0])
def test_record_times_are_written_in_utc_with_microseconds(lock: _Lock, moment: float) -> None:
    local = str(datetime.fromtimestamp(moment))  # noqa: DTZ006 - the library's record times are local
    record = LeaderElectionRecord("me_1234", "15", local, local)
    spec = lock.update_lease(record)
    expected = datetime.fromtimestamp(moment, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert spec.renew_time == expected
    assert spec.acquire_time == expected
    assert spec.lease_duration_seconds == 15


@pytest.mark.usefixtures("local_zone")
def test_times_read_back_from_a_lease_are_written_again_unchanged(lock: _Lock) -> None:
    """A leader keeps the acquireTime it read: read (UTC on the wire) and written again, it must not shift."""
    acquired = datetime(2026, 11, 21, 14, 31, 37, 651341, tzinfo=UTC)
    lease = client.V1Lease(
        spec=client.V1LeaseSpec(
            holder_identity="me_1234", lease_duration_seconds=15, acquire_time=acquired, renew_time=acquired
        )
    )
    record = lock.election_record(lease)
    assert lock.update_lease(record).acquire_time == "2026-11-21T14:31:37.651341Z"


def test_a_new_holder_counts_a_transition(lock: _Lock) -> None:
    now = str(datetime.now())  # noqa: DTZ005 - the library's local time
    current = client.V1LeaseSpec(holder_identity="other_9", lease_duration_seconds=15, lease_transitions=2)
    spec = lock.update_lease(LeaderElectionRecord("me_1234", "15", now, now), current)
    assert spec.holder_identity == "me_1234"
    assert spec.lease_transitions == 3
    renewed = lock.update_lease(LeaderElectionRecord("me_1234", "15", now, now), spec)
    assert renewed.lease_transitions == 3
