"""Recognise common fight and hot-loop patterns and say how to stop them.

Each rule looks at what the engine knows of a finding (writers, contested fields, what the writes changed) and
returns advice a platform engineer can act on; the first rule that matches wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from watcher.model import Client, FindingType, Writer

_TIMESTAMP: Final = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?|\A\d{10}(\d{3})?(\.\d+)?\Z")
_AUTOSCALERS: Final = ("horizontal-pod-autoscaler", "kube-controller-manager", "keda", "autoscaler", "vpa")


@dataclass(frozen=True, slots=True)
class Evidence:
    type: FindingType
    writers: frozenset[Writer]
    fields: frozenset[str]
    by_ownership: bool  # handovers were seen in managedFields (distinct managers), not only as value flips
    timestamp_values: bool = False  # the hot writes changed values that look like timestamps
    status_writes: bool = False  # the hot writer writes status
    evidence: str = ""  # a fight of one field manager: `audit` (several users behind it) or `flips` (see rules.py)
    drivers: tuple[str, ...] = ()  # a hot loop's writers that drive it (changing what others react to)
    driver_fields: tuple[str, ...] = ()  # the fields they change
    reactors: tuple[str, ...] = ()  # a hot loop's writers that react, rewriting the status


@dataclass(frozen=True, slots=True)
class RequestEvidence:
    """What the request engine knows of a finding over API requests (audit events)."""

    type: FindingType
    clients: tuple[Client, ...]
    fields: tuple[str, ...]  # apply: the conflicting fields; storm: the fields a fight contests (from the watch)
    owners: tuple[str, ...] = ()  # apply: the managers the API server named as the fields' owners
    contested: tuple[str, ...] | None = None  # from the watch: a fight's fields, () none, None: not joined
    updates: bool = False  # conflicting writes were full-object updates (PUT)
    stale: bool = False  # a client kept sending the same stale resourceVersion


def looks_like_timestamp(value: str) -> bool:
    return bool(_TIMESTAMP.search(value))


def hint(evidence: Evidence) -> str:
    rules = _FIGHT_RULES if evidence.type is FindingType.FIGHT else _HOT_LOOP_RULES
    for rule in rules:
        found = rule(evidence)
        if found:
            return found
    return ""


def _names(writers: Iterable[Writer]) -> list[str]:
    return sorted({w.manager for w in writers if w.manager is not None})


def _replicas(e: Evidence) -> str:
    if "spec.replicas" not in e.fields:
        return ""
    scale = [w for w in e.writers if w.subresource == "scale" or w.manager is None]
    if any(w.subresource == "scale" and w.manager == "kube-controller-manager" for w in e.writers):
        who = "a HorizontalPodAutoscaler (kube-controller-manager writes through the scale subresource)"
    else:
        who = "an autoscaler writing through the scale subresource" if scale else "an autoscaler"
    return (
        f"spec.replicas is contested, typically {who} against a manifest that also sets replicas. "
        "Let the autoscaler own it: drop `replicas` from the manifest/Helm values (or set it only on create), "
        "or make the GitOps tool ignore it (Argo CD `ignoreDifferences` on /spec/replicas, "
        "Flux: remove the field from the kustomization)."
    )


def _ca_bundle(e: Evidence) -> str:
    if not any(f.endswith("caBundle") for f in e.fields):
        return ""
    return (
        "caBundle is contested: a CA injector (e.g. cert-manager cainjector) and the chart/manifest both set it. "
        "Let the injector own it: remove caBundle from the chart (leave it empty/absent), or make the GitOps "
        "tool ignore the field (Argo CD `ignoreDifferences` with jqPathExpressions on the caBundle)."
    )


def _shared_manager(e: Evidence) -> str:
    names = _names(e.writers)
    if e.by_ownership or len(names) > 1:
        return ""
    unattributed = any(w.manager is None for w in e.writers)
    if names and not unattributed:
        if e.evidence == "audit":
            why = f"the audit events show several users writing the object as field manager {names[0]!r}"
        else:
            why = (
                f"every write is recorded for the one field manager {names[0]!r}, yet the values went back and forth "
                "more often than one controller's own state changes explain"
            )
        return (
            f"Two writers stand behind one name: {why}. Most often several controllers share that name "
            "(kubebuilder's default is `manager`). Give each controller a distinct field manager (controller-runtime "
            "`client.FieldOwner`, client-go `FieldManager` in Create/Update/Patch options) so fightwatch and "
            "server-side apply can tell them apart, then decide which of them owns the field. If only one "
            "controller runs under that name, it is undoing its own writes."
        )
    return (
        "Some writes to these fields carry no managedFields entry (writes through the scale subresource on "
        "servers before 1.22, or managedFields reset by a client), so the other writer cannot be named. "
        "Look for a controller or autoscaler writing these fields, and make one side stop setting them."
    )


def _apply_force(e: Evidence) -> str:
    apply = _names(w for w in e.writers if w.operation == "Apply")
    others = _names(w for w in e.writers if w.operation != "Apply")
    if not apply or not others:
        return ""
    fields = ", ".join(sorted(e.fields))
    return (
        f"{' and '.join(apply)} {'re-applies' if len(apply) == 1 else 're-apply'} {fields} with server-side apply "
        f"(force) while {' and '.join(others)} {'changes' if len(others) == 1 else 'change'} it with plain updates, "
        "so each undoes the other. Pick one owner: remove the "
        "field from the applied manifest, or stop the other controller from managing it."
    )


def _generic_fight(e: Evidence) -> str:
    fields = ", ".join(sorted(e.fields))
    return (
        f"These writers want different values for {fields}. Decide which one owns each field, and remove the "
        "field from the others' desired state (or configure them to ignore it)."
    )


def _driven(e: Evidence) -> str:
    if not e.drivers or not e.reactors:
        return ""
    who = listed(list(e.drivers))
    fields = ", ".join(e.driver_fields[:3]) or "the object"
    restart = any("kubectl.kubernetes.io/restartedAt" in f for f in e.driver_fields)
    how = " (`kubectl rollout restart` sets restartedAt)" if restart else ""
    return (
        f"The loop is driven from outside the controller: {who} keeps changing {fields}{how}, and "
        f"{listed(list(e.reactors))} rolls out and rewrites the status after every change. Find what runs {who} that "
        "often (a CronJob, a CI job, a script or an operator in a loop) and stop it, or make it write only when "
        "something really changed."
    )


def _timestamps(e: Evidence) -> str:
    if not e.timestamp_values:
        return ""
    return (
        "A timestamp is written into the object on every reconcile, which triggers the next reconcile. "
        "Don't persist time.Now() (e.g. a last-reconciled annotation); write only when the desired state "
        "changed, and use RequeueAfter for periodic work."
    )


def _status(e: Evidence) -> str:
    if not e.status_writes:
        return ""
    return (
        "Status is rewritten on every reconcile. Compare with the current status and skip the update when "
        "nothing changed (no lastUpdateTime/heartbeat bump without a real change), and make sure the "
        "controller does not requeue on its own status updates (a GenerationChangedPredicate helps)."
    )


def _generic_hot_loop(_e: Evidence) -> str:
    return (
        "This writer rewrites the object far more often than a controller should. Check its reconcile loop for "
        "non-deterministic output (timestamps, random or unordered values) and for reacting to its own writes."
    )


_FIGHT_RULES: Final = (_replicas, _ca_bundle, _shared_manager, _apply_force, _generic_fight)
_HOT_LOOP_RULES: Final = (_driven, _timestamps, _status, _generic_hot_loop)


def listed(names: list[str]) -> str:
    """List names as `a`, `a and b`, `a, b and c`; `?` for none."""
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else (names[0] if names else "?")


def clients_text(clients: Iterable[Client]) -> str:
    return listed([c.display() for c in clients])


def request_hint(e: RequestEvidence) -> str:
    """How to stop a conflict storm, a stuck applier or a no-op write loop."""
    if e.type is FindingType.APPLY_CONFLICT:
        return _apply_hint(e)
    if e.type is FindingType.NOOP_WRITES:
        return (
            f"{clients_text(e.clients)} writes the object without changing anything; the API server persists "
            "nothing, but every write still costs an admission, a storage round trip and the client's own "
            "reconcile. Compare the desired object with the current one and skip the write when they are equal "
            "(equality.Semantic.DeepEqual; controller-runtime's CreateOrPatch does), and do not write on every "
            "periodic resync."
        )
    return _storm_hint(e)


def _storm_hint(e: RequestEvidence) -> str:
    losing = clients_text(c for c in e.clients if c.conflicts)
    if e.contested:
        verb = "keeps" if len(e.contested) == 1 else "keep"
        return (
            f"This is a fight: {', '.join(e.contested)} {verb} changing hands (see the fight on this object), and the "
            f"conflicts of {losing} are its failed half. Decide which writer owns these fields and remove them from "
            "the others' desired state; the conflicts stop with the fight."
        )
    advice = []
    if e.stale:
        advice.append(
            f"{losing} retr{'y' if ' and ' in losing else 'ies'} with the same stale resourceVersion again and "
            "again: its cache does not catch up, or it retries without re-reading. Re-read before retrying "
            "(client-go retry.RetryOnConflict around a fresh Get) and check that its informer is synced."
        )
    if e.updates:
        advice.append(
            "The failing writes replace the whole object (update) with a copy read earlier: patch only the fields "
            "each client owns (a merge or JSON patch), or use server-side apply, which does not conflict on the "
            "resourceVersion."
        )
    if not advice:
        advice.append(
            "Re-read the object before retrying a conflicting write, and patch only the fields each client owns "
            "instead of writing whole objects read earlier."
        )
    if e.contested is not None:
        advice.insert(
            0, "The watch sees no field changing hands: this is read-modify-write contention over different fields."
        )
    else:
        advice.append(
            "Whether it is a fight over a field shows in the watch: replay a capture with --audit, or run the "
            "watcher with the audit webhook."
        )
    return " ".join(advice)


def _apply_hint(e: RequestEvidence) -> str:
    applier = clients_text(e.clients)
    if e.owners and e.fields:
        owners = " and ".join(f"{o!r}" for o in e.owners)
        fields = ", ".join(e.fields)
        return (
            f"{applier} applies without force, and {owners} own{'s' if len(e.owners) == 1 else ''} {fields}, so every "
            "apply of it is rejected whole. Decide the owner: if the applier should own the fields, apply once with "
            "--force-conflicts (force=true) after the other manager stops setting them; otherwise drop them from "
            "the applied manifest."
        )
    return (
        f"{applier} applies without force and is rejected every time. This audit level does not record which "
        "manager owns the conflicting fields: log this resource at the Request level, or run the same apply with "
        "--server-side --dry-run=server to see them; then drop those fields from the manifest or take them over "
        "once with --force-conflicts."
    )
