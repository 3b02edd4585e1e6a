"""Report the replay benchmark: its results (what scripts/bench_replay.py writes) as a Markdown table."""

from __future__ import annotations

from typing import Any

# One line of the table: what was measured, its result, notes.
Row = tuple[str, str, str]


def markdown(results: dict[str, Any]) -> str:
    """Render the replay benchmark's results as a Markdown table, with the machine, misses and profile below."""
    found = results["detection"]
    rows = [*_speed_rows(results), *_size_rows(results), *_recall_rows(found)]
    lines = ["| Measurement | Result | Notes |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines += ["", _machine(results), *_misses(found), *_fight_flavors(found), *_profile(results.get("profile"))]
    return "\n".join(lines)


def _ok(good: bool) -> str:
    return "met" if good else "**NOT met**"


def _speed_rows(results: dict[str, Any]) -> list[Row]:
    """The full replay's rate, against the JSON decode floor and against kubernetes-asyncio's models."""
    full, floor, k8s = results["replay"], results["decode"], results["k8s_models"]
    full_rate, floor_rate = full["events_per_s"], floor["events_per_s"]
    ratio = full_rate / floor_rate
    turns = ", ".join(f"{100 * r:.1f}%" for r in results.get("ratio_by_turn", ()))
    median = f" (median {100 * results['ratio_median']:.1f}%)" if "ratio_median" in results else ""
    return [
        (
            "Full replay (read_capture + Engine.process)",
            f"{full_rate:,.0f} ev/s ({full['best_s']:.2f} s)",
            f">= 50,000 ev/s: {_ok(full_rate >= 50_000)}; runs: " + ", ".join(f"{t:.2f} s" for t in full["runs_s"]),
        ),
        (
            "JSON decode floor (readline + orjson.loads)",
            f"{floor_rate:,.0f} ev/s ({floor['best_s']:.2f} s)",
            "runs: " + ", ".join(f"{t:.2f} s" for t in floor["runs_s"]),
        ),
        (
            "Full replay / decode floor",
            f"{100 * ratio:.1f}%",
            f">= 40%: {_ok(ratio >= 0.40)}; runs in turns, each turn's: {turns}{median}",
        ),
        (
            "kubernetes-asyncio models (orjson.loads + deserialize)",
            f"{k8s['events_per_s']:,.0f} ev/s",
            f"measured on {k8s['sampled_events']:,} events (1 in {k8s['stride']} of the stream)",
        ),
        ("Full replay / k8s models", f"{full_rate / k8s['events_per_s']:.1f}x", ""),
    ]


def _size_rows(results: dict[str, Any]) -> list[Row]:
    """The engine's memory per tracked object, and the size of the stream replayed."""
    mem, stream = results["memory"], results["stream"]
    kinds = ", ".join(f"{k} {v['mean_bytes']:,.0f} B" for k, v in stream.get("by_kind", {}).items())
    return [
        (
            "Engine memory per tracked object",
            f"{mem['bytes_per_object']:,.0f} B",
            f"<= 1 KiB: {_ok(mem['bytes_per_object'] <= 1024)}; tracemalloc: {mem['retained_bytes'] / 1e6:.1f} MB "
            f"retained / {mem['tracked_objects']:,} objects",
        ),
        (
            "Stream",
            f"{stream['events']:,} events, {stream['objects']:,} objects, {stream['bytes'] / 1e6:,.0f} MB",
            ", ".join(f"{k} {v:,}" for k, v in stream.get("by_type", {}).items()),
        ),
        ("Mean event size", f"{stream['mean_bytes']:,.0f} B", kinds),
    ]


def _recall_rows(found: dict[str, Any]) -> list[Row]:
    """How many of the injected fights and hot loops detection found, and how many it found that were not."""

    def recall(kind: str) -> str:
        r = found[kind]
        pct = f" ({100 * r['recall']:.1f}%)" if r["recall"] is not None else ""
        return f"{r['found']}/{r['injected']}{pct}"

    return [
        ("Fights found (recall)", recall("fight"), f"false positives: {found['fight']['false_positives']}"),
        ("Hot loops found (recall)", recall("hot_loop"), f"false positives: {found['hot_loop']['false_positives']}"),
    ]


def _machine(results: dict[str, Any]) -> str:
    """The machine and interpreter the benchmark ran on, and how it ran."""
    m = results["machine"]
    return (
        f"Machine: {m['cpu']}, {m['cores']} cores (pinned to {m['pinned_to']}), {m['implementation']} "
        f"{m['python']} ({m['executable']}, libpython {m['libpython'] or 'linked in'}, configured with "
        f"{' '.join(m['configure_flags']) or 'no optimization flags recorded'}), orjson {m['orjson']}, "
        f"kubernetes-asyncio {m['kubernetes_asyncio']}. "
        f"Best of {results['runs']} runs; templates: {results['stream'].get('templates', {})}."
    )


def _misses(found: dict[str, Any]) -> list[str]:
    """The examples of injected findings missed, and of findings reported that were not injected."""
    lines = []
    for kind in ("fight", "hot_loop"):
        r = found[kind]
        if r["missed_examples"]:
            lines.append(f"- missed {kind} (uids): {', '.join(r['missed_examples'])}")
        lines += [
            f"- false positive {kind} ({r['false_positives_by_role']}): {e}" for e in r["false_positive_examples"]
        ]
    return lines


def _fight_flavors(found: dict[str, Any]) -> list[str]:
    """Recall by the flavor of injected fight, as a table of its own (when the results have it)."""
    if not found.get("fight_recall_by_flavor"):
        return []
    header = ["", "| Injected fight | Found |", "|---|---|"]
    return header + [f"| {flavor} | {hits} |" for flavor, hits in found["fight_recall_by_flavor"].items()]


def _profile(profile: list[dict[str, Any]] | None) -> list[str]:
    """The profile of the full replay, as a table of its own (when the results have one)."""
    if not profile:
        return []
    header = ["", "| tottime s | cumtime s | calls | function |", "|---:|---:|---:|---|"]
    return header + [
        f"| {r['tottime']:.3f} | {r['cumtime']:.3f} | {r['calls']:,} | `{r['function']}` |" for r in profile
    ]
