"""The small value types that flow between sources, the detection core and sinks. No I/O here."""

from __future__ import annotations

import array
import enum
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

JSONObject = dict[str, Any]
ResourceKey = tuple[str, str]
"""(group, plural) of a resource: ("", "configmaps"), ("apps", "deployments")."""


class EventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(init=False, unsafe_hash=True, slots=True)
class ObjectRef:
    """An object as a finding names it.

    The watch knows its kind and uid; an API request (audit event) addresses it by resource (and subresource), and knows
    its kind only where the watch or discovery tells. (An `__init__` of its own and `Final` fields, as the types made at
    every finding change below: one is made at every finding opened.)
    """

    api_version: Final[str]  # "group/version", or "version" for the core group; "" when a request did not say
    kind: Final[str]  # "" when only the resource is known
    namespace: Final[str | None]
    name: Final[str]
    uid: Final[str]  # "" when unknown
    resource: Final[str]  # plural resource name ("deployments"), where known
    subresource: Final[str]  # the subresource requests were about ("status", "scale"), "" for the object itself
    api_group: Final[str | None]  # the group when api_version does not say (a request without apiVersion)

    def __init__(  # noqa: PLR0917 - a dataclass's signature: its fields, in order, positional or by name
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        uid: str,
        resource: str = "",
        subresource: str = "",
        api_group: str | None = None,
    ) -> None:
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.resource = resource
        self.subresource = subresource
        self.api_group = api_group

    @property
    def group(self) -> str:
        if self.api_group is not None:
            return self.api_group
        group, _, version = self.api_version.rpartition("/")
        return group if version else ""

    def display(self) -> str:
        what = self.kind or self.resource
        kind = f"{what}.{self.group}" if self.group else what
        where = f"{self.namespace}/" if self.namespace else ""
        sub = f" ({self.subresource})" if self.subresource else ""
        return f"{kind} {where}{self.name}{sub}"


# Managers the API server itself writes entries under: never the writer of a write, only an earlier owner of fields
# (k8s.io/apimachinery's managedfields: capmanagers.go, skipnonapplied.go). Shown with what they stand for.
SERVER_MANAGERS: Final = {
    "ancient-changes": "the oldest update managers, merged by the API server, which keeps 10",
    "before-first-apply": "the fields the object had before its first server-side apply",
}


class Writer(NamedTuple):
    """A field manager as managedFields keys it. `manager=None` is the unattributed writer.

    (A NamedTuple: writers key the engine's dictionaries on every event, and tuples hash in C.)
    """

    manager: str | None
    operation: str = ""
    subresource: str = ""

    def display(self) -> str:
        """`kube-controller-manager (Update, scale)`; a manager of the API server's own with what it stands for."""
        if self.manager is None:
            return "(unattributed)"
        note = SERVER_MANAGERS.get(self.manager)
        if note is not None:
            return f"{self.manager} ({note})"
        detail = ", ".join(p for p in (self.operation, self.subresource) if p)
        return f"{self.manager} ({detail})" if detail else self.manager

    @property
    def note(self) -> str:
        """What a manager of the API server's own stands for (`SERVER_MANAGERS`), else ""."""
        return SERVER_MANAGERS.get(self.manager or "", "")


UNATTRIBUTED: Final = Writer(None)

# A NamedTuple's `__new__` is Python code, run on every call, also from compiled code; `tuple.__new__` is not. The
# per-event paths make their tuples with it (through `new_tuple`, which mypyc calls as the C function it is).
new_tuple: Final = tuple.__new__


class FindingType(enum.StrEnum):
    # From the watch (successful writes, attributed by managedFields)
    FIGHT = "fight"
    HOT_LOOP = "hot_loop"
    # From API requests (audit events: failed writes, writes that changed nothing)
    CONFLICT_STORM = "conflict_storm"
    APPLY_CONFLICT = "apply_conflict"
    NOOP_WRITES = "noop_writes"

    @property
    def label(self) -> str:
        """For people: `hot loop`, `conflict storm`, `no-op writes`."""
        return "no-op writes" if self is FindingType.NOOP_WRITES else self.value.replace("_", " ")

    def counted(self, number: int) -> str:
        """`1 fight`, `2 hot loops`, `3 no-op write loops`."""
        noun = "no-op write loop" if self is FindingType.NOOP_WRITES else self.label
        return f"{number} {noun}{'s' * (number != 1)}"


