"""Incidents: one root cause on many objects.

Findings of the same type, by the same writers (field managers, and the users behind them where audit events tell), over
the same fields are one incident, whatever the objects are called and wherever they are: an autoscaler and a GitOps tool
over `spec.replicas` of forty Deployments is one incident of forty findings, not forty.

Field paths are compared with the parts that follow the object normalised away: a list key or map key that holds
the object's name (`spec.template.spec.containers[name=web].image` of the Deployment `web`) reads `*` there.

An incident's id is a stable hash of that pattern: the same on every replica, in every replay, whichever object
was seen first, and the same when the pattern comes back after it resolved. Grouping is a pure function of the
findings at hand (`group`), so an incident opens, grows, shrinks and resolves as its findings do, and a caller who
may see only some of the findings sees the incident made of those.

A finding that follows from another (`Finding.related`: a cascade, such as a ReplicaSet churned because its
Deployment is fought over) is no root cause of its own: while the finding it follows from is among those at hand,
it is listed under that finding's incident (`Incident.consequences`) and takes its id.

`IncidentBook` follows finding changes and tells incident changes, for delivery per incident; `IncidentIndex` tells
the incident a finding is part of, for the Events sink.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Final

from watcher.detection.hints import listed
from watcher.model import (
    EXAMPLES,
    ChangeKind,
    Finding,
    FindingChange,
    FindingState,
    FindingType,
    Incident,
    IncidentChange,
    Writer,
    WriterCount,
)

_PARTS: Final = re.compile(r"\[[^\]]*\]|[^.\[]+")
_MIN_NAME: Final = 3  # shorter names would match inside unrelated keys

Pattern = tuple[str, tuple[str, ...], tuple[str, ...]]  # type, writers (with users), normalised fields


def normalised(path: str, name: str) -> str:
    """Return a field path with each key that holds the object's name read as `*`.

    `containers[name=web-app].image` of `web-app` -> `containers[name=*].image`; `data[web-app.conf]` -> `data[*]`.
    """
    if len(name) < _MIN_NAME or name not in path:
        return path
    parts = []
    for part in _PARTS.findall(path):
        if name not in part:
            parts.append(part)
        elif part.startswith("[") and "=" in part:
            parts.append(part.split("=", 1)[0] + "=*]")
        else:
            parts.append("[*]" if part.startswith("[") else "*")
    return ".".join(parts).replace(".[", "[")


def _writer(count: WriterCount) -> str:
    users = f" as {', '.join(count.users)}" if count.users else ""
    return count.writer.display() + users


def pattern(finding: Finding) -> Pattern:
    """Return what makes findings one incident.

    Type, writers (and the users behind them), normalised fields.
    """
    writers = tuple(sorted({_writer(c) for c in finding.writers}))
    fields = tuple(sorted({normalised(p, finding.object.name) for p in finding.fields}))
    return (finding.type.value, writers, fields)


def incident_id(finding: Finding) -> str:
    """Return the id of a finding's incident (see the module docstring)."""
    kind, writers, fields = pattern(finding)
    text = "\n".join((kind, "\x1f".join(writers), "\x1f".join(fields)))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def group(findings: Iterable[Finding]) -> list[Incident]:
    """Group these findings into incidents, most severe first.

    Active before resolved, then those on more objects, then in the order of their most severe findings (so incidents of
    one finding each keep the findings' order). A finding that follows from another at hand is a consequence in that
    one's incident.
    """
    findings = list(findings)
    roots = _roots(findings)
    by_id: dict[str, list[Finding]] = {}
    following: dict[str, list[str]] = {}
    for finding in findings:
        root = roots.get(finding.id)
        if root is None:
            by_id.setdefault(incident_id(finding), []).append(finding)
        else:
            following.setdefault(incident_id(root), []).append(finding.id)
    made = [
        (_incident(key, members, following.get(key, ())), min(map(severity, members))) for key, members in by_id.items()
    ]
    made.sort(key=lambda pair: (pair[0].state is not FindingState.ACTIVE, -pair[0].objects, pair[1]))
    return [incident for incident, _ in made]


def assign(findings: Iterable[Finding]) -> dict[str, str]:
    """Each finding's incident (by finding id): its own pattern's, or, for a consequence, its root cause's."""
    findings = list(findings)
    roots = _roots(findings)
    return {f.id: incident_id(roots.get(f.id, f)) for f in findings}


