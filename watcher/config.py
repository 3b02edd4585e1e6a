"""Configuration: one schema with every default, shared by `replay`, `demo` and the live watcher (`run`).

A config file is YAML. Unknown keys are errors, and every error names the file, the key and the problem.
Durations take Go-style text (`45s`, `15m`, `1h30m`) or a number of seconds; sizes take `64Mi`, `1G` or bytes.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)(h|ms|m|s))")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: Any) -> Any:
    """`"1h30m"` -> 5400.0; numbers pass through as seconds; anything else is left for the type check."""
    if isinstance(value, str):
        text = value.strip()
        if text and _DURATION.sub("", text) == "":
            return sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
        raise ValueError(f"{value!r} is not a duration (use e.g. 45s, 15m, 1h30m, or seconds)")
    return value


def _number_or_text(number: str, pattern: str, description: str) -> dict[str, Any]:
    """Return the JSON schema of a value given as a positive number or as text with units (a duration, a size)."""
    return {
        "anyOf": [{"type": number, "exclusiveMinimum": 0}, {"type": "string", "pattern": pattern}],
        "description": description,
    }


_DURATION_SCHEMA = _number_or_text(
    "number", r"^\s*(\d+(\.\d+)?(h|ms|m|s))+\s*$", "A duration: Go-style text (45s, 15m, 1h30m) or seconds."
)
Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0), WithJsonSchema(_DURATION_SCHEMA)]
_DELAY_SCHEMA = {**_DURATION_SCHEMA, "anyOf": [{"type": "number", "minimum": 0}, _DURATION_SCHEMA["anyOf"][1]]}
Delay = Annotated[float, BeforeValidator(parse_duration), Field(ge=0), WithJsonSchema(_DELAY_SCHEMA)]  # 0: none

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_size(value: Any) -> Any:
    """`"64Mi"` -> 67108864, `"1G"` -> 10**9; integers pass through as bytes; anything else is left for the check."""
    if isinstance(value, str):
        match = _SIZE.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is not a size (use e.g. 64Mi, 1G, or bytes)")
        return int(float(match[1]) * _SIZE_UNITS[(match[2] or "").lower()])
    return value


_SIZE_SCHEMA = _number_or_text(
    "integer", r"^\s*\d+(\.\d+)?\s*([KkMmGgTt]i?)?[Bb]?\s*$", "A size: bytes, or with a unit (64Mi, 1G)."
)
Bytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0), WithJsonSchema(_SIZE_SCHEMA)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FightSettings(_Strict):
    """Ping-pong: the same field handed back and forth between writers (or values flipping back)."""

    window: Seconds = Field(3600.0, description="Handovers count when they fall within this window.")
    min_handovers: int = Field(3, ge=2, description="Handovers of one field within the window to call a fight.")


class HotLoopSettings(_Strict):
    """One writer rewriting one object at a sustained high rate."""

    min_writes_per_minute: float = Field(30.0, gt=0, description="Decaying write rate that counts as hot.")
    min_writes: int = Field(20, ge=1, description="Writes in the current streak before a hot loop is raised.")
    time_constant: Seconds = Field(60.0, description="Time constant of the exponentially decaying rate.")


class ConflictStormSettings(_Strict):
    """An object whose writes keep failing with 409 Conflict (audit events).

    A decaying rate of its conflicts, so that the occasional conflict every controller sees (and retries once) is not
    one.
    """

    min_conflicts_per_minute: float = Field(6.0, gt=0, description="Decaying conflict rate that counts as a storm.")
    min_conflicts: int = Field(10, ge=1, description="Conflicts in the current streak before a storm is raised.")
    time_constant: Seconds = Field(60.0, description="Time constant of the exponentially decaying rate.")


class ApplyConflictSettings(_Strict):
    """A server-side applier whose applies are rejected with field conflicts again and again (audit events)."""

    min_rejections: int = Field(
        3, ge=1, description="Applies by one client rejected in a row (no success between) to call it stuck."
    )


class NoopWritesSettings(_Strict):
    """A client rewriting an object with writes that change nothing, at a sustained rate (audit events)."""

    min_writes_per_minute: float = Field(6.0, gt=0, description="Decaying rate of no-op writes that counts as hot.")
    min_writes: int = Field(10, ge=1, description="No-op writes in the current streak before it is raised.")
    time_constant: Seconds = Field(60.0, description="Time constant of the exponentially decaying rate.")


class ResolveSettings(_Strict):
    """A finding resolves after a quiet period: the longer of `after` and `flip_periods` x the flip period."""

    after: Seconds = Field(900.0, description="Minimum quiet period before a finding resolves.")
    flip_periods: float = Field(3.0, gt=0, description="Quiet period in multiples of the observed flip period.")


class TimelineSettings(_Strict):
    """The record of writes each open finding keeps for its timeline (the page and `--html`).

    See docs/detection.md#timelines.
    """

    marks: int = Field(
        512,
        ge=0,
        le=65_536,
        description="Writes kept one by one per open finding (8 bytes each); earlier ones are folded into counts. "
        "0: no timelines.",
    )
    bins: int = Field(32, ge=2, le=1024, description="Folds of earlier writes kept per open finding.")
    resolved: int = Field(
        200, ge=0, description="Resolved findings that keep their timeline (the most recent); older ones drop it."
    )


class IgnoreRule(_Strict):
    """Leave something out of the analysis. Selectors given together must all match.

    With only object selectors (group, kind, namespace, name), whole objects are ignored. With `manager`, that
    writer's writes are ignored; with `fields`, those field-path prefixes are ignored (by `manager` if given).
    `name`, `namespace` and `manager` are shell-style patterns (`*`, `?`, `[...]`); `kind` is case-insensitive.
    """

    group: str | None = Field(None, description="API group; '' is the core group.")
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    manager: str | None = None
    fields: tuple[str, ...] = Field((), description="Field-path prefixes, e.g. metadata.annotations[x/y].")
    reason: str = ""

    @property
    def whole_objects(self) -> bool:
        return self.manager is None and not self.fields


DEFAULT_IGNORES: tuple[IgnoreRule, ...] = (
    IgnoreRule(group="coordination.k8s.io", kind="Lease", reason="leader election and node heartbeats"),
    IgnoreRule(group="", kind="Event", reason="events are written once per occurrence"),
    IgnoreRule(group="events.k8s.io", kind="Event", reason="events are written once per occurrence"),
    IgnoreRule(group="", kind="Endpoints", reason="endpoints follow pod churn"),
    IgnoreRule(group="discovery.k8s.io", kind="EndpointSlice", reason="endpoint slices follow pod churn"),
    IgnoreRule(
        fields=(
            "metadata.annotations[control-plane.alpha.kubernetes.io/leader]",
            "metadata.annotations[cluster-autoscaler.kubernetes.io/last-updated]",
        ),
        reason="leader-election locks and heartbeats kept in annotations",
    ),
)


DEFAULT_MAX_OBJECTS = 100_000  # at most ~0.5 GB resident, even when every object churns (docs/scaling.md)


class DetectionSettings(_Strict):
    fight: FightSettings = FightSettings()
    hot_loop: HotLoopSettings = HotLoopSettings()
    conflict_storm: ConflictStormSettings = ConflictStormSettings()
    apply_conflict: ApplyConflictSettings = ApplyConflictSettings()
    noop_writes: NoopWritesSettings = NoopWritesSettings()
    resolve: ResolveSettings = ResolveSettings()
    timeline: TimelineSettings = TimelineSettings()
    max_clients: int = Field(
        16, ge=1, le=1000, description="API clients counted per object (audit events); the rest are counted together."
    )
    history: int = Field(32, ge=4, le=1024, description="Recent handovers and changes kept per object.")
    default_ignores: bool = Field(True, description="Apply the built-in ignore rules (Leases, Events, ...).")
    ignore: tuple[IgnoreRule, ...] = ()
    idle_after: Seconds | None = Field(
        None,
        description="An object not written for this long is let go (its next event is a new baseline); default: "
        "the fight window. At least the fight window, or a slow fight could be missed. Objects with an open "
        "finding are kept.",
    )
    max_objects: int | None = Field(
        DEFAULT_MAX_OBJECTS,
        ge=1,
        description="Most objects tracked at once; beyond it the least recently written are let go first (objects "
        "with an open finding are kept). null: no limit.",
    )

    @property
    def ignore_rules(self) -> tuple[IgnoreRule, ...]:
        return (DEFAULT_IGNORES if self.default_ignores else ()) + self.ignore

    @property
    def idle_seconds(self) -> float:
        """How long an object may go unwritten before it is let go (`idle_after`, by default the fight window)."""
        return self.idle_after if self.idle_after is not None else self.fight.window

    @model_validator(mode="after")
    def _idle_covers_the_window(self) -> DetectionSettings:
        if self.idle_after is not None and self.idle_after < self.fight.window:
            raise ValueError(
                f"idle_after ({self.idle_after:g}s) must be at least fight.window ({self.fight.window:g}s): an object "
                "let go between two handovers of a slow fight would hide it"
            )
        return self


class MetricsSettings(_Strict):
    """What `/metrics` exposes. Every series set is bounded, whatever the size of the cluster."""

    writes_namespace_label: bool = Field(
        True, description="Label fightwatch_writes_total by namespace (turn off on very large clusters)."
    )
    top_managers: int = Field(
        50, ge=1, le=1000, description="Managers with their own fightwatch_writes_total series; the rest: other."
    )
    max_finding_series: int = Field(
        200, ge=0, description="Active findings with per-object series (finding_info, ...), most severe first."
    )
    max_incident_series: int = Field(
        200, ge=0, description="Active incidents with series of their own (incident_info, ...), most objects first."
    )
    max_label_length: int = Field(
        200, ge=16, description="Longer writers/fields label values are cut, ending with an ellipsis."
    )


class Secret(_Strict):
    """A credential, read from a file or an environment variable at start; never written in the config itself."""

    file: Path | None = Field(None, description="Read from this file (surrounding whitespace stripped).")
    env: str | None = Field(None, description="Read from this environment variable.")

    @model_validator(mode="after")
    def _one_source(self) -> Secret:
        if (self.file is None) == (self.env is None):
            raise ValueError("give exactly one of file or env")
        return self


class EventsSettings(_Strict):
    """Kubernetes Events on the object of each finding (one per finding, updated as a series)."""

    enabled: bool = Field(True, description="Write Events (the only objects fightwatch ever writes).")
    api: Literal["auto", "events.k8s.io/v1", "v1"] = Field(
        "auto", description="auto: events.k8s.io/v1 where the server has it, else core v1 Events."
    )
    reporting_instance: str | None = Field(
        None, max_length=128, description="reportingInstance; default: $POD_NAME, else the host name."
    )


class AlertmanagerSettings(_Strict):
    """Alerts posted to Alertmanager's API v2; every URL gets every alert (an HA cluster takes care of dedup)."""

    urls: tuple[str, ...] = Field((), description="Base URLs, e.g. http://alertmanager:9093; none: off.")
    resend_interval: Seconds = Field(60.0, description="Active alerts are re-sent this often.")
    bearer_token: Secret | None = Field(None, description="Authorization: Bearer token, from a file or env.")
    ca_file: Path | None = Field(None, description="CA bundle that verifies https URLs (default: system CAs).")
    tls_verify: bool = Field(True, description="Verify TLS certificates.")
    generator_url: str | None = Field(None, description="generatorURL of each alert, e.g. the fightwatch UI.")


