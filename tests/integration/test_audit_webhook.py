"""Live: a real kube-apiserver's audit webhook backend (batch mode) posts to `fightwatch run`, which watches the same
cluster. The audit scenarios' storms, stuck applier and no-op loop are found live with their clients and their pods,
the fights' writers are named with their users (kube-controller-manager's HPA by its own service account), benign
traffic is not reported, and the endpoint turns away what it must; on the current and the oldest supported
release."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import io
import secrets
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import audit_scenarios as scenarios
from harness.control_plane import ControlPlane, audit_webhook_kubeconfig, free_port
from harness.envelopes import WRITERS
from harness.monitoring import start_prometheus
from harness.watcher import Watcher
from watcher.sources.audit_webhook import PATH

pytestmark = pytest.mark.integration
NAMES = list(scenarios.SCENARIOS)
REPO = Path(__file__).resolve().parents[2]
Plane = tuple[ControlPlane, "Webhook"]


class Webhook:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.token = secrets.token_urlsafe(24)
        self.token_file = workdir / "audit-token"
        self.token_file.write_text(self.token + "\n")
        self.pki = workdir / "pki"  # (made by start_control_plane: the CA, and a serving certificate for 127.0.0.1)
        self.url = f"https://127.0.0.1:{self.port}{PATH}"
        # the API server authenticates with a client certificate of the CA fightwatch trusts
        self.kubeconfig = audit_webhook_kubeconfig(workdir, self.url)

    def settings(self) -> dict[str, object]:
        return {
            "enabled": True,
            "address": "127.0.0.1",
            "port": self.port,
            "tls_cert_file": str(self.pki / "apiserver.crt"),
            "tls_key_file": str(self.pki / "apiserver.key"),
            "client_ca_file": str(self.pki / "ca.crt"),
            "token_file": str(self.token_file),  # (either authenticates: the tests below post with the token)
            "max_body_bytes": 4 * 2**20,
        }


def _finding(kind: str, namespace: str) -> Callable[[dict[str, Any]], bool]:
    """Match a finding of this type on an object in this namespace."""
    return lambda f: f["type"] == kind and f["object"]["namespace"] == namespace


@pytest.fixture(scope="module")
def webhook_planes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[ControlPlane, Webhook]]]:
    """A control plane per tested release, each posting its audit events to a webhook of its own, started at once."""
    releases = scenarios.tested_releases()
    workdirs = {release: tmp_path_factory.mktemp(f"audit-webhook-{release}") for release in releases}
    hooks = {release: Webhook(workdir) for release, workdir in workdirs.items()}
    planes = scenarios.start_each(workdirs, NAMES, audit_webhooks={r: hook.kubeconfig for r, hook in hooks.items()})
    try:
        yield {release: (planes[release], hooks[release]) for release in releases}
    finally:
        for cp in planes.values():
            cp.stop()


@pytest.fixture(scope="module")
async def watchings(
    webhook_planes: dict[str, tuple[ControlPlane, Webhook]], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, tuple[Watcher, Webhook]]]:
    """A watcher per control plane, fed by its webhook, while the scenarios run on every release at the same time
    (they wait on real time far more than they compute)."""
    async with contextlib.AsyncExitStack() as stack:
        found: dict[str, tuple[Watcher, Webhook]] = {}
        for release, (cp, hook) in webhook_planes.items():
            config = {
                "watch": {
                    "resources": ["configmaps", "deployments"],
                    # spec.replicas values (on servers before 1.22 the scale writes showed in no managedFields entry)
                    "per_resource": {"deployments.apps": {"full_objects": True}},
                },
                "audit_webhook": hook.settings(),
            }
            cert, key = cp.watcher_serving_pair  # (a CA-signed serving certificate, which Prometheus verifies)
            config["serve"] = {"tls": {"cert_file": str(cert), "key_file": str(key)}}
            workdir = tmp_path_factory.mktemp(f"watcher-{release}")
            watcher = Watcher(workdir, kubeconfig=cp.kubeconfig, config=config, ca_file=cp.ca_file)
            found[release] = (await stack.enter_async_context(watcher), hook)
        await asyncio.gather(*(watcher.wait_ready() for watcher, _ in found.values()))
        await asyncio.gather(*(scenarios.record(webhook_planes[release][0], NAMES) for release in found))
        yield found


@pytest.fixture(scope="module", params=scenarios.tested_releases())
def release(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def webhook_plane(release: str, webhook_planes: dict[str, Plane]) -> Plane:
    return webhook_planes[release]


@pytest.fixture(scope="module")
def watching(release: str, watchings: dict[str, tuple[Watcher, Webhook]]) -> tuple[Watcher, Webhook]:
    return watchings[release]


async def test_findings_over_requests_arrive_live_with_their_clients(
    watching: tuple[Watcher, Webhook], webhook_plane: tuple[ControlPlane, Webhook]
) -> None:
    watcher, _ = watching
    wanted = {
        ("conflict_storm", "rmw-fight"),
        ("conflict_storm", "storm-fields"),
        ("apply_conflict", "apply-stuck"),
        ("noop_writes", "noop-loop"),
        ("conflict_storm", "cascade"),
    }
    for kind, ns in wanted:
        await watcher.wait_for_finding(_finding(kind, ns), what=f"a {kind} in {ns}")
    # the storm is the failed half of the fight over the same object: linked to it once the watch has found it
    fight = await watcher.wait_for_finding(_finding("fight", "rmw-fight"), what="the fight in rmw-fight")
    await watcher.wait_for_finding(
        lambda f: _finding("conflict_storm", "rmw-fight")(f) and f["related"] == fight["id"],
        what="the storm in rmw-fight linked to its fight",
    )
    findings = await watcher.findings()
    by_key = {(f["type"], f["object"]["namespace"]): f for f in findings}
    storm = by_key["conflict_storm", "rmw-fight"]
    assert {c["user"]: c["conflicts"] for c in storm["clients"]} == {
        scenarios.LABELER.user: 12,
        scenarios.GITOPS.user: 0,
    }
    assert storm["object"]["kind"] == "ConfigMap"  # the watch saw it: named as the watch names it
    assert {c["user"]: c["pod"] for c in storm["clients"]} == {  # each client with the pod its token is bound to
        scenarios.LABELER.user: scenarios.LABELER.pod_ref,
        scenarios.GITOPS.user: scenarios.GITOPS.pod_ref,
    }
    assert storm["hint"].startswith("These conflicts follow from the fight on the same object (ConfigMap rmw-fight/")
    fight = by_key["fight", "rmw-fight"]
    assert {w["manager"]: w["users"] for w in fight["writers"]} == {
        "argocd-application-controller": [scenarios.GITOPS.user],
        "labeler": [scenarios.LABELER.user],
    }
    assert fight["conflicts"] == 12
    # (users are added as requests arrive: the fight may be found before the batch with its writes)
    scaled = await watcher.wait_for_finding(
        lambda f: (
            f["type"] == "fight" and f["object"]["namespace"] == "scale-fight" and all(w["users"] for w in f["writers"])
        ),
        what="the scale fight, its writers named with their users",
    )
    assert [(w["manager"], w["subresource"], w["users"]) for w in scaled["writers"]] == [
        ("custom-autoscaler", "scale", [scenarios.AUTOSCALER.user]),
        ("helm", None, [scenarios.HELM.user]),
    ]
    # the real HPA's scale writes, under the manager the deployment controller writes the status as
    hpa = await watcher.wait_for_finding(
        lambda f: (
            f["type"] == "fight" and f["object"]["namespace"] == "hpa-fight" and all(w["users"] for w in f["writers"])
        ),
        what="the HPA's fight, its writers named with their users",
    )
    assert [(w["manager"], w["subresource"], w["users"]) for w in hpa["writers"]] == [
        ("kube-controller-manager", "scale", [scenarios.HPA_CONTROLLER]),
        ("kubectl-client-side-apply", None, [scenarios.DEPLOYER.user]),
    ]
    # the RequestResponse twin: the owner and the field from the API server's message
    applied = await watcher.wait_for_finding(
        lambda f: f["type"] == "apply_conflict" and f["object"]["namespace"] == "apply-stuck-full"
    )
    assert applied["fields"] == ["data.mode"]
    assert not [f for f in findings if f["object"]["namespace"].startswith("benign")]
    # the renderer's conflicts follow from the fight upstream, the labeler's from the fight they are the failed half
    # of: linked to it, and no finding series of their own
    downstream = by_key["conflict_storm", "cascade"]
    assert downstream["related"] == by_key["fight", "cascade"]["id"]
    series = [
        (s.labels["type"], s.labels["namespace"], s.labels["name"])
        for family in text_string_to_metric_families(await watcher.scrape())
        for s in family.samples
        if s.name == "fightwatch_finding_info"
    ]
    assert ("fight", "rmw-fight", "settings") in series
    assert ("conflict_storm", "rmw-fight", "settings") not in series
    assert ("conflict_storm", "cascade", "app-rendered") not in series
    assert (await watcher.metric("fightwatch_audit_batches_total", outcome="accepted") or 0) >= 1
    # the Secret of `benign-full` was posted with its value (RequestResponse level): it is nowhere fightwatch tells,
    # once fightwatch has received every request the log backend wrote up to the end of the scenarios
    cp, _ = webhook_plane
    assert cp.audit_log is not None
    lines = scenarios.wait_for_log(cp.audit_log, NAMES)
    logged = sum(1 for line in lines if b'"objectRef"' in line and b'"stage":"ResponseComplete"' in line)

    async def received() -> float | None:
        queued = await watcher.metric("fightwatch_audit_requests_received_total", outcome="queued") or 0.0
        return queued if queued >= logged else None

    await watcher.poll_async(received, what=f"{logged} requests received")
    encoded = base64.b64encode(scenarios.SECRET_VALUE.encode()).decode()
    assert encoded.encode() in b"".join(lines)  # the same events the webhook got carry it (so this could fail)
    told = watcher.log_path.read_text() + await watcher.scrape() + orjson.dumps(await watcher.findings()).decode()
    assert scenarios.SECRET_VALUE not in told
    assert encoded not in told
    assert (
        await watcher.metric("fightwatch_conflicts_total", group="", resource="configmaps", reason="version") or 0
    ) >= 42
    assert (await watcher.metric("fightwatch_client_conflicts_total", manager="annotator", reason="version") or 0) >= 30
    assert (await watcher.metric("fightwatch_client_conflicts_total", manager="kubectl", reason="apply") or 0) >= 3


async def test_the_endpoint_turns_away_strangers_and_oversized_batches(watching: tuple[Watcher, Webhook]) -> None:
    watcher, hook = watching
    context = ssl.create_default_context(cafile=str(hook.pki / "ca.crt"))
    stranger = ssl.create_default_context(cafile=str(hook.pki / "ca.crt"))
    stranger.load_cert_chain(str(hook.pki / "apiserver.crt"), str(hook.pki / "apiserver.key"))  # no clientAuth use
    body = b'{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}'
    async with aiohttp.ClientSession() as session:
        async with session.post(hook.url, data=body, ssl=context) as response:
            assert response.status == 401  # no token
        wrong = {"Authorization": "Bearer not-the-token"}
        async with session.post(hook.url, data=body, ssl=context, headers=wrong) as response:
            assert response.status == 401
        right = {"Authorization": f"Bearer {hook.token}"}
        async with session.post(hook.url, data=b"{not json", ssl=context, headers=right) as response:
            assert response.status == 400
            assert "not valid JSON" in (await response.json())["message"]
        huge = io.BytesIO(b" " * (4 * 2**20 + 1))
        async with session.post(hook.url, data=huge, ssl=context, headers=right) as response:
            assert response.status == 413
        # a certificate of the CA that may not authenticate a client fails the handshake
        with pytest.raises(aiohttp.ClientError):
            async with session.post(hook.url, data=body, ssl=stranger):
                pass
        plain = hook.url.replace("https://", "http://")
        with pytest.raises(aiohttp.ClientError):  # TLS only
            async with session.post(plain, data=body, headers=right):
                pass
    for outcome in ("unauthorized", "invalid", "too_large"):
        assert (await watcher.metric("fightwatch_audit_batches_total", outcome=outcome) or 0) >= 1


async def test_the_dashboards_audit_panels_have_data_in_a_real_prometheus(
    watching: tuple[Watcher, Webhook], tmp_path: Path
) -> None:
    watcher, _ = watching
    await watcher.wait_for_finding(lambda f: f["type"] == "noop_writes", what="a no-op loop")  # (the data is in)
    panels = [
        (target["expr"], panel["title"])
        for path in sorted((REPO / "dashboards").glob("*.json"))
        for panel in orjson.loads(path.read_bytes())["panels"]
        if "Needs the audit webhook" in panel.get("description", "")
        for target in panel["targets"]
    ]
    assert len(panels) == 4
    (tmp_path / "token").write_text(watcher.token)
    prometheus = start_prometheus(
        tmp_path / "prometheus",
        target=watcher.url,
        rule_files=[],
        ca_file=watcher.ca_file,
        bearer_token_file=tmp_path / "token",
    )
    try:
        async with aiohttp.ClientSession() as session:
            for expr, title in panels:
                query = expr.replace("$cluster", ".*").replace("$__rate_interval", "1m")

                async def answered(query: str = query) -> list[object] | None:
                    url = f"{prometheus.url}/api/v1/query?{urlencode({'query': query})}"
                    async with session.get(url) as response:
                        data = await response.json()
                    assert data["status"] == "success", data
                    return data["data"]["result"] or None  # (None: not yet)

                # (a rate needs two scrapes in its window: polled, not assumed)
                assert await watcher.poll_async(answered, what=f"data for {title}"), title
    finally:
        prometheus.stop()


def _shifted(path: Path, namespace: str) -> list[dict[str, Any]]:
    """A recorded log's events as if they happened now, in another namespace."""
    text = path.read_text().replace('"rmw-fight"', f'"{namespace}"').replace("/rmw-fight/", f"/{namespace}/")
    events = [orjson.loads(line) for line in text.splitlines()]
    first = datetime.fromisoformat(events[0]["stageTimestamp"])
    shift = datetime.now(UTC) - first
    for event in events:
        for key in ("stageTimestamp", "requestReceivedTimestamp"):
            event[key] = (datetime.fromisoformat(event[key]) + shift).isoformat().replace("+00:00", "Z")
    return events


