"""Aligned columns cut to a width, so that a table fits the terminal it is printed on.

kubectl keeps its default tables narrow by showing fewer columns and leaves the rest to `-o wide`; fightwatch's
cells are long (writers, field paths, object names), so it also cuts them. A column too narrow for its cells
shows their shorter forms where they have them, and cuts what is still too long ("…"); columns are dropped
(lowest `drop` rank first) only while the cut columns would be narrower than their `minimum`. Pure: rows in,
lines out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

GAP = "  "
ELLIPSIS = "…"

Cell = str | tuple[str, ...]
"""A cell's text, or its forms from the whole to the shortest (`Deployment.apps a/web`, `Deployment a/web`)."""


@dataclass(frozen=True)
class Column:
    header: str
    cut: Literal["end", "middle"] | None = None
    """How a cell too long for the column is cut: its end, or its middle (object names: the kind and the name's
    end stay); None: the column is kept whole."""
    minimum: int = 0
    """The narrowest a cut column gets (at least its header) before a column is dropped for it; narrower only when
    no column is left to drop."""
    drop: int = 0
    """When the column goes if the rest cannot fit: 1 first, then 2, ...; 0 never."""


def lay_out(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int | None) -> list[str]:
    """Lay out the header and the rows, aligned.

    With a `width`, no line longer than it (None: every cell whole).
    """
    table: list[list[tuple[str, ...]]] = [[(c.header,) for c in columns]]
    table += [[(cell,) if isinstance(cell, str) else cell for cell in row] for row in rows]
    natural = [max(len(row[i][0]) for row in table) for i in range(len(columns))]
    kept = list(range(len(columns)))
    sizes = dict(enumerate(natural))
    if width is not None:
        kept = _kept(columns, natural, width)
        sizes = _sizes(columns, natural, kept, width)
    forms = {i: _form(table, i, sizes[i]) for i in kept}
    lines = []
    for row in table:
        cells = (_cut(_pick(row[i], forms[i]), sizes[i], columns[i].cut).ljust(sizes[i]) for i in kept)
        line = GAP.join(cells).rstrip()
        if width is not None and len(line) > width:  # (a terminal too narrow even for the whole columns)
            line = _cut(line, width, "end")
        lines.append(line)
    return lines


def _form(table: list[list[tuple[str, ...]]], column: int, size: int) -> int:
    """Choose the form a column shows: the first that fits in every row, else the shortest.

    The shortest is then cut. One form for the whole column, so that its cells read alike.
    """
    count = max(len(row[column]) for row in table)
    return next((k for k in range(count) if all(len(_pick(row[column], k)) <= size for row in table)), count - 1)


def _pick(forms: tuple[str, ...], k: int) -> str:
    return forms[min(k, len(forms) - 1)]


def _narrowest(column: Column, natural: int) -> int:
    return natural if column.cut is None else min(natural, max(column.minimum, len(column.header)))


def _kept(columns: Sequence[Column], natural: list[int], width: int) -> list[int]:
    """Return the columns shown.

    All, less the droppable ones (in their order) while even the narrowest layout is too wide.
    """
    kept = list(range(len(columns)))
    for i in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: columns[i].drop):
        need = sum(_narrowest(columns[k], natural[k]) for k in kept) + len(GAP) * (len(kept) - 1)
        if need <= width:
            break
        kept.remove(i)
    return kept


def _sizes(columns: Sequence[Column], natural: list[int], kept: list[int], width: int) -> dict[int, int]:
    """Return each kept column's width.

    Whole columns their text's, cut ones at least their narrowest, and the room left shared equally among the cut ones
    that want more (a column that wants less than its share leaves the rest to the others; the first in order gets the
    odd characters). Without room for the narrowest, the cut columns shrink in proportion, down to their headers.
    """
    sizes = {i: _narrowest(columns[i], natural[i]) for i in kept}
    room = width - sum(sizes.values()) - len(GAP) * (len(kept) - 1)
    if room < 0:
        cut = [i for i in kept if columns[i].cut is not None]
        spare = {i: sizes[i] - len(columns[i].header) for i in cut}
        total = sum(spare.values())
        for i in cut:
            less = min(spare[i], -(room * spare[i]) // total + 1) if total else 0
            sizes[i] -= less
        return sizes
    wanting = [i for i in kept if sizes[i] < natural[i]]
    while wanting and room > 0:
        share = room // len(wanting)
        for i in wanting if share else wanting[:room]:
            more = min(share or 1, natural[i] - sizes[i])
            sizes[i] += more
            room -= more
        wanting = [i for i in wanting if sizes[i] < natural[i]]
    return sizes


def _cut(text: str, size: int, how: Literal["end", "middle"] | None) -> str:
    if len(text) <= size or how is None:
        return text
    if how == "end" or size < 3:
        return text[: size - 1] + ELLIPSIS
    head = (size - 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (size - 1 - head) :]
