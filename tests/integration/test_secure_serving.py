"""`fightwatch run` serving securely, against a real kube-apiserver with real tokens and real RBAC.

Fights run in two namespaces. Callers: no token, a token nobody issued, service accounts with real tokens
(TokenRequest): one without any RBAC, a Prometheus with the chart's scraper ClusterRole, a tenant bound to `view`
in one namespace, a platform engineer with `view` cluster-wide, a tool allowed to list `findings.fightwatch.io`;
and a client certificate of the cluster's CA. Then the API server restarts while cached answers keep serving, the
serving certificate is rotated on disk, and a real Prometheus scrapes over HTTPS with a bearer token file.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import shutil
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
import yaml
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from harness.browser import open_browser
from harness.control_plane import ControlPlane
from harness.kube import JSON, Kube, new_api_client
from harness.monitoring import start_prometheus
from harness.scenarios import label_fight
from harness.watcher import Watcher
from tests.control_planes import running_control_plane
from watcher.serving.tls import fingerprint, self_signed

pytestmark = pytest.mark.integration

TEAMS = ("team-a", "team-b")
RBAC = "/apis/rbac.authorization.k8s.io/v1"
# (namespace, service account) -> what it is bound to
ACCOUNTS = {
    ("monitoring", "prometheus"): "scraper",
    ("team-a", "developer"): "view in team-a",
    ("platform", "engineer"): "view everywhere",
    ("tools", "reporter"): "every finding",
    ("elsewhere", "nobody"): "nothing",
}
PLATFORM_USER, PLATFORM_GROUP = "platform-oncall", "platform-team"
UNSEEN = "a-token-never-seen-before"
UNKNOWN = "a-token-nobody-issued"  # refused, and so cached as refused
UNREVIEWING = "watcher-without-reviews"  # a watcher's own user, allowed to watch but not to review callers


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    # (kube-controller-manager's clusterrole-aggregation controller fills the `view` role's rules)
    yield from running_control_plane(tmp_path_factory, "secure-serving", users=(UNREVIEWING,), controller_manager=True)


@pytest.fixture(scope="module")
async def kube(plane: ControlPlane) -> AsyncIterator[Kube]:
    client = await new_api_client(plane.kubeconfig)
    try:
        yield Kube(client)
    finally:
        await client.close()


@pytest.fixture(scope="module")
async def tokens(kube: Kube) -> dict[str, str]:
    """Each account's real token, after its RBAC is in place."""
    await _bind(kube)
    found = {}
    for namespace, name in ACCOUNTS:
        await kube.ensure_namespace(namespace)
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        await kube.ensure(f"/api/v1/namespaces/{namespace}/serviceaccounts", account, manager="test")
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        answer = await kube.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=request
        )
        found[name] = answer["status"]["token"]
    return found


async def _bind(kube: Kube) -> None:
    def subject(namespace: str, name: str) -> JSON:
        return {"kind": "ServiceAccount", "name": name, "namespace": namespace}

    def binding(name: str, role: str, subjects: list[JSON], namespace: str | None = None) -> JSON:
        meta: JSON = {"name": name} | ({"namespace": namespace} if namespace else {})
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects,
        }

    for namespace in (*TEAMS, "platform", "monitoring", "tools", "elsewhere"):
        await kube.ensure_namespace(namespace)
    roles = {  # as the chart's scraper ClusterRole, and a tool's
        "fightwatch-metrics-reader": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        "fightwatch-findings-reader": [{"apiGroups": ["fightwatch.io"], "resources": ["findings"], "verbs": ["list"]}],
    }
    for name, rules in roles.items():
        cluster_role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}}
        await kube.ensure(f"{RBAC}/clusterroles", cluster_role | {"rules": rules}, manager="test")
    for name, role, subjects in (
        ("scraper", "fightwatch-metrics-reader", [subject("monitoring", "prometheus")]),
        ("reporter", "fightwatch-findings-reader", [subject("tools", "reporter")]),
        (
            "platform-view",
            "view",
            [subject("platform", "engineer"), {"kind": "Group", "name": PLATFORM_GROUP}],
        ),
    ):
        await kube.ensure(f"{RBAC}/clusterrolebindings", binding(name, role, subjects), manager="test")
    unreviewing = binding("watch-only", "view", [{"kind": "User", "name": UNREVIEWING}])
    await kube.ensure(f"{RBAC}/clusterrolebindings", unreviewing, manager="test")
    developer = binding("developer-view", "view", [subject("team-a", "developer")], namespace="team-a")
    await kube.ensure(f"{RBAC}/namespaces/team-a/rolebindings", developer, manager="test")
    give_up = time.monotonic() + 120
    while not (await kube.get(f"{RBAC}/clusterroles/view")).get("rules"):  # (aggregated by the controller manager)
        assert time.monotonic() < give_up, "the view ClusterRole was never aggregated"
        await asyncio.sleep(0.2)  # poll interval, not a readiness guess


