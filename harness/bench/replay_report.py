"""Report the replay benchmark: its results (what scripts/bench_replay.py writes) as a Markdown table."""

from __future__ import annotations

from typing import Any


def markdown(results: dict[str, Any]) -> str:
    """Render the replay benchmark's results as a Markdown table, with the machine, misses and profile below."""
    full, floor, k8s, mem = results["replay"], results["decode"], results["k8s_models"], results["memory"]
    stream, found = results["stream"], results["detection"]
    ratio = full["events_per_s"] / floor["events_per_s"]

    def ok(good: bool) -> str:
        return "met" if good else "**NOT met**"

    def recall(kind: str) -> str:
        r = found[kind]
        pct = f" ({100 * r['recall']:.1f}%)" if r["recall"] is not None else ""
        return f"{r['found']}/{r['injected']}{pct}"

    kinds = ", ".join(f"{k} {v['mean_bytes']:,.0f} B" for k, v in stream.get("by_kind", {}).items())
    full_rate, floor_rate = full["events_per_s"], floor["events_per_s"]
    rows = [
        (
            "Full replay (read_capture + Engine.process)",
            f"{full_rate:,.0f} ev/s ({full['best_s']:.2f} s)",
            f">= 50,000 ev/s: {ok(full_rate >= 50_000)}; runs: " + ", ".join(f"{t:.2f} s" for t in full["runs_s"]),
        ),
        (
            "JSON decode floor (readline + orjson.loads)",
            f"{floor_rate:,.0f} ev/s ({floor['best_s']:.2f} s)",
            "runs: " + ", ".join(f"{t:.2f} s" for t in floor["runs_s"]),
        ),
        (
            "Full replay / decode floor",
            f"{100 * ratio:.1f}%",
            f">= 40%: {ok(ratio >= 0.40)}; runs in turns, each turn's: "
            + ", ".join(f"{100 * r:.1f}%" for r in results.get("ratio_by_turn", ()))
            + (f" (median {100 * results['ratio_median']:.1f}%)" if "ratio_median" in results else ""),
        ),
        (
            "kubernetes-asyncio models (orjson.loads + deserialize)",
            f"{k8s['events_per_s']:,.0f} ev/s",
            f"measured on {k8s['sampled_events']:,} events (1 in {k8s['stride']} of the stream)",
        ),
        ("Full replay / k8s models", f"{full_rate / k8s['events_per_s']:.1f}x", ""),
        (
            "Engine memory per tracked object",
            f"{mem['bytes_per_object']:,.0f} B",
            f"<= 1 KiB: {ok(mem['bytes_per_object'] <= 1024)}; tracemalloc: {mem['retained_bytes'] / 1e6:.1f} MB "
            f"retained / {mem['tracked_objects']:,} objects",
        ),
        (
            "Stream",
            f"{stream['events']:,} events, {stream['objects']:,} objects, {stream['bytes'] / 1e6:,.0f} MB",
            ", ".join(f"{k} {v:,}" for k, v in stream.get("by_type", {}).items()),
        ),
        ("Mean event size", f"{stream['mean_bytes']:,.0f} B", kinds),
        ("Fights found (recall)", recall("fight"), f"false positives: {found['fight']['false_positives']}"),
        ("Hot loops found (recall)", recall("hot_loop"), f"false positives: {found['hot_loop']['false_positives']}"),
    ]
    lines = ["| Measurement | Result | Notes |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    m = results["machine"]
    lines.append("")
    lines.append(
        f"Machine: {m['cpu']}, {m['cores']} cores (pinned to {m['pinned_to']}), {m['implementation']} "
        f"{m['python']} ({m['executable']}, libpython {m['libpython'] or 'linked in'}, configured with "
        f"{' '.join(m['configure_flags']) or 'no optimization flags recorded'}), orjson {m['orjson']}, "
        f"kubernetes-asyncio {m['kubernetes_asyncio']}. "
        f"Best of {results['runs']} runs; templates: {stream.get('templates', {})}."
    )
    for kind in ("fight", "hot_loop"):
        r = found[kind]
        if r["missed_examples"]:
            lines.append(f"- missed {kind} (uids): {', '.join(r['missed_examples'])}")
        for example in r["false_positive_examples"]:
            lines.append(f"- false positive {kind} ({r['false_positives_by_role']}): {example}")
    if found.get("fight_recall_by_flavor"):
        lines += ["", "| Injected fight | Found |", "|---|---|"]
        lines += [f"| {flavor} | {hits} |" for flavor, hits in found["fight_recall_by_flavor"].items()]
    if results.get("profile"):
        lines += ["", "| tottime s | cumtime s | calls | function |", "|---:|---:|---:|---|"]
        lines += [
            f"| {r['tottime']:.3f} | {r['cumtime']:.3f} | {r['calls']:,} | `{r['function']}` |"
            for r in results["profile"]
        ]
    return "\n".join(lines)
