#!/usr/bin/env python3
"""Benchmark what secure serving costs a caller: `fightwatch run` against a real etcd + kube-apiserver (the pinned
current release, or `$FIGHTWATCH_KUBERNETES`).

One run
1. starts the API server, creates fights over ConfigMaps in `--namespaces` namespaces, a scraper service account
   allowed `get` on /metrics and a tenant allowed to list ConfigMaps in one namespace (real tokens, TokenRequest);
2. starts two watchers on the same cluster: the default (HTTPS, every caller reviewed by the API server) and the
   development mode (`serve.insecure_http`);
3. measures, with one keep-alive client and `--requests` sequential requests each: /metrics as the scraper on
   both, /api/v1/findings as the tenant (cached answers: the steady state of a scrape every 15 s); and the first
   request of `--fresh` tokens never seen before (a TokenReview and SubjectAccessReviews each: a new caller, or
   one whose answers expired), and the tenant's first /api/v1/findings (one review per namespace with findings);
and writes the results to `--json` (default bench-results/serving.json) and prints them.

  .venv/bin/python scripts/bench_serving.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from harness.bench.machine import machine
from harness.control_plane import start_control_plane
from harness.kube import JSON, Kube, new_api_client
from harness.scenarios import label_fight
from harness.watcher import Watcher

REPO = Path(__file__).resolve().parent.parent
RBAC = "/apis/rbac.authorization.k8s.io/v1"


async def accounts(kube: Kube, tenant_namespace: str, fresh: int) -> dict[str, Any]:
    """The scraper's and the tenant's tokens, and `fresh` more tokens of the scraper (each one a new caller)."""
    await kube.ensure_namespace("monitoring")
    await kube.ensure_namespace(tenant_namespace)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "scrape"}}
    await kube.ensure(
        f"{RBAC}/clusterroles", role | {"rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}, manager="bench"
    )
    tenant_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "read", "namespace": tenant_namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
    }
    await kube.ensure(f"{RBAC}/namespaces/{tenant_namespace}/roles", tenant_role, manager="bench")
    for name, namespace, kind, ref in (
        ("prometheus", "monitoring", "ClusterRoleBinding", "scrape"),
        ("tenant", tenant_namespace, "RoleBinding", "read"),
    ):
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        await kube.ensure(f"/api/v1/namespaces/{namespace}/serviceaccounts", account, manager="bench")
        meta: JSON = {"name": name} | ({"namespace": namespace} if kind == "RoleBinding" else {})
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole" if kind == "ClusterRoleBinding" else "Role",
                "name": ref,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        collection = (
            f"{RBAC}/clusterrolebindings"
            if kind == "ClusterRoleBinding"
            else f"{RBAC}/namespaces/{namespace}/rolebindings"
        )
        await kube.ensure(collection, binding, manager="bench")

    async def token(name: str, namespace: str) -> str:
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        answer = await kube.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=request
        )
        return str(answer["status"]["token"])

    return {
        "scraper": await token("prometheus", "monitoring"),
        "tenant": await token("tenant", tenant_namespace),
        "fresh": [await token("prometheus", "monitoring") for _ in range(fresh)],
    }


async def timed(n: int, request: Callable[[], Awaitable[int]]) -> dict[str, float]:
    """n sequential requests: requests/s and latency percentiles (ms); every answer must be a 200."""
    latencies = []
    started = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        status = await request()
        latencies.append((time.perf_counter() - t0) * 1000)
        if status != 200:
            raise SystemExit(f"a request answered {status}")
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": n,
        "requests_per_second": round(n / elapsed, 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[int(0.99 * (n - 1))], 2),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    plane = start_control_plane(workdir / "plane")
    stack = contextlib.AsyncExitStack()
    try:
        client = await new_api_client(plane.kubeconfig)
        stack.push_async_callback(client.close)
        kube = Kube(client)
        namespaces = [f"team-{i:02d}" for i in range(args.namespaces)]
        tokens = await accounts(kube, namespaces[0], args.fresh)
        config = {"watch": {"resources": ["configmaps"]}}
        secure = Watcher(workdir / "secure", kubeconfig=plane.kubeconfig, config=config, record=False)
        plain_config = config | {"serve": {"insecure_http": True}}
        plain = Watcher(workdir / "plain", kubeconfig=plane.kubeconfig, config=plain_config, record=False, token="")
        async with secure, plain:
            await secure.wait_ready()
            await plain.wait_ready()
            for namespace in namespaces:
                await kube.ensure_namespace(namespace)
                await label_fight(kube, namespace, ("operator-a", "operator-b"))
            await secure.poll_async(
                lambda: _count(secure, args.namespaces), what=f"{args.namespaces} fights found", deadline=300
            )
            async with aiohttp.ClientSession() as session:

                def get(watcher: Watcher, path: str, token: str | None) -> Callable[[], Awaitable[int]]:
                    headers = {"Authorization": f"Bearer {token}"} if token else {}

                    async def request() -> int:
                        async with session.get(watcher.url + path, headers=headers, ssl=watcher.tls) as response:
                            await response.read()
                            return response.status

                    return request

                tenant_first = await timed(1, get(secure, "/api/v1/findings", tokens["tenant"]))
                results: dict[str, Any] = {
                    "metrics_plain_http": await timed(args.requests, get(plain, "/metrics", None)),
                    "metrics_https_cached": await timed(args.requests, get(secure, "/metrics", tokens["scraper"])),
                    "findings_tenant_first": tenant_first,
                    "findings_tenant_cached": await timed(
                        args.requests, get(secure, "/api/v1/findings", tokens["tenant"])
                    ),
                }
                fresh = sorted([(await timed(1, get(secure, "/metrics", t)))["p50_ms"] for t in tokens["fresh"]])
                results["metrics_https_new_caller"] = {
                    "requests": len(fresh),
                    "p50_ms": round(statistics.median(fresh), 2),
                    "p99_ms": round(fresh[int(0.99 * (len(fresh) - 1))], 2),
                }
            findings = await secure.findings(token=tokens["tenant"])
            results["tenant_sees"] = len(findings)
            results["findings"] = len(await secure.findings())
    finally:
        await stack.aclose()
        plane.stop()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "command": "scripts/bench_serving.py " + " ".join(sys.argv[1:]),
        "kube_apiserver": f"{plane.version}, loopback, on the same cores",
        "namespaces_with_fights": args.namespaces,
        **results,
    }


async def _count(watcher: Watcher, wanted: int) -> bool | None:
    return True if len(await watcher.findings()) >= wanted else None


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests per measurement")
    parser.add_argument("--namespaces", type=int, default=20, help="namespaces with a fight each")
    parser.add_argument("--fresh", type=int, default=50, help="tokens never seen before, one request each")
    parser.add_argument("--json", type=Path, default=REPO / "bench-results" / "serving.json")
    args = parser.parse_args()
    results = asyncio.run(main(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    run()