def _in_namespace(namespace: str) -> Callable[[dict[str, Any]], bool]:
    """Match a finding on an object in this namespace."""
    return lambda f: f["object"]["namespace"] == namespace


@pytest.fixture(scope="module")
async def watcher(
    plane: ControlPlane, kube: Kube, tokens: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Watcher]:
    workdir = tmp_path_factory.mktemp("watcher")
    tls_dir = workdir / "tls"  # (a copy: the rotation test replaces it)
    tls_dir.mkdir()
    cert, key = plane.watcher_serving_pair
    shutil.copy(cert, tls_dir / "tls.crt")
    shutil.copy(key, tls_dir / "tls.key")
    config = {
        "watch": {"resources": ["configmaps"]},
        "serve": {
            "tls": {
                "cert_file": str(tls_dir / "tls.crt"),
                "key_file": str(tls_dir / "tls.key"),
                "client_ca_file": str(plane.ca_file),
            },
            # short, so that the outage test finds every cached answer expired (and served stale)
            "auth": {"allowed_ttl": "1s", "denied_ttl": "1s"},
        },
    }
    async with Watcher(workdir, kubeconfig=plane.kubeconfig, config=config, ca_file=plane.ca_file) as running:
        await running.wait_ready()
        for team in TEAMS:
            await label_fight(kube, team, ("team-a-operator", "team-b-operator"))
        for team in TEAMS:
            await running.wait_for_finding(_in_namespace(team), what=f"the fight in {team}")
        yield running


async def test_no_token_or_an_unknown_one_is_a_401(watcher: Watcher) -> None:
    for path in ("/metrics", "/api/v1/findings"):
        for token in ("", "not-a-token-anyone-issued"):
            status, body = await watcher.get(path, token=token)
            assert status == 401, (path, token, body)
            assert "bearer token" in body["error"]


async def test_a_valid_token_without_rbac_is_a_403_and_sees_no_findings(
    watcher: Watcher, tokens: dict[str, str]
) -> None:
    status, body = await watcher.get("/metrics", token=tokens["nobody"])
    assert status == 403
    assert body["error"] == 'Forbidden: User "system:serviceaccount:elsewhere:nobody" cannot get path "/metrics"'
    assert await watcher.findings(token=tokens["nobody"]) == []
    status, _ = await watcher.get("/api/v1/findings", token=tokens["prometheus"])
    assert status == 200  # (the scraper may read metrics; its findings list is as empty as anyone's without RBAC)
    assert await watcher.findings(token=tokens["prometheus"]) == []


