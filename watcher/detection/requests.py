"""API requests as the kube-apiserver's audit events record them, normalised for detection.

An audit event says who made a request (the authenticated user, the pod its token is bound to, its User-Agent,
and for writes the field manager the write is recorded under), on what (verb and object), and how it ended (the
response code; for a 409, the API server's message, which names fields and managers, never values). That is all a
`Request` keeps: nothing of a request or response body, so no value of a Secret or of any object gets further than
the decoder.

The watch shows only the writes that succeeded; requests also show the ones that failed (409 Conflict), writes
that changed nothing (the API server does not bump the resourceVersion, so no watch event), and the user
behind a manager name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# Verbs that write an object (server-side apply is a `patch`).
WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# Resources whose create answers a question and stores nothing (authentication's and authorization's reviews), and
# subresources whose create makes something that is not stored (a service account's `token`, a TokenRequest): such a
# create is no write to an object.
REVIEWS: Final = frozenset(
    {
        "tokenreviews",
        "selfsubjectreviews",
        "subjectaccessreviews",
        "selfsubjectaccessreviews",
        "localsubjectaccessreviews",
        "selfsubjectrulesreviews",
    }
)
UNSTORED_SUBRESOURCES: Final = frozenset({"token"})
# The longest field manager name the API server accepts (k8s.io/apimachinery validation.FieldManagerMaxLength).
FIELD_MANAGER_MAX_BYTES: Final = 128


# Request and RequestObject are made per audit event: each is a dataclass (equality, repr, `dataclasses.replace`)
# with an `__init__` of its own and `Final` fields instead of `frozen=True`. Compiled, that `__init__` is compiled
# and the fields are read-only; a frozen dataclass's generated `__init__` is Python code that sets each field
# through `object.__setattr__`, which cost more than the rest of decoding the event. mypy rejects any assignment.


@dataclass(init=False, unsafe_hash=True, slots=True)
class RequestObject:
    """The object a request was about (the audit event's `objectRef`): by resource, as requests address it."""

    api_group: Final[str]  # "" for the core group
    api_version: Final[str]  # e.g. "v1"; "" when the event does not say
    resource: Final[str]  # plural, e.g. "deployments"
    subresource: Final[str]  # e.g. "status", "scale"; "" for the object itself
    namespace: Final[str]  # "" for cluster-scoped objects
    name: Final[str]  # "" for collections (list, create without a name)
    uid: Final[str]  # "" unless the event recorded it (from a request body at Request level and above)

    def __init__(
        self, *, api_group: str, api_version: str, resource: str, subresource: str, namespace: str, name: str, uid: str
    ) -> None:
        self.api_group = api_group
        self.api_version = api_version
        self.resource = resource
        self.subresource = subresource
        self.namespace = namespace
        self.name = name
        self.uid = uid

    def display(self) -> str:
        resource = f"{self.resource}.{self.api_group}" if self.api_group else self.resource
        where = f"{self.namespace}/" if self.namespace else ""
        sub = f" ({self.subresource})" if self.subresource else ""
        return f"{resource} {where}{self.name}{sub}"


@dataclass(init=False, unsafe_hash=True, slots=True)
class Request:
    """One completed API request (an audit event at stage `ResponseComplete` or `Panic`)."""

    audit_id: Final[str]
    time: Final[float]  # when the response completed (the event's stageTimestamp), seconds since the epoch
    verb: Final[str]  # get, list, watch, create, update, patch, delete, deletecollection
    user: Final[str]  # the user the request acted as: the impersonated user where there is one, else the authenticated
    impersonator: Final[str]  # the authenticated user when it impersonated `user`, else ""
    user_agent: Final[str]
    manager: Final[
        str
    ]  # writes: the fieldManager query parameter, else what the API server derives from the User-Agent
    object: Final[RequestObject]
    resource_version: Final[str]  # the objectRef's: for an update, the version the client sent (a stale one fails)
    code: Final[int]  # the response's HTTP status code; 0 when the event has none
    reason: Final[str]  # the failure's reason (Conflict, NotFound, ...); "" for success
    message: Final[str]  # the API server's message for a 409 Conflict, else ""
    dry_run: Final[bool]  # a dry-run request (persisted nothing)
    manager_given: Final[bool]  # the request named its field manager (`fieldManager`): server-side apply must
    force: Final[bool]  # `force=true`: a server-side apply that takes fields over from their owners
    # The resourceVersion of the object the response carried (Request level and above log it with the body; only
    # this is read from it): a write whose response version is the version it started from changed nothing.
    response_version: Final[str]
    # "namespace/name" of the pod the client's token is bound to (a pod-bound service account token: the audit
    # event's user.extra names the pod, its namespace is the service account's), else "". Nothing else of user.extra
    # is kept: not the token's credential id, not the uids.
    pod: Final[str]

    def __init__(
        self,
        *,
        audit_id: str,
        time: float,
        verb: str,
        user: str,
        impersonator: str,
        user_agent: str,
        manager: str,
        object: RequestObject,
        resource_version: str,
        code: int,
        reason: str,
        message: str,
        dry_run: bool,
        manager_given: bool = False,
        force: bool = False,
        response_version: str = "",
        pod: str = "",
    ) -> None:
        self.audit_id = audit_id
        self.time = time
        self.verb = verb
        self.user = user
        self.impersonator = impersonator
        self.user_agent = user_agent
        self.manager = manager
        self.object = object
        self.resource_version = resource_version
        self.code = code
        self.reason = reason
        self.message = message
        self.dry_run = dry_run
        self.manager_given = manager_given
        self.force = force
        self.response_version = response_version
        self.pod = pod

    @property
    def apply_conflict(self) -> bool:
        """Whether this is a 409 that rejected a server-side apply because of field conflicts.

        Not one for a stale resourceVersion. The message says so where the audit level records it; at `Metadata` level,
        a patch that named its manager and failed with 409 is taken for one (a merge patch without a resourceVersion
        precondition cannot conflict).
        """
        if self.code != 409 or self.verb != "patch" or self.reason not in ("Conflict", ""):
            return False
        if self.message:
            return self.message.startswith("Apply failed")
        return self.manager_given

    @property
    def version_conflict(self) -> bool:
        """A write rejected with 409 because it carried a stale resourceVersion (optimistic concurrency)."""
        return (
            self.code == 409
            and self.verb in ("update", "patch", "delete")
            and self.reason in ("Conflict", "")
            and not self.apply_conflict
        )

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS and not self.dry_run

    @property
    def succeeded(self) -> bool:
        return 200 <= self.code < 300


def stores_nothing_on_create(ref: RequestObject) -> bool:
    """Whether a create of `ref` stores nothing: a review, a TokenRequest."""
    return ref.resource in REVIEWS or ref.subresource in UNSTORED_SUBRESOURCES


def manager_from_user_agent(user_agent: str) -> str:
    """Return the field manager the API server records a write under when the request names none.

    The User-Agent up to its first `/`, without unprintable characters, cut to 128 bytes (k8s.io/apiserver's
    `prefixFromUserAgent`). `kubectl/v1.20.2 (linux/amd64) kubernetes/faddb5b` gives `kubectl`.
    """
    prefix = user_agent.split("/", 1)[0]
    if prefix.isascii() and prefix.isprintable():  # (a character a byte, every one printable: as is, cut)
        return prefix[:FIELD_MANAGER_MAX_BYTES]
    out: list[str] = []
    size = 0
    for char in prefix:
        if not char.isprintable():  # Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols, ASCII space
            continue
        width = len(char.encode())
        if size + width > FIELD_MANAGER_MAX_BYTES:
            break
        out.append(char)
        size += width
    return "".join(out)


# `Apply failed with 1 conflict: conflict with "helm" using v1: .data.mode`, or with several:
# `Apply failed with 2 conflicts: conflicts with "helm" using v1:\n- .data.a\n- .data.b` (apimachinery's
# fieldmanager `NewConflictError`; an Update manager is printed with `using APIVERSION [at TIME]`).
_OWNER: Final = re.compile(r'conflicts? with "((?:[^"\\]|\\.)*)"(?: using [^\s:]+(?: at \S+)?)?:')
_PATH: Final = re.compile(r"(?:^|[:\n]\s*-?\s*)(\.[^\s]+)", re.MULTILINE)


def parse_apply_conflict(message: str) -> tuple[list[str], list[str]]:
    """Parse an apply conflict's message into its owners and its fields.

    Return (the managers named as owners, the conflicting field paths without their leading dot); empty lists for a
    message of another form (or none).
    """
    owners = [m.group(1).replace('\\"', '"') for m in _OWNER.finditer(message)]
    paths = [m.group(1)[1:] for m in _PATH.finditer(message.partition(":")[2])]
    return owners, [p for p in paths if p]


__all__ = [
    "FIELD_MANAGER_MAX_BYTES",
    "REVIEWS",
    "WRITE_VERBS",
    "Request",
    "RequestObject",
    "manager_from_user_agent",
    "parse_apply_conflict",
    "stores_nothing_on_create",
]
