"""The marker shapes that tell a timeline's writers apart without colour.

One per lane, cycling, each an SVG path centred on (0, 0) that a mark places with a `translate`.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Final

# Shapes a reader names at a glance, in an order where neighbours differ most. (No cross: a cross marks a conflict.)
SHAPES: Final = ("circle", "square", "triangle", "diamond", "hexagon", "triangle-down", "star", "pentagon")
# Okabe-Ito, the palette that colour-blind readers tell apart (yellow left out: too faint on white). The colours
# themselves are in the page's style (`.c0` ...), which also has their dark-mode versions.
COLOURS: Final = 7
CONFLICT_PATH: Final = "M-4.5-4.5L4.5 4.5M4.5-4.5L-4.5 4.5"

# A regular polygon per shape: sides, rotation (degrees) and a size factor so that shapes look equally big.
_POLYGONS: Final[dict[str, tuple[int, float, float]]] = {
    "square": (4, 45, 1.15),
    "triangle": (3, -90, 1.3),
    "diamond": (4, 0, 1.3),
    "hexagon": (6, 0, 1.1),
    "triangle-down": (3, 90, 1.3),
    "pentagon": (5, -90, 1.12),
}


def lane_shape(lane: int) -> str:
    return SHAPES[lane % len(SHAPES)]


def lane_colour(lane: int) -> int:
    return lane % COLOURS


@cache
def shape_path(shape: str, radius: float) -> str:
    """Return the path of a shape of about `radius`, centred on the origin."""
    if shape == "circle":
        r = svg_number(radius)
        return f"M{r} 0A{r} {r} 0 1 1 -{r} 0A{r} {r} 0 1 1 {r} 0Z"
    if shape == "star":
        return _polygon([_point(radius * (1.3 if n % 2 == 0 else 0.55), -90 + n * 36) for n in range(10)])
    sides, rotation, factor = _POLYGONS[shape]
    return _polygon([_point(radius * factor, rotation + n * 360 / sides) for n in range(sides)])


def _point(distance: float, degrees: float) -> tuple[float, float]:
    angle = math.radians(degrees)
    return distance * math.cos(angle), distance * math.sin(angle)


def _polygon(points: list[tuple[float, float]]) -> str:
    return "M" + "L".join(f"{svg_number(x)} {svg_number(y)}" for x, y in points) + "Z"


def svg_number(value: float) -> str:
    """Short SVG numbers: two decimals at most, no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in {"-0", "0", ""} else text
