"""Write attribution, the protocol: who wrote, and which fields changed hands or value.

Attribution reads one version of an object against the next. The writer of a write is the managedFields entry whose time
advanced, which appeared, or whose field set grew; failing that, the one owner of every visible field the write changed
(v1.20 stamps no new time when a writer rewrites fields it already owns); failing that, on a server that stamps every
write's writer (1.22 and later: its entries name their subresource), the one entry stamped in the write's second. The
API server's own managers (`ancient-changes`, `before-first-apply`) are never writers. Anything else is unattributed:
counted, never guessed.

Two implementations keep to this protocol: the Python reference (`reference.py`) and the native one
(`native.py`, over `watcher._native`, Rust), which parses and attributes without a Python object per JSON node.
A differential test drives both with generated object versions and requires identical writes.
"""

from __future__ import annotations

from typing import Protocol

from watcher.detection.events import ObjectEvent
from watcher.detection.handovers import Handover, Log
from watcher.detection.ignore import ObjectRules
from watcher.detection.state import ObjectState
from watcher.model import Writer


class Write:
    """What one write did, as the detectors need it.

    A class, not a dataclass: compiled, a dataclass is made by its generated `__init__`, which is Python code, and one
    is made per write.
    """

    __slots__ = ("at", "changed", "handovers", "seq", "timed", "version", "writers")

    def __init__(
        self, at: float, seq: int, writers: list[Writer], changed: list[str], handovers: list[Handover]
    ) -> None:
        self.at = at
        self.seq = seq  # the object's write counter at this write
        self.writers = writers  # never empty: `[UNATTRIBUTED]` when no writer could be named
        self.changed = changed  # visible leaves whose value changed (status leaves too, see `reference.py`)
        self.handovers = handovers
        self.timed = True  # the write's time is known (rates need it)
        self.version = ""  # the object's resourceVersion after the write (names a finding it opens)


class Decoder(Protocol):
    """Turns one watch event's JSON text into an `ObjectEvent`.

    It makes the `ObjectEvent` its attribution implementation reads. See `events.decode`, the reference, for the
    arguments, the result and the errors.
    """

    def __call__(
        self, data: bytes, *, observed_at: float | None = None, api_version: str | None = None, kind: str | None = None
    ) -> ObjectEvent | None: ...


class Attribution(Protocol):
    """The attribution protocol. Events come from the implementation's own decoder (`decode`)."""

    @property
    def name(self) -> str:
        """`python` or `native`."""
        ...

    @property
    def decode(self) -> Decoder:
        """The decoder whose events this implementation reads."""
        ...

    @property
    def stamped(self) -> bool:
        """Whether the stream showed a server of 1.22 or later.

        It did when a managedFields entry names its subresource (such a server stamps every write's writer, which
        attribution then relies on).
        """
        ...

    def object_key(self, uid: str) -> int:
        """Return the key of the object with this uid.

        The key is the one this implementation's events carry (`ObjectEvent.key`).
        """
        ...

    def baseline(self, event: ObjectEvent, rules: ObjectRules) -> ObjectState:
        """Return the state of an object first seen (ADDED, or there when the stream began).

        Ownership and values as of this version; no write.
        """
        ...

    def resync(self, state: ObjectState, event: ObjectEvent) -> None:
        """Take this version as the object's baseline without counting a write.

        For a relist after a watch lost events: ownership and values are read afresh; handovers, rates and open findings
        stay.
        """
        ...

    def attribute(self, state: ObjectState, event: ObjectEvent, now: float) -> Write:
        """Attribute the write that made this version (the engine has counted it in `state.seq` already)."""
        ...

    def forget(self, key: int) -> None:
        """Let an object go (deleted, or evicted): what the implementation keeps of it outside `state`."""
        ...

    def new_log(self) -> Log:
        """Return an empty handover log for an object (the fight rule's, see `handovers.Log`)."""
        ...

    def owned(self, state: ObjectState, event: ObjectEvent, writer: Writer) -> frozenset[str] | None:
        """Return the leaves `writer` owns in the object's last version.

        None when it has no entry there.
        """
        ...