async def test_a_shipper_forwards_a_managed_clusters_audit_stream_in_the_clouds_envelope(
    watching: tuple[Watcher, Webhook],
) -> None:
    """What a managed cluster gives instead of its API server's webhook: the cloud's envelope, posted by a shipper
    (EKS through a Firehose HTTP endpoint, GKE's Pub/Sub push bodies, AKS's Event Hubs messages, gzipped)."""
    watcher, hook = watching
    context = ssl.create_default_context(cafile=str(hook.pki / "ca.crt"))
    recorded = REPO / "tests" / "fixtures" / "audit" / "rmw-fight.metadata.jsonl"
    async with aiohttp.ClientSession() as session:
        for form in ("eks-firehose-http", "gke-pubsub-push", "aks-event-hubs"):
            body = WRITERS[form][1](_shifted(recorded, f"{form}-rmw"))
            if form.startswith("eks"):
                headers = {"X-Amz-Firehose-Request-Id": form, "X-Amz-Firehose-Access-Key": hook.token}
            else:
                headers = {"Authorization": f"Bearer {hook.token}", "Content-Encoding": "gzip"}
                body = gzip.compress(body)
            async with session.post(hook.url, data=body, ssl=context, headers=headers) as response:
                assert response.status == 200, await response.text()
                if form.startswith("eks"):
                    assert (await response.json())["requestId"] == form
    for form in ("eks-firehose-http", "gke-pubsub-push", "aks-event-hubs"):
        storm = await watcher.wait_for_finding(
            _finding("conflict_storm", f"{form}-rmw"), what=f"the conflict storm forwarded through {form}"
        )
        assert {c["user"] for c in storm["clients"]} == {scenarios.LABELER.user, scenarios.GITOPS.user}