def _roots(findings: Sequence[Finding]) -> dict[str, Finding]:
    """Return the root cause of each finding that follows from another at hand (by id).

    Followed up the chain (a Pod's finding under its ReplicaSet's under its Deployment's).
    """
    by_id = {f.id: f for f in findings}
    roots: dict[str, Finding] = {}
    for finding in findings:
        root, seen = finding, {finding.id}
        while root.related is not None and root.related in by_id and root.related not in seen:
            root = by_id[root.related]
            seen.add(root.id)
        if root is not finding:
            roots[finding.id] = root
    return roots


def severity(finding: Finding) -> tuple[bool, float, int, str]:
    """Most severe first: active before resolved, then by write rate, then by handovers."""
    return (
        finding.state is not FindingState.ACTIVE,
        -finding.writes_per_minute,
        -finding.handovers,
        finding.object.display(),
    )


def _incident(key: str, members: Sequence[Finding], consequences: Sequence[str] = ()) -> Incident:
    first = members[0]
    active = [f for f in members if f.state is FindingState.ACTIVE]
    ordered = sorted(members, key=severity)
    writes: dict[Writer, int] = {}
    users: dict[Writer, set[str]] = {}
    restoring: set[Writer] = set()
    for finding in members:
        for count in finding.writers:
            writes[count.writer] = writes.get(count.writer, 0) + count.writes
            users.setdefault(count.writer, set()).update(count.users)
            if count.restores:
                restoring.add(count.writer)
    writers = tuple(
        WriterCount(w, n, tuple(sorted(users[w])), restores=w in restoring)
        for w, n in sorted(writes.items(), key=lambda kv: (kv[0] in restoring, -kv[1]))
    )
    objects = {(f.object.group, f.object.kind or f.object.resource, f.object.namespace, f.object.name) for f in members}
    namespaces = tuple(sorted({f.object.namespace or "" for f in members}))
    kinds = tuple(sorted({f.object.kind or f.object.resource for f in members}))
    resolved = None if active else max(f.resolved_at or f.last_seen for f in members)
    incident = Incident(
        id=key,
        type=first.type,
        state=FindingState.ACTIVE if active else FindingState.RESOLVED,
        writers=writers,
        fields=pattern(first)[2],
        findings=tuple(f.id for f in ordered),
        objects=len(objects),
        examples=tuple(f.object for f in ordered[:EXAMPLES]),
        namespaces=namespaces,
        kinds=kinds,
        writes_per_minute=round(sum(f.writes_per_minute for f in active or members), 2),
        first_seen=min(f.first_seen for f in members),
        detected_at=min(f.detected_at for f in members),
        last_seen=max(f.last_seen for f in members),
        resolved_at=resolved,
        summary="",
        hint=ordered[0].hint,
        consequences=tuple(consequences),
    )
    return _with_summary(incident)


def _with_summary(incident: Incident) -> Incident:
    """`hpa-controller (Update) and argocd (Apply) fight over spec.replicas on 40 Deployments in 12 namespaces`."""
    who = listed([c.writer.display() for c in incident.writers])
    what = ", ".join(incident.fields[:3]) + (f" (+{len(incident.fields) - 3} more)" if len(incident.fields) > 3 else "")
    kinds = "/".join(incident.kinds) or "object"
    count = f"{incident.objects} {kinds}{'s' * (incident.objects != 1)}"
    spaces = [n for n in incident.namespaces if n]
    where = f" in {len(spaces)} namespaces" if len(spaces) > 1 else f" in {spaces[0]}" if spaces else ""
    if incident.objects == 1 and incident.examples:  # (as its one finding is told: by the object's name)
        count, where = incident.examples[0].display(), ""
    restoring = [c.writer.display() for c in incident.writers if c.restores]
    driving = [c.writer.display() for c in incident.writers if not c.restores and c.writer.manager is not None]
    if incident.type is FindingType.FIGHT and restoring and driving:
        text = (
            f"{listed(driving)} {'keeps' if len(driving) == 1 else 'keep'} changing {what or 'fields'} on "
            f"{count}{where}, and {listed(restoring)} {'sets' if len(restoring) == 1 else 'set'} it back every time"
        )
    elif incident.type is FindingType.FIGHT:
        text = f"{who} fight over {what or 'fields'} on {count}{where}"
    elif incident.type is FindingType.HOT_LOOP:
        text = f"{who} rewrite{'s' * (len(incident.writers) == 1)} {count}{where} in a hot loop"
    else:
        text = f"{incident.type.counted(incident.objects).split(' ', 1)[1]} by {who} on {count}{where}"
    return replace(incident, summary=text)


