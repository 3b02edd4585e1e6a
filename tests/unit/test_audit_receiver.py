"""The audit webhook's receiver takes a batch in any envelope a log shipper forwards (EKS through Firehose's HTTP
endpoint, GKE's Pub/Sub push bodies, AKS's Event Hubs messages, gzipped or not) and queues the same requests as for
the raw events; Firehose gets the answer it expects. (TLS and the real API server's webhook:
tests/integration/test_audit_webhook.py.)"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from harness.envelopes import WRITERS, gke_degraded, raw_lines
from watcher.config import AuditWebhookSettings
from watcher.sources.audit import AuditStats, decode_audit
from watcher.sources.audit_webhook import PATH, AuditReceiver

FIXTURE = Path(__file__).parents[1] / "fixtures" / "audit" / "rmw-fight.request-response.jsonl"
EVENTS: list[dict[str, Any]] = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
TOKEN = "s3cr3t-token-for-the-tests"  # noqa: S105 - the tests' own token


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], AuditReceiver]]:
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "tls.crt").write_text("")
    settings = AuditWebhookSettings(
        enabled=True,
        tls_cert_file=tmp_path / "tls.crt",
        tls_key_file=tmp_path / "tls.crt",
        token_file=tmp_path / "token",
        max_body_bytes=2**20,
    )
    receiver = AuditReceiver(settings)
    async with TestClient(TestServer(receiver.app())) as test_client:
        yield test_client, receiver


def expected(*, gke: bool = False) -> list[Any]:
    events = [e for e in map(gke_degraded, EVENTS) if e is not None] if gke else EVENTS
    return decode_audit(raw_lines(events), AuditStats())


@pytest.mark.parametrize(
    ("form", "gzipped"),
    [("eks-firehose-http", False), ("gke-pubsub-push", False), ("aks-event-hubs", True), ("aks-event-hubs", False)],
)
async def test_a_batch_in_a_clouds_envelope_queues_the_requests_of_its_raw_events(
    client: tuple[TestClient[Any, Any], AuditReceiver], form: str, gzipped: bool
) -> None:
    test_client, receiver = client
    envelope, write = WRITERS[form]
    body = write(EVENTS)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if gzipped:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    response = await test_client.post(PATH, data=body, headers=headers)
    assert response.status == 200, await response.text()
    assert receiver.drain(len(EVENTS) + 1) == expected(gke=envelope == "gke")
    assert receiver.stats.batches == {"accepted": 1}


async def test_firehose_authenticates_with_its_access_key_and_gets_its_answer(
    client: tuple[TestClient[Any, Any], AuditReceiver],
) -> None:
    test_client, receiver = client
    body = WRITERS["eks-firehose-http"][1](EVENTS)
    delivery = {"X-Amz-Firehose-Request-Id": "ed4acda5-034f-9f42", "X-Amz-Firehose-Protocol-Version": "1.0"}
    response = await test_client.post(PATH, data=body, headers={**delivery, "X-Amz-Firehose-Access-Key": TOKEN})
    assert response.status == 200
    answer = await response.json()
    assert answer["requestId"] == "ed4acda5-034f-9f42"
    assert isinstance(answer["timestamp"], int)
    assert "errorMessage" not in answer
    assert receiver.drain(len(EVENTS) + 1) == expected()
    response = await test_client.post(PATH, data=body, headers={**delivery, "X-Amz-Firehose-Access-Key": "guess"})
    assert response.status == 401
    assert (await response.json())["errorMessage"].startswith("a client certificate of the configured CA")
    response = await test_client.post(
        PATH, data=b'{"records": [{"data": "%%%"}]}', headers={**delivery, "X-Amz-Firehose-Access-Key": TOKEN}
    )
    assert response.status == 400
    assert "records[0] is not base64" in (await response.json())["errorMessage"]
    assert receiver.pending == 0
    assert receiver.stats.batches == {"accepted": 1, "unauthorized": 1, "invalid": 1}


async def test_a_body_of_json_lines_with_a_broken_line_is_refused_naming_it(
    client: tuple[TestClient[Any, Any], AuditReceiver],
) -> None:
    test_client, receiver = client
    lines = WRITERS["gke-pubsub-push"][1](EVENTS).splitlines()
    body = b"\n".join([lines[0], b'{"message": {"data": "', *lines[1:]])
    response = await test_client.post(PATH, data=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status == 400
    assert (await response.json())["message"].startswith("not audit events, nor a cloud's envelope of them: line 2: ")
    assert receiver.pending == 0
