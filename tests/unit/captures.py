"""Access to the captures recorded from a real kube-apiserver (see tests/fixtures/captures/README.md), and events
made from objects, for either attribution implementation."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from watcher.config import Config, DetectionSettings
from watcher.detection import events as reference
from watcher.detection.attribution import Decoder
from watcher.detection.engine import Engine
from watcher.detection.events import ObjectEvent, encode, event_object
from watcher.model import Finding, JSONObject
from watcher.sources.capture import ReadStats, read_capture

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"  # the current release's recordings
# The recordings of each release: the current one's, and v1.20's, kept as compatibility fixtures (see their READMEs).
RELEASE_CAPTURES = {"current": CAPTURES, "v1.20": CAPTURES / "v1.20"}
RELEASES = tuple(RELEASE_CAPTURES)
# Both implementations of attribution, but in a pure-Python build (FIGHTWATCH_PURE_PYTHON, asked for by hand: CI
# never sets it), which has no native engine (tests/unit/test_native.py fails when the native engine is missing).
PURE_PYTHON = os.environ.get("FIGHTWATCH_PURE_PYTHON", "") not in {"", "0"}
IMPLEMENTATIONS = ("python",) if PURE_PYTHON else ("native", "python")


def capture(name: str, release: str = "current") -> Path:
    """The recorded capture of a scenario: from the current release, or from `v1.20`."""
    path = RELEASE_CAPTURES[release] / f"{name}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: record it with `make record-captures`")
    return path


def events(name: str, decode: Decoder = reference.decode, *, release: str = "current") -> Iterator[ObjectEvent]:
    return read_capture(str(capture(name, release)), decode, stats=ReadStats())


def analyse(
    name: str, settings: DetectionSettings | None = None, *, engine: str = "auto", release: str = "current"
) -> tuple[list[Finding], Engine]:
    analysis = Engine(settings or Config().detection, attribution=engine)
    for event in events(name, analysis.decode, release=release):
        analysis.process(event)
    return analysis.active() + analysis.resolved(), analysis


def event(decode: Decoder, event_type: str, obj: JSONObject, observed_at: float | None) -> ObjectEvent:
    """An event of `obj` as `decode` reads it."""
    made = decode(encode(event_type, obj, observed_at))
    assert made is not None
    return made


def again(
    decode: Decoder, original: ObjectEvent, *, event_type: str | None = None, at: float | None = None
) -> ObjectEvent:
    """An event of the same object as `original`, of another type or at another time."""
    return event(
        decode,
        event_type or original.type,
        event_object(original),
        at if at is not None else original.observed_at,
    )
