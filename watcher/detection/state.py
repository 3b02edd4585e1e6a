"""Per-object state, and the records of the findings open on each object.

What the engine keeps about one object between two of its versions, and the records of the findings open on it. The
attribution implementations and the rules read and update it; it imports neither.

Slotted classes, since there are as many states as tracked objects (see docs/scaling.md for the bounds).
"""

from __future__ import annotations

import hashlib
import math

from watcher.detection.handovers import Log
from watcher.detection.ignore import ObjectRules
from watcher.detection.timeline import Record
from watcher.model import FindingType, ObjectRef, Writer


class Rate:
    """A rate of things on one object: exponentially decaying, with the current streak.

    The things are a writer's writes, conflicts, no-op writes; the streak has no gap longer than two time constants.
    """

    __slots__ = ("last", "rate", "start", "start_seq", "start_version", "streak")

    def __init__(self) -> None:
        self.rate = 0.0  # per minute, exponentially decaying
        self.last = -math.inf
        self.streak = 0  # things without a gap longer than two time constants
        self.start = 0.0  # when the streak began
        self.start_seq = 0
        self.start_version = ""  # resourceVersion of the streak's first write: names a hot loop it opens

    def add(self, at: float, tau: float) -> bool:
        """Count one at time `at` (time constant `tau` seconds); whether it began a new streak."""
        gap = max(at - self.last, 0.0)
        self.rate = self.rate * math.exp(-gap / tau) + 60.0 / tau
        new = gap > 2 * tau
        if new:
            self.streak, self.start = 0, at
        self.streak += 1
        self.last = max(at, self.last)
        return new


class WriterRate(Rate):
    """A writer's rate of writes to one object (the hot-loop rule's), naming its writer."""

    __slots__ = ("writer",)

    def __init__(self, writer: Writer) -> None:
        super().__init__()
        self.writer = writer


def rate_of(rates: tuple[WriterRate, ...], writer: Writer) -> WriterRate | None:
    """Return the rate of `writer` among an object's rates, if it has one."""
    for rate in rates:
        if rate.writer == writer:
            return rate
    return None


class OpenFinding:
    """A finding while it is tracked (active), mutable; `findings.snapshot` makes the immutable `Finding`."""

    __slots__ = (
        "by_ownership",
        "cause",
        "controller",
        "controller_writer",
        "detected_at",
        "evidence",
        "fields",
        "first_seen",
        "first_seq",
        "handovers",
        "id",
        "ignored",
        "key",
        "last_seen",
        "owner",
        "parts",
        "plain_values",
        "quiet_writers",
        "record",
        "ref",
        "refs",
        "seen",
        "silenced",
        "status_writes",
        "timestamp_values",
        "type",
        "writer_fields",
        "writer_writes",
    )

    def __init__(
        self, kind: FindingType, ref: ObjectRef, *, first_seen: float, at: float, seq: int, version: str = ""
    ) -> None:
        self.type = kind
        self.ref = ref  # (the object's state keeps only its key: names are read from events)
        self.id = finding_id(kind, ref, version=version, at=at)
        self.first_seen = first_seen
        self.detected_at = at
        self.last_seen = at
        self.first_seq = seq
        self.handovers = 0
        self.fields: set[str] = set()
        self.writer_writes: dict[Writer, int] = {}
        self.writer_fields: dict[Writer, set[str]] = {}  # the fields each writer changed (`rules`, `findings.absorb`)
        self.quiet_writers: set[Writer] = set()  # (hot loop) writers whose owned fields stand for their quiet writes
        self.by_ownership = False
        self.evidence = ""  # a fight of one field manager: what shows two writers behind it (`rules.FightRule`)
        self.timestamp_values = False  # (hot loop) a value its writers changed looks like a timestamp
        self.plain_values = False  # (hot loop) one does not
        self.status_writes = False
        # (fight) each writer's part: takes, takes back, losses; and per field the owners and values it had
        self.parts: dict[Writer, list[int]] = {}
        self.seen: dict[str, tuple[set[Writer], set[int]]] = {}
        self.controller: tuple[str, str] | None = None  # (kind, name) of the object's controller, where it has one
        self.controller_writer: Writer | None = None  # the writer that set that controller reference
        # (fight) over what only default ignore rules leave out: their reason; over what the user's rules leave out (or
        # one writer's churn a default rule leaves out): tracked, never reported (`rules.FightRule`)
        self.ignored = ""
        self.silenced = ""  # "config" (counted as a fight the user's rules hide) or "churn"
        self.record: Record | None = None  # its writes, for its timeline (`timeline.py`)
        # Cascades (set by the engine once it tracks the finding): the object's key, its controller's key (0: none),
        # the names of the objects its spec names, and the active finding this one follows from.
        self.key = 0
        self.owner = 0
        self.refs: tuple[tuple[str, str, str, str], ...] = ()  # the objects its object's spec names (`events.Name`)
        self.cause: OpenFinding | None = None


def finding_id(kind: FindingType, ref: ObjectRef, *, version: str, at: float) -> str:
    """Return a finding's id: type, object and the resourceVersion of the write that opened it.

    The same on every replica and in every replay that saw that write (the receive time, used only when an object has no
    resourceVersion, is not).
    """
    opened_by = version or repr(at)
    return hashlib.blake2b(f"{kind}/{ref.uid}/{opened_by}".encode(), digest_size=8).hexdigest()


class ObjectState:
    """What detection keeps per object.

    An attribution implementation makes it (`Attribution.baseline`) and may keep its own part of the object's state in a
    subclass (the Python reference does) or natively (the native implementation, keyed by the object's key).
    """

    __slots__ = ("fight", "history", "hot", "last_write", "rates", "rules", "rv", "seq")

    def __init__(self, rv: int, rules: ObjectRules) -> None:
        self.rv = rv  # the version last seen (see `events.version_key`): a repeated one is a duplicate event
        self.rules = rules
        self.seq = 0  # writes seen: the engine counts them, handovers and findings name writes by it
        self.history: Log | None = None  # bounded by `history` and the window
        # Its writers' write rates, in the order they first wrote, while any is recent: a tuple, since an object has
        # one writer or a few (a dict of one costs four times a tuple of one, and most of the objects have a rate).
        self.rates: tuple[WriterRate, ...] | None = None
        self.fight: OpenFinding | None = None
        self.hot: OpenFinding | None = None
        self.last_write = 0.0
