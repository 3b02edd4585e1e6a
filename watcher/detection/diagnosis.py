"""What a watch finding says: who drives it, who only sets things back, and how to stop it.

Told from the finding alone (its writers, fields and `Traits`), so that the same words come out wherever it is told
from: when the engine snapshots it, and again when the audit events have named a writer the watch could not
(`join.py`).

**Who drives a fight.** In most fights two writers each want their own value and neither is the other's consequence.
But when one of them maintains the object, the other drives the fight and the maintainer only sets back what it
changed:

- the object's controller: the writer that set the object's controller reference (`ownerReferences` with
  `controller: true`), which derives the object from its owner (a Deployment's ReplicaSets, a Service's
  EndpointSlices, an operator's children). A client scaling a ReplicaSet drives; the deployment controller restores.
- Kubernetes' own components (`KUBERNETES_COMPONENTS`: kube-controller-manager's controllers, the scheduler, the
  kubelet, the API server), except through the `scale` subresource (an autoscaler's writes, which follow the
  autoscaler's own object): they implement the API's semantics (a status recomputed on every sync, a `kube-root-ca.crt`
  published in every namespace, a mirrored EndpointSlice), and are never the side to change.

The maintainer is marked `restores` and named after the writers that drive; the advice is about what the driver does
wrong (change the owner, do not edit a status by hand, do not manage an object Kubernetes publishes), never about
changing or stopping Kubernetes' own controllers. Without a maintainer the writers are peers.

**Every writer named.** A writer no managedFields entry names is `(unattributed)`: the API server does not stamp the
entry of a write that only removes fields (a three-way merge patch that resets a field, a status rewritten whole), and
servers before 1.22 keep no entry for the scale subresource. The summary says so; with audit events the writer is named
from them (`named_from: audit`). A manager that is an HTTP library's User-Agent product (`curl`, `Go-http-client`) is a
client that names no field manager of its own: said so too.
"""

from __future__ import annotations

from typing import Final

from watcher.detection import hints
from watcher.model import Finding, FindingType, Traits, Writer, WriterCount

# The field managers Kubernetes' own components write under (their binaries, from their User-Agents).
KUBERNETES_COMPONENTS: Final = frozenset(
    {"kube-controller-manager", "kube-scheduler", "kubelet", "kube-apiserver", "cloud-controller-manager"}
)
# User-Agent products of HTTP libraries and tools: the manager the API server records for a client that names no
# field manager (the User-Agent up to its first "/").
HTTP_CLIENTS: Final = frozenset(
    {
        "curl",
        "Wget",
        "Go-http-client",
        "python-requests",
        "python-urllib3",
        "Python-urllib",
        "python-httpx",
        "aiohttp",
        "okhttp",
        "Java",
        "Apache-HttpClient",
        "ReactorNetty",
        "axios",
        "node-fetch",
        "undici",
        "got",
        "PostmanRuntime",
        "Ruby",
        "Faraday",
        "RestSharp",
        "Dart",
        "libcurl",
    }
)
_NO_TRAITS: Final = Traits()


def builtin(writer: Writer) -> bool:
    """Whether a writer is Kubernetes' own component, writing the object or its status (not an autoscaler's scale)."""
    return writer.manager in KUBERNETES_COMPONENTS and writer.subresource != "scale"


def anonymous(writer: Writer) -> bool:
    """Whether a writer is a client that names no field manager: the API server took its HTTP library's name."""
    return writer.manager in HTTP_CLIENTS


def restorers(finding: Finding) -> tuple[Writer, ...]:
    """Return the writers of a fight that maintain its object and set back what the others change.

    Of a hot loop's, among those that do not react. See the module docstring; only when some other writer, one the
    watch names, drives it.
    """
    if finding.type not in (FindingType.FIGHT, FindingType.HOT_LOOP):
        return ()
    writers = [c.writer for c in finding.writers if not c.reacts]
    drivers = [w for w in writers if w.manager is not None]
    traits = finding.traits or _NO_TRAITS
    own = traits.controller_writer
    if own is not None and own in writers and any(w != own for w in drivers):
        return (own,)
    kept = tuple(w for w in writers if builtin(w))
    return kept if kept and any(not builtin(w) for w in drivers) else ()