class FindingState(enum.StrEnum):
    ACTIVE = "active"
    RESOLVED = "resolved"


class ChangeKind(enum.StrEnum):
    OPENED = "opened"
    UPDATED = "updated"
    RESOLVED = "resolved"


# The types made at every finding change (ObjectRef above, WriterCount, Timeline, Traits, Finding, FindingChange;
# hints.Evidence) are dataclasses (equality, hashing, repr, `dataclasses.replace`) with an `__init__` of their own and
# `Final` fields instead of `frozen=True`: compiled, that `__init__` is compiled and the fields read-only, where a
# frozen dataclass's generated `__init__` is Python code setting each field through `object.__setattr__` (where
# findings change often, a quarter of the replay's time). mypy rejects any assignment.


@dataclass(init=False, unsafe_hash=True, slots=True)
class WriterCount:
    writer: Final[Writer]
    writes: Final[int]
    users: Final[tuple[str, ...]]  # the authenticated users seen writing as this manager (from audit events)
    fields: Final[tuple[str, ...]]  # the fields it changed (a fight's: those it took or flipped)
    reacts: Final[bool]  # a hot loop's writer reporting the object's status, in reply to the writes of the others
    # A fight's writer that maintains the object (its controller, or Kubernetes' own controller that publishes it) and
    # sets back what the others change: the others drive the fight (`detection.diagnosis`).
    restores: Final[bool]
    # How a writer that managedFields do not name was named: "audit" (from the API server's audit events), else "".
    named_from: Final[str]

    def __init__(  # noqa: PLR0917 - a dataclass's signature: its fields, in order, positional or by name
        self,
        writer: Writer,
        writes: int,
        users: tuple[str, ...] = (),
        fields: tuple[str, ...] = (),
        reacts: bool = False,
        restores: bool = False,
        named_from: str = "",
    ) -> None:
        self.writer = writer
        self.writes = writes
        self.users = users
        self.fields = fields
        self.reacts = reacts
        self.restores = restores
        self.named_from = named_from


@dataclass(frozen=True, slots=True)
class Client:
    """An API client as audit events name it, and what its write requests to one object came to."""

    user: str  # the authenticated user (a service account: system:serviceaccount:NAMESPACE:NAME)
    user_agent: str
    manager: str  # the field manager its writes are recorded under (fieldManager, else the User-Agent prefix)
    conflicts: int = 0  # writes rejected with 409 Conflict
    writes: int = 0  # writes that succeeded
    noop_writes: int = 0  # successful writes that changed nothing (counted in `writes` too)
    pod: str = ""  # "namespace/name" of the pod its token is bound to (the audit event's user.extra), else ""

    def display(self) -> str:
        """Name the client: its manager, with its user and pod.

        E.g. `labeler (system:serviceaccount:ops:labeler, pod labeler-7d9c5b6f4-x2x8q)`: the pod by name, its namespace
        being the service account's.
        """
        pod = f", pod {self.pod.partition('/')[2]}" if self.pod else ""
        return f"{self.manager or '?'} ({self.user or 'anonymous'}{pod})"


# What a mark of a timeline is (bits of `Mark.kind`): a write, one that handed a contested field over, one rejected
# with 409 Conflict (a failed write, where audit events tell).
WRITE: Final = 0
HANDOVER: Final = 1
CONFLICT: Final = 2


class Mark(NamedTuple):
    """One write (or rejected write) on a finding's timeline."""

    at: float
    lane: int  # index into `Timeline.lanes`
    kind: int  # WRITE, HANDOVER or CONFLICT


class Bin(NamedTuple):
    """Earlier writes of one lane, folded into a count over a span of time.

    A long finding keeps its recent writes one by one and the earlier ones as bins; a hot loop's writes before it was
    detected are one bin. `lane` -1: writes not told apart by writer (a conflict storm's conflicts before it was
    detected).
    """

    start: float
    end: float
    lane: int
    writes: int  # writes, rejected ones included
    handovers: int
    conflicts: int


