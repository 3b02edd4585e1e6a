"""Recognise common fight and hot-loop patterns and say how to stop them.

Each rule looks at what the engine knows of a finding (writers, contested fields, what the writes changed) and
returns advice a platform engineer can act on; the first rule that matches wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from watcher.model import FindingType, Writer

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
        return (
            f"The values flip back and forth but every write is recorded for the one field manager "
            f"{names[0]!r}: most often several controllers share that name (kubebuilder's default is "
            "`manager`). Give each controller a distinct field manager (controller-runtime `client.FieldOwner`, "
            "client-go `FieldManager` in Create/Update/Patch options) so fightwatch and server-side apply can "
            "tell them apart, then decide which of them owns the field. If only one controller runs under that "
            "name, it is undoing its own writes."
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
_HOT_LOOP_RULES: Final = (_timestamps, _status, _generic_hot_loop)