def describe(finding: Finding) -> Finding:
    """Return a watch finding with its writers' roles, its summary and its hint told from what it holds."""
    traits = finding.traits or _NO_TRAITS
    keep = restorers(finding)
    counts = finding.writers
    if keep or any(c.restores for c in counts):  # (a WriterCount made anew only where its role changes)
        counts = tuple(
            c if c.restores == (c.writer in keep) else _with_role(c, restores=c.writer in keep) for c in counts
        )
    if keep or any(c.writer.manager is None for c in counts):
        # (who drives first, the writer no entry names after those named, then who restores; else as they came)
        counts = tuple(sorted(counts, key=lambda c: (c.restores, c.writer.manager is None)))
    if counts is not finding.writers:
        finding = finding.told(counts, finding.summary, finding.hint)
    summary = _summary(finding, traits)
    hint = hints.hint(_evidence(finding, traits))
    if traits.cause:
        summary += f"; it follows from {traits.cause} (finding {finding.related})"
        label = traits.cause.split(" on ", 1)[0].removeprefix("the ")
        hint = f"This follows from {traits.cause}: stop that {label} and this stops with it. {hint}"
    return finding.told(finding.writers, summary, hint)


def _with_role(count: WriterCount, *, restores: bool) -> WriterCount:
    return WriterCount(
        count.writer,
        count.writes,
        users=count.users,
        fields=count.fields,
        reacts=count.reacts,
        restores=restores,
        named_from=count.named_from,
    )