@dataclass(init=False, unsafe_hash=True, slots=True)
class Timeline:
    """A finding's record of writes to its object, for drawing.

    One lane per writer, a mark per write (the most recent ones), earlier writes folded into bins. `words` holds the
    marks packed (see `detection.timeline`): a snapshot copies bytes, and only a page that draws it decodes them
    (`marks`).
    """

    lanes: Final[tuple[Writer, ...]]
    words: Final[bytes]
    bins: Final[tuple[Bin, ...]]
    quiet: Final[float]  # seconds without a write after which the finding resolves
    partial: Final[bool]  # before detection only the writes that handed a field over are known (a fight)

    def __init__(
        self, lanes: tuple[Writer, ...], words: bytes, bins: tuple[Bin, ...], quiet: float, partial: bool = False
    ) -> None:
        self.lanes = lanes
        self.words = words
        self.bins = bins
        self.quiet = quiet
        self.partial = partial

    def marks(self) -> list[Mark]:
        """Decode the marks, oldest first."""
        words = array.array("Q")
        words.frombytes(self.words)
        return [Mark((w >> 12) / 1_000_000, (w >> 4) & 0xFF, w & 0xF) for w in words]


MAX_LANES: Final = 255  # lanes of a timeline; the writers beyond share the last


MARK_TIMES: Final = 1 << 52  # microseconds: a mark's time is one from 1970 until 2112-09-17 (`mark_word`)
MARK_END: Final = MARK_TIMES / 1_000_000  # ... in seconds


def mark_word(at: float, lane: int, kind: int) -> int:
    """Pack a mark into the 64-bit word `Timeline.words` holds.

    Microseconds since the epoch (52 bits, until the year 2112: a time outside is held as the nearest end, as a
    handover's is, `detection.handovers`), the lane (8 bits) and the kind (4 bits). Words order as their times do.
    """
    micros = min(int(min(MARK_END, max(0.0, at)) * 1_000_000), MARK_TIMES - 1)  # (NaN: max() keeps the 0.0)
    return (micros << 12) | (min(lane, MAX_LANES) << 4) | kind


@dataclass(init=False, unsafe_hash=True, slots=True)
class Traits:
    """What the engine saw of a watch finding besides its writers and fields.

    What its summary and hint are told from (`detection.diagnosis`), and told again from once the audit events name more
    of its writers (`detection.join`).
    """

    by_ownership: Final[bool]  # handovers were seen in managedFields (distinct managers), not only as value flips
    timestamp_values: Final[bool]  # (hot loop) every value its writers changed looks like a timestamp
    status_writes: Final[bool]  # (hot loop) its writer writes status
    evidence: Final[str]  # a fight of one field manager: `audit` (several users behind it) or `flips`
    controller: Final[tuple[str, str] | None]  # (kind, name) of the object's controller (ownerReferences)
    controller_writer: Final[Writer | None]  # the writer that set that reference: the controller's own writes
    cause: Final[str]  # what it follows from (`the fight on its controller Deployment.apps a/web`), where it does
    # (a fight) over what a default ignore rule leaves out, reported because distinct writers alternate: its reason
    ignored: Final[str]

    def __init__(  # noqa: PLR0917 - a dataclass's signature: its fields, in order, positional or by name
        self,
        by_ownership: bool = False,
        timestamp_values: bool = False,
        status_writes: bool = False,
        evidence: str = "",
        controller: tuple[str, str] | None = None,
        controller_writer: Writer | None = None,
        cause: str = "",
        ignored: str = "",
    ) -> None:
        self.by_ownership = by_ownership
        self.timestamp_values = timestamp_values
        self.status_writes = status_writes
        self.evidence = evidence
        self.controller = controller
        self.controller_writer = controller_writer
        self.cause = cause
        self.ignored = ignored


