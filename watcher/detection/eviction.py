"""Letting the least recently written objects go, as both engines bound what they remember.

Both engines keep their objects in a dict ordered from the least to the most recently written (an object written
again moves to the back), so the candidates to let go are at its front. An object with an open finding is never let
go: it moves to the back of the queue instead, so the next pass looks past it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

K = TypeVar("K")
S = TypeVar("S")


def let_go(
    objects: dict[K, S], candidates: Iterable[K], count: int, *, held: Callable[[S], bool], forget: Callable[[K], None]
) -> int:
    """Forget up to `count` of `candidates` (keys of `objects`, least recently written first) with `forget`.

    Those `held` (an open finding) are kept, moved to the back of `objects`. Return how many were let go.
    """
    chosen: list[K] = []
    kept: list[K] = []
    for key in candidates:
        if len(chosen) >= count:
            break
        (kept if held(objects[key]) else chosen).append(key)
    for key in chosen:
        forget(key)
    for key in kept:
        objects[key] = objects.pop(key)
    return len(chosen)
