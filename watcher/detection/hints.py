"""Recognise common fight and hot-loop patterns and say how to stop them.

Each rule looks at what the engine knows of a finding (writers, contested fields, what the writes changed, who
maintains the object: `diagnosis.py`) and returns advice a platform engineer can act on; the first rule that matches
wins. A rule that names a cause (an autoscaler, a timestamp written on every reconcile, two controllers behind one
name) matches only when the writes show that cause; advice is never to change or stop Kubernetes' own controllers, but
what the writer that drives the fight does wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from watcher.model import Client, FindingType, Writer

_TIMESTAMP: Final = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?|\A\d{10}(\d{3})?(\.\d+)?\Z")
# kubectl's field managers: its commands name their own (`kubectl-edit`, ...), `kubectl scale` none (its User-Agent's).
_KUBECTL: Final = re.compile(r"\Akubectl(-[a-z-]+)?\Z")


@dataclass(init=False, unsafe_hash=True, slots=True)
class Evidence:
    type: Final[FindingType]
    writers: Final[frozenset[Writer]]
    fields: Final[frozenset[str]]
    by_ownership: Final[bool]  # handovers were seen in managedFields (distinct managers), not only as value flips
    timestamp_values: Final[bool]  # the hot writes changed values that look like timestamps
    status_writes: Final[bool]  # the hot writer writes status
    evidence: Final[str]  # a fight of one field manager: `audit` (several users behind it) or `flips` (see rules.py)
    drivers: Final[tuple[str, ...]]  # a hot loop's writers that drive it (changing what others react to)
    driver_fields: Final[tuple[str, ...]]  # the fields they change
    reactors: Final[tuple[str, ...]]  # a hot loop's writers that react, rewriting the status
    restorers: Final[tuple[Writer, ...]]  # a fight's writers that maintain the object (`diagnosis.restorers`)
    pushers: Final[tuple[Writer, ...]]  # the fight's other writers the watch names: they drive it
    controlled: Final[bool]  # the restorer is the object's controller (it set the controller reference)
    controller: Final[tuple[str, str] | None]  # (kind, name) of the object's controller
    kind: Final[str]  # the object's kind
    builtin_hot: Final[bool]  # a hot loop of Kubernetes' own components only

    def __init__(  # noqa: PLR0917 - a dataclass's signature: its fields, in order, positional or by name
        self,
        type: FindingType,
        writers: frozenset[Writer],
        fields: frozenset[str],
        by_ownership: bool,
        timestamp_values: bool = False,
        status_writes: bool = False,
        evidence: str = "",
        drivers: tuple[str, ...] = (),
        driver_fields: tuple[str, ...] = (),
        reactors: tuple[str, ...] = (),
        restorers: tuple[Writer, ...] = (),
        pushers: tuple[Writer, ...] = (),
        controlled: bool = False,
        controller: tuple[str, str] | None = None,
        kind: str = "",
        builtin_hot: bool = False,
    ) -> None:
        self.type = type
        self.writers = writers
        self.fields = fields
        self.by_ownership = by_ownership
        self.timestamp_values = timestamp_values
        self.status_writes = status_writes
        self.evidence = evidence
        self.drivers = drivers
        self.driver_fields = driver_fields
        self.reactors = reactors
        self.restorers = restorers
        self.pushers = pushers
        self.controlled = controlled
        self.controller = controller
        self.kind = kind
        self.builtin_hot = builtin_hot


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


def _names_of(writers: Iterable[Writer]) -> str:
    return listed([w.display() for w in writers])


def _controlled(e: Evidence) -> str:
    """Advise a client writing an object its controller derives from another: change the other."""
    if not e.controlled or e.controller is None or not e.pushers:
        return ""
    kind, name = e.controller
    what = ", ".join(sorted(e.fields))
    replicas = "spec.replicas" in e.fields
    instead = (
        f"Scale the {kind} instead (`kubectl scale {kind.lower()}/{name}`, or its autoscaler), not its {e.kind}"
        if replicas
        else f"Change {kind} {name} instead"
    )
    return (
        f"{_names_of(e.pushers)} {'changes' if len(e.pushers) == 1 else 'change'} {what} of {_a(e.kind or 'object')} "
        f"that {kind} {name} controls: its controller ({_names_of(e.restorers)}) makes the {e.kind or 'object'} "
        f"from the {kind} and sets it back every time. {instead}; and find what runs "
        f"{_names_of(e.pushers)} against the {e.kind or 'object'} (a script, a CronJob, a GitOps tool that also "
        "manages the object the controller makes) and stop it."
    )


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _builtin_status(e: Evidence) -> str:
    """Status edited by hand against the Kubernetes controller that computes it."""
    if not e.restorers or not all(_is_status(f) for f in e.fields):
        return ""
    return (
        f"{_names_of(e.pushers)} {'edits' if len(e.pushers) == 1 else 'edit'} the status of this "
        f"{e.kind or 'object'}, which {_names_of(e.restorers)} computes from the cluster's state and writes again on "
        "every sync. Status is a report, not a setting: do not edit it by hand (`kubectl edit/patch "
        "--subresource=status`, a status PUT); change what it reports on instead (the spec, the pods), or stop what "
        f"runs {_names_of(e.pushers)}."
    )


def _builtin_maintained(e: Evidence) -> str:
    """Advise on an object Kubernetes publishes or mirrors that something else manages too."""
    if not e.restorers or e.controlled:
        return ""
    what = ", ".join(sorted(e.fields))
    return (
        f"This {e.kind or 'object'} is maintained by Kubernetes itself ({_names_of(e.restorers)} creates it and "
        f"restores {what} whenever it differs), so every change {_names_of(e.pushers)} makes is undone. Do not manage "
        f"it: take it out of the manifests or the sync of {_names_of(e.pushers)} (a GitOps tool: exclude it), and "
        "change what Kubernetes makes it from instead."
    )


def _replicas(e: Evidence) -> str:
    """spec.replicas contested by a writer through the scale subresource: an autoscaler, or `kubectl scale`."""
    if "spec.replicas" not in e.fields:
        return ""
    scale = [w for w in e.writers if w.subresource == "scale" or w.manager is None]
    if not scale:
        return _replicas_applied(e)
    by_hand = [w for w in scale if w.manager is not None and _KUBECTL.match(w.manager)]
    if by_hand and len(by_hand) == len(scale):
        return (
            "spec.replicas is contested: it is scaled by hand with `kubectl scale` (the scale subresource) while a "
            "manifest applied again and again sets replicas too. Scale it in the manifest (or its values), or leave "
            "replicas out of the manifest if it is to be scaled by hand."
        )
    if any(w.subresource == "scale" and w.manager == "kube-controller-manager" for w in e.writers):
        who = "a HorizontalPodAutoscaler (kube-controller-manager writes through the scale subresource)"
    elif any(w.subresource == "scale" for w in e.writers):
        who = "an autoscaler writing through the scale subresource"
    else:
        who = "a writer that leaves no managedFields entry (the scale subresource before Kubernetes 1.22)"
    return (
        f"spec.replicas is contested: {who} against a manifest that also sets replicas. "
        "Let the autoscaler own it: drop `replicas` from the manifest/Helm values (or set it only on create), "
        "or make the GitOps tool ignore it (Argo CD `ignoreDifferences` on /spec/replicas, "
        "Flux: remove the field from the kustomization)."
    )


def _replicas_applied(e: Evidence) -> str:
    """spec.replicas set by a manifest applied again and again and by another writer's updates, none through scale."""
    applied = [w for w in e.writers if w.operation == "Apply"]
    others = [w for w in e.writers if w.operation != "Apply" and w.manager is not None]
    if not applied or not others:
        return ""
    return (
        f"spec.replicas is set both by a manifest {_names_of(applied)} applies again and again and by "
        f"{_names_of(others)}. If {_names_of(others)} scales the workload (an autoscaler, or a person), let it own "
        "replicas: drop `replicas` from the manifest/Helm values (or set it only on create), or make the GitOps tool "
        "ignore it (Argo CD `ignoreDifferences` on /spec/replicas, Flux: remove the field from the kustomization); "
        "otherwise decide which of them owns it."
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


def _is_status(path: str) -> bool:
    return path == "status" or path.startswith(("status.", "status["))


def _driven(e: Evidence) -> str:
    if not e.drivers or not e.reactors:
        return ""
    who = listed(list(e.drivers))
    fields = ", ".join(e.driver_fields[:3]) or "the object"
    restart = any("kubectl.kubernetes.io/restartedAt" in f for f in e.driver_fields)
    how = " (`kubectl rollout restart` sets restartedAt)" if restart else ""
    back = [w.display() for w in e.restorers]
    reacting = [r for r in e.reactors if r not in back]
    then = []
    if back:
        then.append(f"{listed(back)} {'sets' if len(back) == 1 else 'set'} it back")
    if reacting:
        then.append(
            f"{listed(reacting)} {'rolls' if len(reacting) == 1 else 'roll'} out and rewrite"
            f"{'s' if len(reacting) == 1 else ''} the status"
        )
    return (
        f"The loop is driven from outside the controller: {who} {'keeps' if len(e.drivers) == 1 else 'keep'} changing "
        f"{fields}{how}, and {' and '.join(then)} after every change. Find what runs {who} that often (a CronJob, a "
        "CI job, a script or an operator in a loop) and stop it, or make it write only when something really changed."
    )


def _builtin_hot(e: Evidence) -> str:
    """Kubernetes' own controller rewriting an object again and again, with nothing of the watch driving it."""
    if not e.builtin_hot:
        return ""
    who = listed(sorted({w.display() for w in e.writers}))
    return (
        f"{who} {'is' if len(e.writers) == 1 else 'are'} Kubernetes' own: it rewrites this object because something it "
        "reads keeps changing (the objects it owns, their pods, another controller's writes to them). Look at those "
        "objects' writers (their findings, or `kubectl get --watch` on them) for what keeps changing them."
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


_FIGHT_RULES: Final = (
    _controlled,
    _builtin_status,
    _builtin_maintained,
    _replicas,
    _ca_bundle,
    _shared_manager,
    _apply_force,
    _generic_fight,
)
_HOT_LOOP_RULES: Final = (_driven, _builtin_hot, _timestamps, _status, _generic_hot_loop)


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
            f"This is a fight: {', '.join(e.contested)} {verb} changing hands (see the fight on this object: who "
            f"drives it and how to stop it), and the conflicts of {losing} are its failed half; they stop with the "
            "fight."
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