class WebhookSettings(_Strict):
    """A JSON POST per finding change, for chat and incident tools (has a Slack-compatible `text`)."""

    name: str = Field(..., pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$", description="Names the sink in metrics/logs.")
    url: Secret = Field(..., description="The URL is a credential for most chat tools: a file or env only.")
    headers: Secret | None = Field(None, description="A YAML/JSON mapping of extra headers, from a file or env.")
    updates: bool = Field(False, description="Also post updates of active findings (default: opened/resolved).")
    ca_file: Path | None = None
    tls_verify: bool = True


class DeliverySettings(_Strict):
    """Delivery never blocks detection: each sink has a bounded queue (oldest dropped first) and retries."""

    per: Literal["incident", "finding"] = Field(
        "incident",
        description="Alerts per incident (one for a pattern on many objects) or per finding (one per object): "
        "Alertmanager, webhooks and the bundled alert rules. Events are always per object.",
    )
    queue_size: int = Field(1000, ge=1, description="Finding changes queued per sink before the oldest drop.")
    timeout: Seconds = Field(10.0, description="Timeout of one delivery attempt.")
    attempts: int = Field(5, ge=1, description="Attempts per change before it is given up (and counted).")
    backoff_initial: Seconds = Field(1.0, description="Delay before the first retry; doubles each retry.")
    backoff_max: Seconds = Field(60.0, description="Longest delay between retries.")
    events: EventsSettings = EventsSettings()
    alertmanager: AlertmanagerSettings = AlertmanagerSettings()
    webhooks: tuple[WebhookSettings, ...] = ()


DEFAULT_EXCLUDED_RESOURCES = ("events", "leases", "endpoints", "endpointslices", "pods")
ALWAYS_METADATA_ONLY = ("secrets",)  # whatever the config says: no secret value is ever received


def _resource_selector(value: Any) -> Any:
    """`configmaps`, `deployments.apps`, `*.example.com`: a resource's plural, optionally `.group`; shell patterns."""
    if isinstance(value, str) and (not value.strip() or "/" in value or value != value.strip()):
        raise ValueError(f"{value!r} is not a resource (use plural or plural.group, e.g. deployments.apps)")
    return value


ResourceSelector = Annotated[str, BeforeValidator(_resource_selector)]


class ResourceSettings(_Strict):
    """Settings of the resources a `watch.per_resource` key selects."""

    full_objects: bool = Field(
        False, description="Watch whole objects (spec and status values), not only their metadata; never Secrets."
    )


class WatchSettings(_Strict):
    """What `fightwatch run` watches and how it talks to the API server.

    Resources are named like kubectl names them: `configmaps`, `deployments.apps`, `widgets.example.com`; a bare
    plural matches it in every group; shell patterns (`*.example.com`) work. Every resource that supports list
    and watch is watched, as found through API discovery, unless `exclude_resources` names it; with
    `resources` (an allowlist) only those are watched.
    """

    resources: tuple[ResourceSelector, ...] = Field((), description="Allowlist; empty: every listable resource.")
    exclude_resources: tuple[ResourceSelector, ...] = Field(
        DEFAULT_EXCLUDED_RESOURCES, description="Denylist (pods: opt in by leaving them out of this list)."
    )
    namespaces: tuple[str, ...] = Field(
        (),
        description="Only objects in these namespaces. Plain names are watched one namespace at a time (what a "
        "RoleBinding per namespace allows); shell patterns watch cluster-wide and filter.",
    )
    exclude_namespaces: tuple[str, ...] = Field((), description="Not objects in these namespaces (shell patterns).")
    label_selector: str = Field(
        "",
        description="Only objects with these labels: a label selector, as `kubectl -l` takes it (`app=web,tier!=db`). "
        "An object whose labels stop matching is seen as deleted.",
    )
    per_resource: dict[ResourceSelector, ResourceSettings] = Field(
        default_factory=dict, description="Settings by resource; when several keys match, later ones win."
    )
    discovery_interval: Seconds = Field(60.0, description="How often API discovery is refreshed (new CRDs).")
    watch_timeout: Seconds = Field(
        300.0, description="Server-side watch timeout; each watch picks one at random between this and twice it."
    )
    read_timeout: Seconds = Field(
        60.0, description="A watch silent this long past its server-side timeout is taken for dead."
    )
    read_batch: Delay = Field(
        0.25,
        le=1.0,
        description="After a watch's events are read, the next read waits this long, so that the events arriving "
        "meanwhile are received, decrypted and parsed together (a fraction of the CPU per event at hundreds of "
        "writes a second). Adds at most this to an event's lag; 0 reads each event as it arrives.",
    )
    request_timeout: Seconds = Field(60.0, description="Timeout of one list or discovery request.")
    page_size: int = Field(500, ge=1, description="Objects per page when listing.")
    watch_list: bool = Field(
        True,
        description="Read each resource's current objects as the start of its watch (Kubernetes' WatchList: "
        "`sendInitialEvents`), where the API server allows it; else, and when false, list them in pages first.",
    )
    backoff_initial: Seconds = Field(0.5, description="First reconnect delay after an error (then doubling).")
    backoff_max: Seconds = Field(30.0, description="Longest reconnect delay after errors.")
    slow_retry: Seconds = Field(300.0, description="Retry delay of a resource that is forbidden or gone.")

    @field_validator("per_resource")
    @classmethod
    def _secrets_stay_metadata(cls, value: dict[str, ResourceSettings]) -> dict[str, ResourceSettings]:
        for selector, settings in value.items():
            if settings.full_objects and selector.split(".")[0] in ALWAYS_METADATA_ONLY:
                raise ValueError(f"{selector}.full_objects: Secrets are only ever watched as metadata")
        return value


class LeaderElectionSettings(_Strict):
    """Several replicas, one delivering: leader election on a coordination.k8s.io/v1 Lease.

    Every replica watches and detects (so a standby's state is warm); only the Lease holder delivers Events,
    Alertmanager alerts and webhooks. The timings are controller-runtime's defaults.
    """

    enabled: bool = Field(False, description="Elect a leader among the replicas; only it delivers.")
    lease_name: str = Field(
        "fightwatch",
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?$",
        description="Name of the Lease (with sharding: one Lease per shard, named <lease_name>-shard-<i>).",
    )
    lease_namespace: str | None = Field(
        None, description="Namespace of the Lease; default: $POD_NAMESPACE, else the service account's namespace."
    )
    identity: str | None = Field(
        None, max_length=128, description="This replica's holderIdentity; default: $POD_NAME (else the host name)."
    )
    lease_duration: Seconds = Field(15.0, description="A standby takes the Lease over when not renewed this long.")
    renew_deadline: Seconds = Field(10.0, description="The leader stops delivering when it could not renew this long.")
    retry_period: Seconds = Field(2.0, description="How often the leader renews and a standby tries to take over.")

    @model_validator(mode="after")
    def _timings(self) -> LeaderElectionSettings:
        if self.retry_period < 1:
            raise ValueError("retry_period must be at least 1s")
        if not self.renew_deadline > 1.2 * self.retry_period:
            raise ValueError("renew_deadline must be longer than 1.2 x retry_period")
        if not self.lease_duration > self.renew_deadline + self.retry_period:
            # (a standby dates a renewal it sees a retry period early: the leader must have stopped by then)
            raise ValueError("lease_duration must be longer than renew_deadline + retry_period")
        if self.lease_duration != int(self.lease_duration):
            raise ValueError("lease_duration must be whole seconds (a Lease counts its duration in seconds)")
        return self


class ShardingSettings(_Strict):
    """Split the watched resources between processes: shard `shard` of `total_shards` watches only its own.

    Resources are the unit (the API server filters by resource, so each shard receives only its share of the
    events, and a fight is always over one object, so one shard sees it whole): each goes to the shard
    `assign` names, else to a stable hash of its name modulo `total_shards`.
    """

    shard: int = Field(0, ge=0, description="This process's shard (--shard overrides it).")
    total_shards: int = Field(1, ge=1, le=256, description="How many shards there are (--total-shards).")
    assign: dict[ResourceSelector, int] = Field(
        default_factory=dict,
        description="Resources pinned to a shard, e.g. {configmaps: 0, deployments.apps: 1}, to balance by "
        "measured events; when several keys match, later ones win. The rest: by hash.",
    )

    @model_validator(mode="after")
    def _in_range(self) -> ShardingSettings:
        if self.shard >= self.total_shards:
            raise ValueError(f"shard {self.shard} is not below total_shards ({self.total_shards})")
        for selector, shard in self.assign.items():
            if not 0 <= shard < self.total_shards:
                raise ValueError(f"assign.{selector}: shard {shard} is not below total_shards ({self.total_shards})")
        return self


class KubeSettings(_Strict):
    service_account_dir: Path = Field(
        Path("/var/run/secrets/kubernetes.io/serviceaccount"),
        description="Where the in-cluster service-account token and CA are mounted.",
    )


class ServeTlsSettings(_Strict):
    """The serving certificate.

    Both files are re-read when they change on disk (cert-manager renewing, a mounted Secret updated), without a
    restart; without them a self-signed certificate is generated at start and its SHA-256 fingerprint logged.
    """

    cert_file: Path | None = Field(None, description="Certificate chain (PEM); with key_file.")
    key_file: Path | None = Field(None, description="Its private key (PEM).")
    client_ca_file: Path | None = Field(
        None,
        description="Client certificates signed by this CA authenticate as the API server takes them: the common "
        "name is the user, the organizations its groups (then authorized like a token's user).",
    )
    min_version: Literal["1.2", "1.3"] = Field("1.2", description="Oldest TLS version accepted.")

    @model_validator(mode="after")
    def _pair(self) -> ServeTlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give both cert_file and key_file, or neither (a self-signed certificate)")
        return self


class ServeAuthSettings(_Strict):
    """How callers are authenticated and authorized, and how long answers are cached.

    Authenticated by TokenReview, authorized by SubjectAccessReview.
    """

    audiences: tuple[str, ...] = Field(
        (), description="Audiences a token must be issued for (TokenReview spec.audiences); empty: the API server's."
    )
    allowed_ttl: Seconds = Field(300.0, description="How long an accepted token or a permission is cached.")
    denied_ttl: Seconds = Field(30.0, description="How long a refused token or permission is cached.")
    cache_size: int = Field(10_000, ge=1, description="Tokens, and permissions, cached at most (each).")
    max_stale: Seconds = Field(
        3600.0,
        description="While the API server cannot answer, a cached answer expired less than this long ago is used.",
    )


class ServeSettings(_Strict):
    """The endpoints: /metrics, /api/v1/findings, /healthz, /readyz.

    HTTPS, every caller authenticated and authorized by the API server (docs/security.md), except the probes /healthz
    and /readyz.
    """

    address: str = Field("0.0.0.0", description="Listen address of /metrics, /healthz, /readyz, /api/v1/findings.")  # noqa: S104 - a pod serves on its own IP
    port: int = Field(8080, ge=0, le=65535, description="Listen port; 0 picks a free one (logged).")
    tls: ServeTlsSettings = ServeTlsSettings()
    auth: ServeAuthSettings = ServeAuthSettings()
    insecure_http: bool = Field(
        False,
        description="Development only: plain HTTP, and every caller may read everything (a warning is logged).",
    )
    external_url: str | None = Field(
        None,
        description="Where users reach this watcher (e.g. https://fightwatch.example.com): Events, alerts and webhook "
        "messages link to each finding's timeline on its page there.",
    )
    page_refresh: Seconds = Field(30.0, description="How often the page fetches the findings again.")

    @field_validator("external_url")
    @classmethod
    def _an_http_url(cls, url: str | None) -> str | None:
        if url is not None and not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", url):
            raise ValueError(f"{url!r} is not an http(s) URL without query or fragment")
        return url.rstrip("/") if url is not None else None

    @model_validator(mode="after")
    def _plain_has_no_tls(self) -> ServeSettings:
        if self.insecure_http and (self.tls.cert_file is not None or self.tls.client_ca_file is not None):
            raise ValueError("insecure_http serves plain HTTP: it takes no tls settings")
        return self


class AuditWebhookSettings(_Strict):
    """The receiver of the kube-apiserver's audit webhook backend (docs/audit.md).

    TLS, and a sender authenticated by a client certificate of `client_ca_file` or the bearer token in `token_file`.
    """

    enabled: bool = Field(False, description="Receive audit events (conflicts, no-op writes, users behind managers).")
    address: str = Field("0.0.0.0", description="Listen address of the audit webhook.")  # noqa: S104 - a pod's own IP
    port: int = Field(8443, ge=0, le=65535, description="Listen port of the audit webhook; 0 picks a free one.")
    tls_cert_file: Path | None = Field(None, description="The server certificate (PEM); required when enabled.")
    tls_key_file: Path | None = Field(None, description="Its private key (PEM); required when enabled.")
    client_ca_file: Path | None = Field(None, description="CA that signs the API server's client certificate.")
    token_file: Path | None = Field(None, description="File holding the bearer token the API server sends.")
    max_body_bytes: Bytes = Field(32 * 2**20, description="Largest batch accepted (a larger one is a 413).")
    max_pending_requests: int = Field(
        100_000, ge=1, description="Requests queued for detection at most; beyond it they are dropped and counted."
    )

    @model_validator(mode="after")
    def _secure(self) -> AuditWebhookSettings:
        if not self.enabled:
            return self
        if self.tls_cert_file is None or self.tls_key_file is None:
            raise ValueError("audit_webhook: tls_cert_file and tls_key_file are required (the endpoint is TLS only)")
        if self.client_ca_file is None and self.token_file is None:
            raise ValueError(
                "audit_webhook: client_ca_file or token_file is required (the API server must be authenticated)"
            )
        return self


class LogSettings(_Strict):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: readable on a terminal, JSON lines otherwise."
    )


