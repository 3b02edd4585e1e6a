"""Print a benchmark's figures as a plain-text table."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(rows: Sequence[tuple[str, ...]]) -> str:
    """Render rows of cells as a plain-text table: each column padded to its widest cell."""
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)).rstrip() for row in rows
    )