class IncidentBook:
    """The active incidents of the findings delivered, changed by finding changes: what delivery per incident tells.

    `apply` takes a batch of finding changes (those of one event, or a new leader's catch-up) and returns one change
    per incident they touched: opened when its first finding opens, updated when it grows, shrinks or one of its
    findings changes, resolved when its last finding resolves (or moves to another incident: its writers changed),
    with every finding it had since it opened (each as it left).
    A catch-up tells each incident once, as its findings are told (opened when one of them is new since).
    Consequences are not taken (delivery leaves them out: their root cause is told).
    """

    def __init__(self) -> None:
        self._members: dict[str, dict[str, Finding]] = {}  # incident id -> finding id -> its latest snapshot
        self._of: dict[str, str] = {}  # finding id -> incident id
        self._left: dict[str, dict[str, Finding]] = {}  # active incident id -> its findings gone since it opened

    def reset(self) -> None:
        """Forget every incident (a new leader's catch-up tells them again)."""
        self._members.clear()
        self._of.clear()
        self._left.clear()

    def active(self) -> list[Incident]:
        return [_incident(key, list(members.values())) for key, members in self._members.items()]

    def apply(self, changes: Iterable[FindingChange]) -> list[IncidentChange]:
        before: dict[str, bool] = {}  # touched incidents -> whether they were active before the batch
        told: dict[str, list[FindingChange]] = {}
        for change in changes:
            finding = change.finding
            old = self._of.get(finding.id)
            done = change.kind is ChangeKind.RESOLVED or finding.state is FindingState.RESOLVED
            new = None if done else incident_id(finding)
            keys = [old if old is not None else incident_id(finding)]
            if new is not None and new != keys[0]:
                keys.append(new)
            for key in keys:
                before.setdefault(key, key in self._members)
                told.setdefault(key, []).append(change)
            if old is not None and old != new:  # resolved, or moved to another incident
                members = self._members[old]
                del members[finding.id]
                del self._of[finding.id]
                if not members:
                    del self._members[old]
                self._left.setdefault(old, {})[finding.id] = finding
            elif done:  # (a catch-up's resolution of a finding not told before)
                self._left.setdefault(keys[0], {})[finding.id] = finding
            if new is not None:
                self._members.setdefault(new, {})[finding.id] = finding
                self._of[finding.id] = new
                if (gone := self._left.get(new)) is not None:
                    gone.pop(finding.id, None)
        out = []
        for key, was_active in before.items():
            current = self._members.get(key)
            catch_up = all(c.catch_up for c in told[key])
            if current:
                now = sorted(current.values(), key=severity)
                opened = not was_active and any(c.kind is ChangeKind.OPENED for c in told[key])
                kind = ChangeKind.OPENED if opened else ChangeKind.UPDATED
                out.append(IncidentChange(kind, _incident(key, now), tuple(now), catch_up))
            elif gone := self._left.pop(key, None):  # (its last finding left in this batch)
                last = sorted(gone.values(), key=severity)
                ended = _incident(key, last)
                if ended.state is FindingState.ACTIVE:  # its findings moved to other incidents
                    at = max(f.last_seen for f in last)
                    ended = replace(ended, state=FindingState.RESOLVED, resolved_at=at)
                out.append(IncidentChange(ChangeKind.RESOLVED, ended, tuple(last), catch_up))
        return out


__all__ = ["IncidentBook", "Pattern", "assign", "group", "incident_id", "normalised", "pattern", "severity"]


class IncidentIndex:
    """The incident each active finding is part of, where it has others too; grouped once a second at most.

    A burst of findings opening at once is grouped once, not once per finding.
    """

    def __init__(self, active: Callable[[], list[Finding]]) -> None:
        """Group the findings `active` returns."""
        self._active = active
        self._second = -1
        self._by_finding: dict[str, Incident] = {}

    def of(self, finding: Finding, now: float) -> Incident | None:
        """Return the incident of `finding` among the active findings as of `now` (to the second), if it has others."""
        second = int(now)
        if second != self._second:
            shared = (i for i in group(self._active()) if len(i.findings) > 1)
            self._second, self._by_finding = second, {f: i for i in shared for f in i.members}
        return self._by_finding.get(finding.id)
