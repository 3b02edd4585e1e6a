"""Print a benchmark's figures as a plain-text table."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any


def aligned(rows: Sequence[tuple[str, ...]]) -> str:
    """Render rows of cells as a plain-text table: each column padded to its widest cell."""
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)).rstrip() for row in rows
    )


Column = tuple[str, Callable[[dict[str, Any]], str]]  # a column's head, and its cell made of a row's figures


def figures_table(
    names: Sequence[str], columns: Sequence[Column], rows: Iterable[tuple[Sequence[str], dict[str, Any]]]
) -> str:
    """Render rows of figures: the names each row begins with (headed `names`), then a cell of each column."""
    head = (*names, *(title for title, _ in columns))
    return aligned([head, *((*lead, *(cell(figures) for _, cell in columns)) for lead, figures in rows)])
