"""The watch path's detector: one object takes every watch event and gives the finding changes.

`Engine` is one; `Joined` (the engine joined with an audit request engine) is the other. The composition roots
(`service`, `scan`, `offline`) build one where they build the engines and never choose between the two again;
audit requests have their own entry point, `Joined.process_request`, off the watch path.
"""

from __future__ import annotations

from typing import Protocol

from watcher.detection.events import ObjectEvent
from watcher.model import Finding, FindingChange


class Detector(Protocol):
    """Watch events in, finding changes out; the findings so far."""

    def process(self, event: ObjectEvent) -> list[FindingChange]:
        """Analyse one watch event (decoded by the engine's `decode`); the finding changes it causes."""
        ...

    def advance(self, now: float) -> list[FindingChange]:
        """Move the clock: findings quiet long enough resolve."""
        ...

    def active(self) -> list[Finding]: ...

    def resolved(self) -> list[Finding]: ...

    def findings(self) -> list[Finding]:
        """Active, then resolved."""
        ...