@dataclass(init=False, unsafe_hash=True, slots=True)
class Finding:
    """An immutable snapshot of a finding, as sinks see it."""

    id: Final[str]
    type: Final[FindingType]
    state: Final[FindingState]
    object: Final[ObjectRef]
    writers: Final[tuple[WriterCount, ...]]
    fields: Final[tuple[str, ...]]
    handovers: Final[int]
    writes: Final[int]
    writes_per_minute: Final[float]
    first_seen: Final[float]
    detected_at: Final[float]
    last_seen: Final[float]
    resolved_at: Final[float | None]
    flip_period: Final[float | None]
    summary: Final[str]
    hint: Final[str]
    # From API requests (audit events), where they were read: the clients that wrote the object (most conflicts
    # first) and the writes rejected with 409 Conflict among them.
    clients: Final[tuple[Client, ...]]
    conflicts: Final[int]
    related: Final[str | None]  # the id of the finding this one follows from (a cascade), where linked
    timeline: Final[Timeline | None]  # its writes over time, where recorded (detection.timeline)
    traits: Final[Traits | None]  # (a watch finding) what its summary and hint are told from

    def __init__(  # noqa: PLR0917 - a dataclass's signature: its fields, in order, positional or by name
        self,
        id: str,
        type: FindingType,
        state: FindingState,
        object: ObjectRef,
        writers: tuple[WriterCount, ...],
        fields: tuple[str, ...],
        handovers: int,
        writes: int,
        writes_per_minute: float,
        first_seen: float,
        detected_at: float,
        last_seen: float,
        resolved_at: float | None,
        flip_period: float | None,
        summary: str,
        hint: str,
        clients: tuple[Client, ...] = (),
        conflicts: int = 0,
        related: str | None = None,
        timeline: Timeline | None = None,
        traits: Traits | None = None,
    ) -> None:
        self.id = id
        self.type = type
        self.state = state
        self.object = object
        self.writers = writers
        self.fields = fields
        self.handovers = handovers
        self.writes = writes
        self.writes_per_minute = writes_per_minute
        self.first_seen = first_seen
        self.detected_at = detected_at
        self.last_seen = last_seen
        self.resolved_at = resolved_at
        self.flip_period = flip_period
        self.summary = summary
        self.hint = hint
        self.clients = clients
        self.conflicts = conflicts
        self.related = related
        self.timeline = timeline
        self.traits = traits

    def told(self, writers: tuple[WriterCount, ...], summary: str, hint: str) -> Finding:
        """Return this finding with its writers, summary and hint as given, the rest as it is.

        As `dataclasses.replace` would, compiled: a finding is told (`detection.diagnosis`) at every change.
        """
        return self._with(writers, summary, hint, self.timeline)

    def untimed(self) -> Finding:
        """Return this finding without its timeline, the rest as it is (`detection.timeline.keep_resolved`)."""
        return self._with(self.writers, self.summary, self.hint, None)

    def _with(self, writers: tuple[WriterCount, ...], summary: str, hint: str, timeline: Timeline | None) -> Finding:
        return Finding(
            self.id,
            self.type,
            self.state,
            self.object,
            writers,
            self.fields,
            self.handovers,
            self.writes,
            self.writes_per_minute,
            self.first_seen,
            self.detected_at,
            self.last_seen,
            self.resolved_at,
            self.flip_period,
            summary,
            hint,
            self.clients,
            self.conflicts,
            self.related,
            timeline,
            self.traits,
        )


@dataclass(frozen=True, slots=True)
class Incident:
    """Findings of one pattern on any number of objects: one root cause (`detection.incidents`).

    The pattern is the type, the writers and the normalised fields.
    """

    id: str
    type: FindingType
    state: FindingState  # active while any of its findings is
    writers: tuple[WriterCount, ...]  # their writes summed over the findings, most first
    fields: tuple[str, ...]  # normalised: keys that follow the object read `*`
    findings: tuple[str, ...]  # ids, active first, then by rate
    objects: int
    examples: tuple[ObjectRef, ...]  # the objects of its most severe findings (EXAMPLES at most)
    namespaces: tuple[str, ...]  # "" for cluster-scoped objects
    kinds: tuple[str, ...]
    writes_per_minute: float  # of its active findings together (all of them, once resolved)
    first_seen: float
    detected_at: float
    last_seen: float
    resolved_at: float | None
    summary: str
    hint: str  # its most severe finding's
    consequences: tuple[str, ...] = ()  # ids of findings that follow from its findings (cascades: `related`)

    @property
    def members(self) -> tuple[str, ...]:
        """The ids of its findings, then of those that follow from them: every finding shown under it."""
        return (*self.findings, *self.consequences)


EXAMPLES: Final = 3


