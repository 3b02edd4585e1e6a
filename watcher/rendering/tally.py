"""Who wrote how much, and to how many objects: the report's summary of what was analysed (`--html`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from watcher.detection.requests import Request
from watcher.model import ObjectRef, Writer

if TYPE_CHECKING:
    from watcher.rendering.page import Summary


class WriteTally:
    """The watch engine tells it of every write (`on_write`); an audit-only analysis, of every write request."""

    def __init__(self) -> None:
        self.by_manager: Counter[str] = Counter()
        self.objects: set[tuple[str, str | None, str]] = set()

    def __call__(self, ref: ObjectRef, writers: Sequence[Writer]) -> None:
        self.objects.add((ref.kind or ref.resource, ref.namespace, ref.name))
        for writer in writers:
            self.by_manager[writer.manager or "(unattributed)"] += 1

    def request(self, request: Request) -> None:
        obj = request.object
        self.objects.add((obj.resource, obj.namespace or None, obj.name))
        self.by_manager[request.manager or request.user] += 1

    def summary(
        self, *, sources: tuple[str, ...], events: int, first: float | None, last: float | None, note: str
    ) -> Summary:
        """Return the report's header: what was read (`sources`), how many events, over which time."""
        from watcher.rendering.page import Summary  # noqa: PLC0415 - the template engine only for a report

        return Summary(
            sources=sources,
            events=events,
            objects=len(self.objects),
            first=first,
            last=last,
            writes_by_manager=tuple(self.by_manager.most_common()),
            note=note,
        )