def _evidence(finding: Finding, traits: Traits) -> hints.Evidence:
    counts = finding.writers
    reactors = [c for c in counts if c.reacts or (c.restores and finding.type is FindingType.HOT_LOOP)]
    drivers = [c for c in counts if c not in reactors] if reactors else []
    restoring = [c for c in counts if c.restores]
    pushing = [c for c in counts if not c.restores and c.writer.manager is not None] if restoring else []
    return hints.Evidence(
        type=finding.type,
        writers=frozenset(c.writer for c in counts),
        fields=frozenset(finding.fields),
        by_ownership=traits.by_ownership,
        timestamp_values=traits.timestamp_values,
        status_writes=traits.status_writes,
        evidence=traits.evidence,
        drivers=tuple(c.writer.display() for c in drivers),
        driver_fields=tuple(dict.fromkeys(f for c in drivers for f in c.fields)),
        reactors=tuple(c.writer.display() for c in reactors),
        restorers=tuple(c.writer for c in restoring),
        pushers=tuple(c.writer for c in pushing),
        controlled=bool(restoring) and traits.controller_writer in {c.writer for c in restoring},
        controller=traits.controller,
        kind=finding.object.kind or finding.object.resource,
        builtin_hot=finding.type is FindingType.HOT_LOOP and all(builtin(c.writer) for c in counts),
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def duration(seconds: float) -> str:
    """`45s`, `12m`, `1.5h`."""
    return _duration(seconds)


def _summary(finding: Finding, traits: Traits) -> str:
    counts = finding.writers
    names = [c.writer.display() for c in counts]
    who = hints.listed(names)
    fields = finding.fields
    what = _some(list(fields))
    span = _duration(max(finding.last_seen - finding.first_seen, 0.0))
    if finding.type is FindingType.FIGHT:
        return _fight_summary(finding, traits, what, span) + _notes(counts) + _ignored(finding, traits)
    reactors = [c for c in counts if c.reacts]
    restoring = [c for c in counts if c.restores]
    drivers = [c for c in counts if not c.reacts and not c.restores]
    rate, writes = finding.writes_per_minute, finding.writes
    if (reactors or restoring) and drivers:
        driving = hints.listed([c.writer.display() for c in drivers])
        changes = _some(list(dict.fromkeys(f for c in drivers for f in c.fields))) or "the object"
        back = (
            f", {hints.listed([c.writer.display() for c in restoring])} "
            f"{'sets' if len(restoring) == 1 else 'set'} it back"
            if restoring
            else ""
        )
        reacting = hints.listed([c.writer.display() for c in reactors])
        react = (
            f" and {reacting} {'reacts' if len(reactors) == 1 else 'react'} every time, rewriting the status"
            if reactors
            else " every time"
        )
        return (
            f"{driving} {'keeps' if len(drivers) == 1 else 'keep'} changing {changes}{back}{react}: "
            f"{rate:.0f} writes/min, {writes} writes in {span}"
        ) + _notes(counts)
    target = f" ({what})" if what else ""
    verb = "rewrites" if len(names) == 1 else "rewrite"
    return f"{who} {verb} the object{target} at {rate:.0f} writes/min: {writes} writes in {span}" + _notes(counts)


def _fight_summary(finding: Finding, traits: Traits, what: str, span: str) -> str:
    counts = finding.writers
    period = finding.flip_period
    every = f", one every {_duration(period)}" if period else ""
    tally = f"{finding.handovers} handovers in {span}{every}"
    restoring = [c.writer.display() for c in counts if c.restores]
    driving = [c.writer.display() for c in counts if not c.restores and c.writer.manager is not None]
    if restoring and driving:
        they = "it" if len(finding.fields) == 1 else "them"
        return (
            f"{hints.listed(driving)} {'keeps' if len(driving) == 1 else 'keep'} changing {what} and "
            f"{hints.listed(restoring)} {'sets' if len(restoring) == 1 else 'set'} {they} back every time: {tally}"
        )
    names = [c.writer.display() for c in counts]
    if len(names) == 1:
        return f"Writers all recorded as {names[0]} keep flipping {what} back and forth: {tally}"
    verb = "taking" if traits.by_ownership else "flipping"
    return f"{hints.listed(names)} keep {verb} {what} from each other: {tally}"


def _ignored(finding: Finding, traits: Traits) -> str:
    """Mark a fight over what a default ignore rule leaves out (see ignore.py)."""
    if not traits.ignored:
        return ""
    kind = finding.object.kind or finding.object.resource or "object"
    return (
        f"; reported although a default ignore rule leaves this out ({kind}: {traits.ignored}): distinct writers "
        "alternate, which is no churn of one"
    )


def _notes(counts: tuple[WriterCount, ...]) -> str:
    """Say what a writer's name cannot.

    A writer no managedFields entry names, one named from the audit events, a client without a field manager of its own.
    """
    notes = []
    if any(c.writer.manager is None for c in counts):
        notes.append(
            "(unattributed) is a writer no managedFields entry names: the API server records none for a write that "
            "only removes fields (a three-way merge patch that resets a field, a status rewritten whole); audit "
            "events name it"
        )
    audited = [c.writer.display() for c in counts if c.named_from == "audit"]
    if audited:
        notes.append(
            f"{hints.listed(audited)} {'is' if len(audited) == 1 else 'are'} named from the audit events (no "
            "managedFields entry names its writes here)"
        )
    anonymous_ = sorted({c.writer.manager or "" for c in counts if anonymous(c.writer)})
    if anonymous_:
        notes.append(
            f"{hints.listed(anonymous_)} is the User-Agent of a client that names no field manager of its own "
            "(`fieldManager`)"
        )
    return "".join(f"; {note}" for note in notes)


def _some(fields: list[str]) -> str:
    return ", ".join(fields[:3]) + (f" (+{len(fields) - 3} more)" if len(fields) > 3 else "")