@dataclass(frozen=True, slots=True)
class IncidentChange:
    """An incident opened, changed (grew, shrank, its findings changed) or resolved.

    As delivery per incident tells it (`detection.incidents.IncidentBook`); `findings`: its findings now (the last ones,
    once resolved).
    """

    kind: ChangeKind
    incident: Incident
    findings: tuple[Finding, ...]
    catch_up: bool = False


@dataclass(init=False, unsafe_hash=True, slots=True)
class FindingChange:
    """A finding opened, updated or resolved.

    `catch_up`: told again to delivery by a replica that just became the leader (the previous leader may have delivered
    it already: sinks make it idempotent or skip it).
    """

    kind: Final[ChangeKind]
    finding: Final[Finding]
    catch_up: Final[bool]

    def __init__(self, kind: ChangeKind, finding: Finding, catch_up: bool = False) -> None:
        self.kind = kind
        self.finding = finding
        self.catch_up = catch_up


_SECONDS: Final[dict[str, float]] = {}


def _fraction(text: str) -> bool:
    return text[19] == "." and text[20:-1].isdecimal()


def parse_time(text: str) -> float:
    """RFC 3339 (as the API server and `observedAt` write it) -> seconds since the epoch.

    The UTC forms the API server writes (`...:SSZ`, `...:SS.ffffffZ`) are parsed once per second of time and
    cached: a stream has many events per second. Other offsets take the general path.
    """
    # (a fraction of digits only: float() would take `.5e3` for 500 s, `.9e999` for infinity)
    if len(text) >= 20 and text[-1] == "Z" and text[10] == "T" and (len(text) == 20 or _fraction(text)):
        base = _SECONDS.get(text[:19])
        if base is None:
            if len(_SECONDS) >= 1024:  # a stream moves on in time: recent seconds are all it needs
                _SECONDS.clear()
            base = _SECONDS[text[:19]] = datetime.fromisoformat(text[:19] + "+00:00").timestamp()
        return base + float("0" + text[19:-1]) if len(text) > 20 else base
    return datetime.fromisoformat(text).timestamp()


TIME_START: Final = -62135596800.0  # 0001-01-01T00:00:00Z, and
TIME_END: Final = 253402300800.0  # 10000-01-01T00:00:00Z: the times a date (and RFC 3339) can write


def moment(seconds: float) -> datetime | None:
    """Seconds since the epoch -> the moment in UTC; None where no date shows it.

    Not a number, infinite, or outside the years 1 to 9999: the readers refuse such times, but a time computed from
    them (a deadline, an axis' end) can still get there.
    """
    if not TIME_START <= seconds < TIME_END:  # (NaN compares false)
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (ValueError, OverflowError, OSError):  # (a time just before the end, rounded to the microsecond, past it)
        return None


def undated(seconds: float) -> str:
    """Say what a time `moment` has no date for is: `unknown time`, or its seconds and that they are out of range."""
    if math.isnan(seconds):
        return "unknown time"
    return f"out of range ({seconds:.12g} s since 1970)"


def format_time(seconds: float) -> str:
    """Seconds since the epoch -> RFC 3339 in UTC, to the second unless there is a fraction to show.

    A time no date shows (`moment`) reads as `undated` says, never raises.
    """
    at = moment(seconds)
    if at is None:
        return undated(seconds)
    if at.microsecond:
        return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


_PREFIXES: Final[dict[int, str]] = {}


def observed_time(seconds: float) -> float:
    """Cut a receive time to the microsecond, as `parse_time(format_observed(...))` reads it back.

    The live watcher analyses exactly the time it records, so a replay of its recording finds exactly what it found.
    """
    whole = int(seconds)
    return whole + int((seconds - whole) * 1_000_000) / 1_000_000


def format_observed(seconds: float) -> str:
    """Format an `observed_time` as RFC 3339 with microseconds in UTC.

    That is the `observedAt` of a recorded event.
    """
    whole = int(seconds)
    prefix = _PREFIXES.get(whole)
    if prefix is None:
        if len(_PREFIXES) > 10_000:
            _PREFIXES.clear()
        prefix = _PREFIXES[whole] = datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{prefix}.{min(round((seconds - whole) * 1_000_000), 999_999):06d}Z"
