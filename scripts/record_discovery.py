#!/usr/bin/env python3
"""Record a real kube-apiserver's discovery documents for tests/unit/test_discovery.py: `/api`, `/api/v1`, `/apis` and
every `/apis/GROUP/VERSION` it serves (the widgets.example.com CRD of the harness included), into
tests/fixtures/discovery/<gitVersion>.json, one JSON object keyed by path.

  .venv/bin/python scripts/record_discovery.py                # the current pinned release
  FIGHTWATCH_KUBERNETES=oldest .venv/bin/python scripts/record_discovery.py
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from harness.control_plane import start_control_plane
from harness.kube import Kube, new_api_client
from harness.scenarios import ensure_widget_crd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "discovery"


async def record(kubeconfig: Path) -> tuple[str, dict[str, Any]]:
    client = await new_api_client(kubeconfig)
    try:
        kube = Kube(client)
        await ensure_widget_crd(kube)
        docs: dict[str, Any] = {path: await kube.get(path) for path in ("/api", "/api/v1", "/apis")}
        for group in docs["/apis"]["groups"]:
            for version in group["versions"]:
                path = f"/apis/{version['groupVersion']}"
                docs[path] = await kube.get(path)
        return str((await kube.get("/version"))["gitVersion"]), docs
    finally:
        await client.close()


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fightwatch-discovery-"))
    cp = start_control_plane(workdir)
    try:
        version, docs = asyncio.run(record(cp.kubeconfig))
    finally:
        cp.stop()
    path = OUT / f"{version}.json"
    path.write_bytes(orjson.dumps(docs, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    print(f"{len(docs)} documents from kube-apiserver {version}: {path.relative_to(REPO)}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
