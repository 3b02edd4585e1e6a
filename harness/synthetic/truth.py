"""Keep the truth of a synthetic stream: what was injected into it, and its sizes, in a sidecar beside it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from harness.synthetic.population import SPAN


@dataclass(slots=True)
class Truth:
    """What the stream is made of, written beside it as STREAM.truth.json.

    The objects of each role (the injected fights and hot loops among them), the flavor of each injected fight,
    and the stream's sizes.
    """

    events: int = 0
    objects: int = 0
    bytes: int = 0
    roles: dict[str, list[str]] = field(default_factory=dict)  # role -> uids
    flavors: dict[str, str] = field(default_factory=dict)  # uid -> flavor, of injected fights
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [events, bytes]
    by_type: dict[str, int] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    span: float = SPAN


def truth_path(stream: Path) -> Path:
    return stream.with_name(stream.name + ".truth.json")


def write_truth(stream: Path, truth: Truth) -> None:
    truth_path(stream).write_bytes(orjson.dumps(truth, option=orjson.OPT_INDENT_2))


def load_truth(stream: Path) -> Truth | None:
    """Read the stream's truth sidecar, or None (a recording has none)."""
    sidecar = truth_path(stream)
    return Truth(**orjson.loads(sidecar.read_bytes())) if sidecar.exists() else None
