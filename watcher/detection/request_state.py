"""What the request engine (`request_engine.py`) keeps per object, per client and per open finding, and counts.

Slotted classes: there are as many states as objects requested, and a tally per client of each.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final

from watcher.detection.ignore import ObjectRules
from watcher.detection.state import Rate
from watcher.detection.timeline import Record
from watcher.model import FindingType, ObjectRef

ObjectKey = tuple[str, str, str, str]  # (API group, resource, namespace, name)
ClientKey = tuple[str, str, str, str]  # (user, User-Agent, field manager, pod "namespace/name" or "")
OTHER_CLIENTS: Final[ClientKey] = ("(other clients)", "", "", "")


# The subresource lists of tallies, shared: a few combinations ("" alone, "" and "status", ...) serve every client.
# Bounded: past the limit, new combinations are made per tally.
_SUBRESOURCES: dict[tuple[str, ...], tuple[str, ...]] = {}
_SUBRESOURCES_MAX: Final = 256


def subresources_with(subresources: tuple[str, ...], subresource: str) -> tuple[str, ...]:
    """`subresources` and `subresource` after them, as a tuple shared with every tally that has the same."""
    grown = (*subresources, subresource)
    shared = _SUBRESOURCES.get(grown)
    if shared is not None:
        return shared
    if len(_SUBRESOURCES) < _SUBRESOURCES_MAX:
        _SUBRESOURCES[grown] = grown
    return grown


class Tally:
    """What one client's write requests to one object came to."""

    __slots__ = (
        "conflicts",
        "noop_rate",
        "noops",
        "rejections",
        "stale",
        "stale_version",
        "subresources",
        "writes",
        "written_from",
    )

    def __init__(self) -> None:
        self.conflicts = 0  # writes rejected with 409 (version or apply conflicts)
        self.writes = 0  # writes that succeeded
        self.noops = 0  # successful writes that changed nothing
        self.rejections = 0  # applies rejected in a row (since its last successful write)
        self.stale_version = ""  # the resourceVersion its last version conflict carried
        self.stale = 0  # version conflicts that carried the same version as the one before (a stale cache)
        # The resourceVersion its last successful update carried ("" when that update is known to have changed
        # nothing): a conflict that carries it again is against its own write, whatever was written after.
        self.written_from = ""
        self.noop_rate: Rate | None = None  # of its no-op writes (from the first one)
        # What its writes addressed: "" the object itself, "status", "scale", ... (one each, in order of first write):
        # the managedFields entry of a subresource's write names it, so the users of writers are told by both.
        self.subresources: tuple[str, ...] = ()


class RequestFinding:
    """A finding over requests while it is open (mutable); `snapshot` makes the immutable `Finding`."""

    __slots__ = (
        "client",
        "conflicts",
        "detected_at",
        "fields",
        "first_seen",
        "id",
        "last_seen",
        "owners",
        "record",
        "ref",
        "requests",
        "stale",
        "type",
        "updates",
    )

    def __init__(
        self,
        kind: FindingType,
        ref: ObjectRef,
        *,
        client: ClientKey | None,
        first_seen: float,
        at: float,
        opened_by: str,
    ) -> None:
        self.type = kind
        self.ref = ref
        self.client = client  # the one client an apply_conflict or noop_writes finding is about
        # (a client without a pod keeps the id it had before pods were read)
        scope = "" if client is None else "/".join(client if client[3] else client[:3])
        what = f"{kind}/{ref.group}/{ref.resource}/{ref.namespace or ''}/{ref.name}/{scope}/{opened_by}"
        self.id = hashlib.blake2b(what.encode(), digest_size=8).hexdigest()
        self.first_seen = first_seen
        self.detected_at = at
        self.last_seen = at
        self.conflicts = 0  # storm: version conflicts; apply: rejections
        self.requests = 0  # storm: writes tried while it was open, conflicts included; noop: no-op writes
        self.fields: set[str] = set()
        self.owners: set[str] = set()
        self.stale = False  # a client kept sending the same stale resourceVersion
        self.updates = False  # conflicting writes were full-object updates (PUT)
        self.record: Record | None = None  # its requests, for its timeline (`timeline.py`)


class RequestState:
    """What is kept per object."""

    __slots__ = (
        "applies",
        "clients",
        "conflict_rate",
        "last",
        "last_writer",
        "noops",
        "ref",
        "rules",
        "storm",
        "update_client",
        "update_time",
        "update_version",
        "version",
    )

    def __init__(self, ref: ObjectRef, rules: ObjectRules) -> None:
        self.ref = ref
        self.rules = rules
        self.clients: dict[ClientKey, Tally] = {}
        self.last = 0.0  # when it was last requested
        self.last_writer: ClientKey | None = None  # the client of its last successful write
        self.conflict_rate: Rate | None = None  # of its version conflicts (from the first one)
        self.storm: RequestFinding | None = None
        self.applies: dict[ClientKey, RequestFinding] = {}
        self.noops: dict[ClientKey, RequestFinding] = {}
        self.version = ""  # the resourceVersion a response last returned ("" when responses are not logged)
        self.update_version = ""  # the version the last successful update carried, and who sent it when
        self.update_client: ClientKey | None = None
        self.update_time = 0.0


@dataclass(slots=True)
class RequestStats:
    """Counts of what the request engine did with each request."""

    requests: int = 0
    reads: int = 0  # get, list, watch: not analysed
    without_name: int = 0  # writes to collections (create without a name, deletecollection)
    dry_run: int = 0
    stores_nothing: int = 0  # creates of reviews and token requests: answered, nothing stored
    ignored: int = 0  # by the ignore rules (objects or managers)
    writes: int = 0  # analysed writes that succeeded
    conflicts: int = 0  # analysed writes rejected with 409 for a stale resourceVersion
    # of which against the client's own last write (it wrote again from a copy older than its own write: a lagging
    # cache, retried): no storm is made of them
    self_conflicts: int = 0
    apply_conflicts: int = 0  # server-side applies rejected with field conflicts
    noop_writes: int = 0  # successful writes that changed nothing
    failed: int = 0  # other failed writes (404, 422, ...)
    evicted_idle: int = 0
    evicted_capacity: int = 0
    # By (API group, resource[, reason]): bounded by the resources the API server serves.
    conflicts_by_resource: dict[tuple[str, str, str], int] = field(default_factory=dict)  # reason: version, apply
    noop_by_resource: dict[tuple[str, str], int] = field(default_factory=dict)


__all__ = [
    "OTHER_CLIENTS",
    "ClientKey",
    "ObjectKey",
    "RequestFinding",
    "RequestState",
    "RequestStats",
    "Tally",
    "subresources_with",
]
