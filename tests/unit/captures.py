"""Access to the captures recorded from a real kube-apiserver (see tests/fixtures/captures/README.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from watcher.config import Config, DetectionSettings
from watcher.detection.engine import Engine
from watcher.model import Finding, WatchEvent
from watcher.sources.capture import ReadStats, read_capture

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"


def capture(name: str) -> Path:
    path = CAPTURES / f"{name}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: record it with `make record`")
    return path


def events(name: str) -> Iterator[WatchEvent]:
    return read_capture(str(capture(name)), stats=ReadStats())


def analyse(name: str, settings: DetectionSettings | None = None) -> tuple[list[Finding], Engine]:
    engine = Engine(settings or Config().detection)
    for event in events(name):
        engine.process(event)
    return engine.active() + engine.resolved(), engine
