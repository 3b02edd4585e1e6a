"""The chart's RBAC is enough and no more: its ServiceAccount, ClusterRoles and bindings, rendered by the real helm
with default values (and a findingsReader subject), are created on the real kube-apiserver; `fightwatch run` gets a
token of that ServiceAccount (TokenRequest), the chart's config and flags, and a pod's environment. Every resource
it watches by default is watched without a 403, a real fight is found, and its Event is written on the object. It
reviews its callers (TokenReview, SubjectAccessReview) as that ServiceAccount: an unknown token is refused (401,
not the 503 of a review it may not make), the scraper the chart binds reads /metrics, and the findings reader
every finding.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient

from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, JSON, Kube
from harness.watcher import Watcher
from tests.deploy.test_chart import of_kind, render
from tests.integration.test_watcher_rbac import _mount

RELEASE_NAMESPACE = "fightwatch-chart"
FIGHT_NAMESPACE = "fightwatch-chart-fight"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
UNISSUED = "never-issued-by-the-api-server"  # a bearer token no TokenReview accepts
FINDINGS_BOT = {"kind": "ServiceAccount", "name": "findings-bot", "namespace": RELEASE_NAMESPACE}


def _label(value: str) -> Callable[[JSON], None]:
    def mutate(obj: JSON) -> None:
        obj["metadata"].setdefault("labels", {})["owner"] = value

    return mutate


async def test_fightwatch_runs_with_exactly_the_charts_rbac(
    helm: str, control_plane: ControlPlane, api_client: ApiClient, tmp_path: Path
) -> None:
    docs = render(
        helm, "--namespace", RELEASE_NAMESPACE, "--set-json", f"findingsReader.subjects=[{json.dumps(FINDINGS_BOT)}]"
    )
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    (account,) = of_kind(docs, "ServiceAccount")
    (config_map,) = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    (deployment,) = of_kind(docs, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    kube = Kube(api_client)
    await kube.ensure_namespace(RELEASE_NAMESPACE)
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(rbac))
    kubectl = [str(control_plane.kubectl), "--kubeconfig", str(control_plane.kubeconfig)]
    applied = await asyncio.create_subprocess_exec(
        *kubectl, "apply", "-f", str(manifest), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, errors = await applied.communicate()
    assert applied.returncode == 0, errors.decode()
    mount, env = _mount(control_plane, tmp_path / "serviceaccount", await _token(kube, account["metadata"]))
    env |= {"POD_NAME": "fightwatch-0", "POD_NAMESPACE": RELEASE_NAMESPACE}

    config = yaml.safe_load(config_map["data"]["config.yaml"]) or {}
    config["kube"] = {**config.get("kube", {}), "service_account_dir": str(mount)}
    config["detection"] = {**config.get("detection", {}), "resolve": {"after": "1h"}}
    # The chart's config serves HTTPS from the mounted Secret; here a pair for 127.0.0.1 of the test CA instead.
    tls = config["serve"]["tls"]
    assert (tls["cert_file"], tls["key_file"]) == ("/etc/fightwatch/tls/tls.crt", "/etc/fightwatch/tls/tls.key")
    cert, key = control_plane.watcher_serving_pair
    config["serve"]["tls"] = {**tls, "cert_file": str(cert), "key_file": str(key)}
    # The chart's flags, except the port: the test listens on a free one.
    flags = (*(a for a in args if not a.startswith(("--config", "--listen"))), "--listen=127.0.0.1:0")
    watcher = Watcher(
        tmp_path, config=config, env=env, args=flags, token=control_plane.token, ca_file=control_plane.ca_file
    )
    async with watcher:
        report = await watcher.wait_ready()
        states = {resource: r["state"] for resource, r in report["resources"].items()}
        assert states
        assert set(states.values()) == {"watching"}, {k: v for k, v in states.items() if v != "watching"}
        for expected in ("configmaps", "deployments.apps", "secrets", "customresourcedefinitions.apiextensions.k8s.io"):
            assert expected in states
        assert not watcher.log("watch forbidden")

        await kube.ensure_namespace(FIGHT_NAMESPACE)
        path = CONFIGMAPS.path(FIGHT_NAMESPACE, "contested")

        def create() -> JSON:
            return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "contested"}}

        for _ in range(3):
            await kube.read_modify_write(path, _label("a"), manager="team-a-operator", create=create)
            await kube.read_modify_write(path, _label("b"), manager="team-b-operator")
        finding = await watcher.wait_for_finding(lambda f: f["object"]["name"] == "contested", what="the fight")
        uid = finding["object"]["uid"]

        async def event_written() -> list[JSON] | None:
            listed = await kube.request(
                "GET",
                f"/api/v1/namespaces/{FIGHT_NAMESPACE}/events",
                query={"fieldSelector": f"involvedObject.uid={uid}"},
            )
            warnings = [e for e in listed["items"] if e["type"] == "Warning"]
            return warnings or None

        (event,) = await watcher.poll_async(event_written, what="the fight's Event on the ConfigMap")
        assert event["reason"] == "ControllerFight"

        # Its callers are reviewed as the chart's ServiceAccount: a TokenReview refuses an unknown token (401; a
        # review fightwatch may not make would be a 503), SubjectAccessReviews let the admin in.
        status, body = await watcher.get("/metrics", token=UNISSUED)
        assert status == 401, body
        status, body = await watcher.get("/metrics")
        assert status == 200, body
        # The scraper metricsReader binds by default reads /metrics; a ServiceAccount bound to nothing does not.
        (reader,) = [
            b for b in of_kind(docs, "ClusterRoleBinding") if b["metadata"]["name"].endswith("-metrics-reader")
        ]
        (scraper,) = reader["subjects"]
        assert (await watcher.get("/metrics", token=await _token(kube, scraper)))[0] == 200
        nobody = {"name": "nobody", "namespace": RELEASE_NAMESPACE}
        nobody_token = await _token(kube, nobody)
        assert (await watcher.get("/metrics", token=nobody_token))[0] == 403
        # findingsReader: every finding; a caller who may list nothing sees none of them.
        seen = await watcher.findings(token=await _token(kube, FINDINGS_BOT))
        assert uid in {f["object"]["uid"] for f in seen}
        assert await watcher.findings(token=nobody_token) == []

        for review in ("TokenReview", "SubjectAccessReview"):  # every one answered, none refused to fightwatch
            assert (await watcher.metric("fightwatch_access_reviews_total", review=review, result="answered") or 0) > 0
            assert not await watcher.metric("fightwatch_access_reviews_total", review=review, result="error")
        assert not [e for e in watcher.log() if e.get("status") == 403 or "403" in str(e.get("error", ""))]

    assert watcher.returncode == 0
    assert watcher.log("cannot review access") == []


async def _token(kube: Kube, account: dict[str, Any]) -> str:
    """A token of the ServiceAccount `account` (name, namespace), created (with its namespace) if need be."""
    name, namespace = account["name"], account["namespace"]
    await kube.ensure_namespace(namespace)
    collection = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    await kube.ensure(collection, body, manager="fightwatch-test")
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = await kube.request("POST", f"{collection}/{name}/token", body=request)
    return str(answer["status"]["token"])
