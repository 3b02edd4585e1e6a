"""The audit events and watch events recorded together from a real kube-apiserver (tests/fixtures/audit: the current
release, and v1.20's kept for compatibility, see their READMEs), and both engines joined over one recorded run."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.events import ObjectEvent
from watcher.detection.join import Joined
from watcher.detection.request_engine import RequestEngine
from watcher.detection.requests import Request
from watcher.model import Finding
from watcher.sources.audit import AuditStats, read_audit_logs
from watcher.sources.capture import ReadStats, merged, read_captures

CURRENT = Path(__file__).parents[1] / "fixtures" / "audit"
V1_20 = CURRENT / "v1.20"
# The scenarios each release's recordings hold: v1.20's all but hpa-fight (no real kube-controller-manager ran).
SCENARIOS: dict[Path, tuple[str, ...]] = {
    CURRENT: (
        "rmw-fight",
        "storm-fields",
        "apply-stuck",
        "scale-fight",
        "hpa-fight",
        "cascade",
        "shared-manager",
        "noop-loop",
        "benign",
    )
}
SCENARIOS[V1_20] = tuple(s for s in SCENARIOS[CURRENT] if s != "hpa-fight")
# The audit levels each release's recordings hold.
LEVELS = {CURRENT: ("metadata", "request-response", "omit-managed-fields"), V1_20: ("metadata", "request-response")}


def joined(name: str, level: str = "metadata", recording: Path = CURRENT) -> Joined:
    """The watch engine and the request engine joined over one recorded run: its watch events and its audit events
    at `level`, merged in time order."""
    settings = Config().detection
    watch = Engine(settings)
    both = Joined(watch, RequestEngine(settings))
    events = read_captures([str(recording / f"{name}.watch.jsonl")], watch.decode, stats=ReadStats())
    requests = read_audit_logs([str(recording / f"{name}.{level}.jsonl")], stats=AuditStats())
    streams: list[Generator[ObjectEvent | Request, None, None]] = [events, requests]
    for item in merged(streams, lambda i: i.time or 0.0):
        if isinstance(item, Request):
            both.process_request(item)
        else:
            both.process(item)
    return both


def findings(both: Joined) -> list[Finding]:
    """The active findings, then the resolved ones."""
    return both.active() + both.resolved()