async def test_the_scraper_gets_metrics_over_tls_and_nothing_over_plain_http(
    watcher: Watcher, tokens: dict[str, str]
) -> None:
    status, text = await watcher.get("/metrics", token=tokens["prometheus"])
    assert status == 200
    assert "fightwatch_findings_active" in text
    plain = watcher.url.replace("https://", "http://")
    headers = {"Authorization": f"Bearer {tokens['prometheus']}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(plain + "/metrics", headers=headers) as response:
                await response.read()


async def test_each_caller_sees_the_findings_about_objects_it_may_list(
    watcher: Watcher, tokens: dict[str, str]
) -> None:
    def places(findings: list[dict[str, Any]]) -> set[str]:
        return {f["object"]["namespace"] for f in findings if f["object"]["name"] == "contested"}

    assert places(await watcher.findings()) == set(TEAMS)  # (the harness: cluster-admin)
    assert places(await watcher.findings(token=tokens["developer"])) == {"team-a"}
    assert places(await watcher.findings(token=tokens["developer"], namespace="team-b")) == set()
    assert places(await watcher.findings(token=tokens["engineer"])) == set(TEAMS)
    assert places(await watcher.findings(token=tokens["reporter"])) == set(TEAMS)


def _cards(html: str) -> set[str]:
    """The ids of the findings a page (or its findings part) shows."""
    return set(re.findall(r'<article[^>]* id="finding-([0-9a-f]+)"', html))


async def test_the_page_shows_each_caller_the_findings_it_may_see(watcher: Watcher, tokens: dict[str, str]) -> None:
    ids = {f["object"]["namespace"]: f["id"] for f in await watcher.findings() if f["object"]["name"] == "contested"}
    status, frame = await watcher.get("/findings", token="")
    assert status == 200
    assert _cards(frame) == set()  # without credentials: the page alone, which asks for a token
    assert (await watcher.get("/findings", token="", fragment="1"))[0] == 401
    assert (await watcher.get("/findings", token=UNKNOWN, fragment="1"))[0] == 401
    for account, seen in (("developer", {"team-a"}), ("engineer", set(TEAMS)), ("nobody", set())):
        status, page = await watcher.get("/findings", token=tokens[account])
        assert status == 200
        assert _cards(page) & set(ids.values()) == {ids[team] for team in seen}, account
        status, part = await watcher.get("/findings", token=tokens[account], fragment="1")
        assert status == 200
        assert _cards(part) & set(ids.values()) == {ids[team] for team in seen}, account
    # each shown with its timeline: a lane per operator
    _, page = await watcher.get("/findings", token=tokens["developer"], namespace="team-a")
    assert 'data-writer="team-a-operator' in page
    assert 'data-writer="team-b-operator' in page


async def test_in_a_browser_a_token_signs_in_and_shows_what_it_may_see(
    watcher: Watcher, plane: ControlPlane, tokens: dict[str, str]
) -> None:
    """The page in a real Chromium: it asks for a token, shows the tenant's fight with a lane per operator, shows
    nothing to a token without RBAC, and says so of a token the API server does not accept."""
    await asyncio.to_thread(_browse, watcher.url, plane.watcher_serving_pair[0], tokens)


def _browse(url: str, certificate: Path, tokens: dict[str, str]) -> None:
    with open_browser(trust=(certificate,)) as browser:
        browser.open(url + "/findings")
        driver = browser.driver
        wait = WebDriverWait(driver, 30)

        def sign_in(token: str) -> None:
            wait.until(lambda d: d.find_element(By.ID, "signin").is_displayed())
            driver.find_element(By.ID, "signin-token").send_keys(token)
            driver.find_element(By.CSS_SELECTOR, "#signin-form button[type=submit]").click()

        def shown() -> list[WebElement]:
            wait.until(lambda d: d.find_element(By.ID, "live-controls").is_displayed())
            return driver.find_elements(By.CSS_SELECTOR, "article.finding")

        sign_in(tokens["developer"])
        cards = [c for c in shown() if c.get_attribute("data-namespace") in TEAMS]
        assert [c.get_attribute("data-namespace") for c in cards] == ["team-a"]
        lanes = {g.get_attribute("data-writer") for g in cards[0].find_elements(By.CSS_SELECTOR, "svg g.lane")}
        assert lanes == {"team-a-operator (Update)", "team-b-operator (Update)"}
        assert all(r.startswith(url + "/") for r in browser.requests() if not r.startswith("data:"))
        driver.find_element(By.ID, "live-forget").click()
        assert driver.find_elements(By.CSS_SELECTOR, "article.finding") == []
        sign_in(tokens["nobody"])
        assert shown() == []
        driver.find_element(By.ID, "live-forget").click()
        sign_in(UNKNOWN)
        wait.until(lambda d: "not accepted" in d.find_element(By.ID, "live-message").text)
        assert driver.find_elements(By.CSS_SELECTOR, "article.finding") == []


async def test_a_client_certificate_of_the_clusters_ca_authenticates_its_user_and_groups(
    watcher: Watcher, plane: ControlPlane
) -> None:
    cert, key = plane.client_certificate(PLATFORM_USER, (PLATFORM_GROUP,))
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    context.load_cert_chain(str(cert), str(key))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        async with session.get(watcher.url + "/api/v1/findings", ssl=context) as response:
            assert response.status == 200
            found = (await response.json())["findings"]
        assert {f["object"]["namespace"] for f in found if f["object"]["name"] == "contested"} == set(TEAMS)
        async with session.get(watcher.url + "/metrics", ssl=context) as response:
            assert response.status == 403  # (view grants no /metrics)
            assert PLATFORM_USER in (await response.json())["error"]


async def test_cached_answers_keep_serving_while_the_api_server_restarts(
    watcher: Watcher, plane: ControlPlane, tokens: dict[str, str]
) -> None:
    scraper, developer = tokens["prometheus"], tokens["developer"]
    assert (await watcher.get("/metrics", token=scraper))[0] == 200
    assert len(await watcher.findings(token=developer)) >= 1
    stale_before = await watcher.metric("fightwatch_access_cached_answers_total", freshness="stale") or 0.0
    plane.stop_apiserver()
    try:

        async def served_stale() -> bool | None:  # (answers expire after 1s: then only stale ones are left)
            status, text = await watcher.get("/metrics", token=scraper)
            assert status == 200, text
            assert len(await watcher.findings(token=developer)) >= 1
            stale = await watcher.metric("fightwatch_access_cached_answers_total", freshness="stale") or 0.0
            return True if stale > stale_before else None

        await watcher.poll_async(served_stale, what="cached answers served stale while the API server is down")
        status, body = await watcher.get("/metrics", token=UNSEEN)
        assert status == 503  # nothing cached to decide with: not a 401
        assert "could not review" in body["error"]
        await watcher.wait_for_log(lambda e: e.get("event") == "cannot review access", what="the outage logged")
    finally:
        plane.start_apiserver()

    async def reviewed_again() -> bool | None:
        status, _ = await watcher.get("/metrics", token=UNSEEN)
        return True if status == 401 else None

    await watcher.poll_async(reviewed_again, what="a new token reviewed (and refused) once the API server is back")
    await watcher.wait_for_log(lambda e: e.get("event") == "access reviews work again", what="the recovery logged")


async def test_a_certificate_rotated_on_disk_is_served_without_a_restart(watcher: Watcher) -> None:
    tls_dir = Path(yaml.safe_load(watcher.config_path.read_text())["serve"]["tls"]["cert_file"]).parent
    before = await _presented(watcher.url)
    cert, key = self_signed(("localhost",), now=datetime.datetime.now(datetime.UTC))
    (tls_dir / "new.crt").write_bytes(cert)
    (tls_dir / "new.key").write_bytes(key)
    # as the kubelet updates a mounted Secret: each file replaced at once (here the key first)
    os.replace(tls_dir / "new.key", tls_dir / "tls.key")
    os.replace(tls_dir / "new.crt", tls_dir / "tls.crt")

    async def rotated() -> str | None:
        now = await _presented(watcher.url)
        return now if now != before else None

    served = await watcher.poll_async(rotated, what="the new certificate served")
    loaded = await watcher.wait_for_log(lambda e: e.get("event") == "serving certificate loaded", what="the reload")
    assert loaded["certificate"]["fingerprint"] == served
    # the old certificate is gone: a new connection verifying with the cluster's CA is refused
    host, port = watcher.url.removeprefix("https://").rsplit(":", 1)
    assert watcher.ca_file is not None
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncio.open_connection(host, int(port), ssl=ssl.create_default_context(cafile=str(watcher.ca_file)))
    watcher.tls = aiohttp.Fingerprint(bytes.fromhex(served.replace(":", "")))  # (the harness pins the new one)
    assert (await watcher.get("/readyz"))[0] == 200
    reloads = await watcher.metric("fightwatch_serving_certificate_reloads_total", config="serve.tls", result="loaded")
    assert reloads == 1


async def test_prometheus_scrapes_over_https_with_a_bearer_token_file(
    watcher: Watcher, plane: ControlPlane, tokens: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(tokens["prometheus"])  # as a ServiceMonitor's bearerTokenFile
    (tmp_path / "served.crt").write_bytes(await _presented_pem(watcher.url))  # (rotated by the test before)
    prometheus = start_prometheus(
        tmp_path / "prometheus",
        target=watcher.url,
        rule_files=[],
        ca_file=tmp_path / "served.crt",
        bearer_token_file=tmp_path / "token",
    )
    try:
        async with aiohttp.ClientSession() as session:

            async def scraped() -> list[Any] | None:
                query = urlencode({"query": 'fightwatch_findings_active{job="fightwatch"}'})
                async with session.get(f"{prometheus.url}/api/v1/query?{query}") as response:
                    data = await response.json()
                return data["data"]["result"] or None

            await watcher.poll_async(scraped, what="fightwatch_findings_active scraped by Prometheus")
            async with session.get(f"{prometheus.url}/api/v1/targets") as response:
                (target,) = (await response.json())["data"]["activeTargets"]
            assert target["health"] == "up"
            assert target["scrapeUrl"].startswith("https://")
    finally:
        prometheus.stop()


async def test_no_token_is_ever_logged(watcher: Watcher, plane: ControlPlane, tokens: dict[str, str]) -> None:
    log = watcher.log_path.read_text()
    assert watcher.log("started")
    for token in (*tokens.values(), plane.token, "not-a-token-anyone-issued", UNSEEN):
        assert token not in log


async def test_plain_http_is_a_development_mode_that_says_so(plane: ControlPlane, tmp_path: Path) -> None:
    config = {"watch": {"resources": ["configmaps"]}, "serve": {"insecure_http": True}}
    async with Watcher(tmp_path, kubeconfig=plane.kubeconfig, config=config, token="") as dev:
        assert dev.url.startswith("http://")
        await dev.wait_ready()
        assert (await dev.get("/metrics"))[0] == 200
        assert (await dev.get("/api/v1/findings"))[0] == 200
        (warning,) = dev.log("serving plain HTTP without authentication or authorization: development only")
        assert warning["level"] == "warning"


async def _presented_der(url: str) -> bytes:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # (reads whichever certificate is served)
    _, writer = await asyncio.open_connection(host, int(port), ssl=context)
    der: bytes = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return der


async def _presented(url: str) -> str:
    return fingerprint(await _presented_der(url))


async def _presented_pem(url: str) -> bytes:
    return ssl.DER_cert_to_PEM_cert(await _presented_der(url)).encode()


async def test_a_watcher_that_may_not_review_callers_says_so_at_start_and_answers_503(
    plane: ControlPlane, tokens: dict[str, str], tmp_path: Path
) -> None:
    config = {"watch": {"resources": ["configmaps"]}}
    kubeconfig = plane.kubeconfig_for(UNREVIEWING)
    async with Watcher(tmp_path, kubeconfig=kubeconfig, config=config, token=tokens["prometheus"]) as unable:
        warning = await unable.wait_for_log(
            lambda e: str(e.get("event", "")).startswith("callers cannot be reviewed"), what="the warning at start"
        )
        assert warning["missing"] == [
            "create tokenreviews.authentication.k8s.io",
            "create subjectaccessreviews.authorization.k8s.io",
        ]
        status, body = await unable.get("/metrics")
        assert status == 503
        assert "could not review" in body["error"]
        await unable.wait_for_log(lambda e: e.get("event") == "cannot review access", what="the failure logged")
        _, probe = await unable.readiness()
        assert set(probe) == {"ready"}  # (the probe answers still; its report needs a reviewed caller)
