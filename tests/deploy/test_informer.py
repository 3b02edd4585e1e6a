"""The client-go informer of scripts/bench_live.py (scripts/informer) is built against the client-go of the pinned
current Kubernetes release: k8s.io/kubernetes v1.X.Y goes with k8s.io/client-go and k8s.io/apimachinery v0.X.Y
(scripts/pin-kubernetes.sh moves them together)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENT = re.compile(r"^(?:require\s+|\t)(\S+) (v\S+)", re.MULTILINE)  # in a require line or block


def required(go_mod: Path) -> dict[str, str]:
    """Module -> version of a go.mod's requirements."""
    return dict(REQUIREMENT.findall(go_mod.read_text()))


def test_informer_uses_the_client_go_of_the_pinned_current_release() -> None:
    kubernetes = required(REPO / "scripts" / "kubernetes" / "current" / "go.mod")["k8s.io/kubernetes"]
    informer = REPO / "scripts" / "informer"
    assert re.fullmatch(r"v1\.\d+\.\d+", kubernetes)
    staging = "v0." + kubernetes.removeprefix("v1.")

    versions = required(informer / "go.mod")

    assert versions["k8s.io/client-go"] == staging
    assert versions["k8s.io/apimachinery"] == staging
    assert f"k8s.io/client-go {staging} h1:" in (informer / "go.sum").read_text()
