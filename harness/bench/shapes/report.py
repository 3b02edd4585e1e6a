"""Print a run on shapes (`harness.bench.shapes.turns`) as a Markdown table: a row per shape and build.

Per shape its events, size and bytes per event; per build the analysis' and the decode floor's best events/s,
their ratio, the median of the turns' ratios, the analysis' speed against the first build's, and for an audit
shape its speed against the replay of the same scenarios (`harness.bench.shapes.PAIRED`) by the same build.
"""

from __future__ import annotations

from typing import Any

from harness.bench.shapes import AUDIT, PAIRED, REPLAY

HEAD = (
    "shape",
    "build",
    "events",
    "MB",
    "bytes/event",
    "analysis, events/s",
    "floor, events/s",
    "analysis / floor (bests)",
    "median of turns",
    "vs first build",
)


def markdown(report: dict[str, Any]) -> str:
    """Render the run's table, and what it ran on."""
    audit = report["kind"] == AUDIT
    head = (*HEAD, "audit / replay of the scenarios") if audit else HEAD
    paired = next((s for s in report["shapes"] if s["kind"] == REPLAY and s["shape"] == PAIRED), None)
    first = next(iter(report["builds"]))
    rows = []
    for result in report["shapes"]:
        for name, figures in result["builds"].items():
            rate = figures["analysis_events_per_s"]
            cells = [
                result["shape"] if result["kind"] == report["kind"] else f"{result['shape']} ({result['kind']})",
                name,
                f"{result['events']:,}",
                f"{result['bytes'] / 1e6:,.0f}",
                f"{result['bytes_per_event']:,.0f}",
                f"{rate:,.0f}",
                f"{figures['floor_events_per_s']:,.0f}",
                f"{figures['ratio_of_bests']:.1%}",
                f"{figures['ratio_median']:.1%}",
                f"{rate / result['builds'][first]['analysis_events_per_s']:.2f}x",
            ]
            if audit:
                pair = paired["builds"][name]["analysis_events_per_s"] if paired else None
                cells.append(f"{rate / pair:.2f}x" if pair and result["kind"] == AUDIT else "")
            rows.append(cells)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines.append("")
    for result in report["shapes"]:
        make_up = ", ".join(f"{k} {v}" for k, v in result["make_up"].items() if not isinstance(v, dict))
        lines.append(f"- {result['shape']} ({result['kind']}): {result['about']}; {make_up}")
    m = report["machine"]
    lines.append("")
    lines.append(
        f"{report['runs']} turns per build and shape, in turns, each pinned to core {report['cpu']} of "
        f"{m['cores']} ({m['cpu']}); engine {report['engine']}; builds: "
        + ", ".join(f"{name} = {path}" for name, path in report["builds"].items())
    )
    return "\n".join(lines)
