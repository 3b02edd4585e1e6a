"""Check what the engine found against what the synthetic cluster injected (its truth).

The recall of the injected fights and hot loops, and the findings on objects that were not made to misbehave.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.synthetic.truth import Truth
from watcher.model import Finding, FindingType

NOT_CHECKED: dict[str, Any] = {
    "injected": 0,
    "found": 0,
    "recall": None,
    "missed_examples": [],
    "false_positives": 0,
    "false_positives_by_role": {},
    "false_positive_examples": [],
}


def check(active: list[Finding], resolved: list[Finding], truth: Truth) -> dict[str, Any]:
    """Check the findings against the truth: recall, and findings on objects not made to misbehave.

    The recall of the injected fights and hot loops; the false positives, by the role of their objects.
    """
    everything = active + resolved
    found: dict[FindingType, dict[str, Finding]] = {FindingType.FIGHT: {}, FindingType.HOT_LOOP: {}}
    for finding in everything:
        found[finding.type].setdefault(finding.object.uid, finding)
    role_of = {uid: role for role, uids in truth.roles.items() for uid in uids}
    out: dict[str, Any] = {"findings": len(everything), "resolved_buffer_full": len(resolved) >= 10_000}
    flavors: dict[str, list[int]] = {}
    for uid, flavor in sorted(truth.flavors.items()):
        counts = flavors.setdefault(flavor, [0, 0])
        counts[0] += uid in found[FindingType.FIGHT]
        counts[1] += 1
    out["fight_recall_by_flavor"] = {flavor: f"{hit}/{total}" for flavor, (hit, total) in sorted(flavors.items())}
    for kind, role in ((FindingType.FIGHT, "fight"), (FindingType.HOT_LOOP, "hot")):
        injected = set(truth.roles.get(role, ()))
        hits = injected & set(found[kind])
        misses = sorted(injected - hits)
        extra = sorted(set(found[kind]) - injected)
        out[kind.value] = {
            "injected": len(injected),
            "found": len(hits),
            "recall": len(hits) / len(injected) if injected else None,
            "missed_examples": misses[:5],
            "false_positives": len(extra),
            "false_positives_by_role": dict(Counter(role_of.get(uid, "?") for uid in extra)),
            "false_positive_examples": [
                f"{found[kind][uid].object.display()}: {found[kind][uid].summary}" for uid in extra[:5]
            ],
        }
    return out