class RecordSettings(_Strict):
    max_bytes: Bytes = Field(256 * 2**20, description="Rotate the recording when it grows past this size.")
    keep: int = Field(5, ge=0, description="Rotated recordings kept (FILE.1 is the newest).")


class Config(_Strict):
    detection: DetectionSettings = DetectionSettings()
    watch: WatchSettings = WatchSettings()
    kube: KubeSettings = KubeSettings()
    serve: ServeSettings = ServeSettings()
    audit_webhook: AuditWebhookSettings = AuditWebhookSettings()
    log: LogSettings = LogSettings()
    record: RecordSettings = RecordSettings()
    metrics: MetricsSettings = MetricsSettings()
    delivery: DeliverySettings = DeliverySettings()
    leader_election: LeaderElectionSettings = LeaderElectionSettings()
    sharding: ShardingSettings = ShardingSettings()


class ConfigError(Exception):
    """A config that cannot be used; the message names the file and the key."""


def load_config(path: Path | None) -> Config:
    """Read and validate a config file; `None` gives the defaults."""
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}{where}: not valid YAML: {problem}") from exc
    return parse_config(data, source=str(path))


def parse_config(data: Any, *, source: str) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping of keys, got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid config:\n" + _describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        loc = error["loc"]
        key = ".".join(str(part) for part in loc) or "(top level)"
        if error["type"] == "extra_forbidden":
            problem = "unknown key" + _suggest(loc)
        else:
            problem = error["msg"]
            if "input" in error and error["type"] != "missing":
                problem += f" (got {error['input']!r})"
        lines.append(f"  {key}: {problem}")
    return "\n".join(lines)


def _suggest(loc: tuple[int | str, ...]) -> str:
    """`(did you mean 'window'?)` for a misspelt key."""
    model: Any = Config
    for part in loc[:-1]:
        if isinstance(part, int) or model is None or part not in model.model_fields:
            continue  # (a list index, or a key of a mapping such as watch.per_resource)
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        args = getattr(annotation, "__args__", ())
        model = next((a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if model is None:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
