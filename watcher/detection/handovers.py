"""Handovers (a field changing hands or value in one write) and the per-object log the fight detector reads.

Objects with steady benign churn keep a log of up to `history` handovers for a whole window, so the log is the
largest part of the engine's memory: it is packed. The numbers (time, write counter, value hashes) go into one
`array` of machine words, the paths into a list of shared strings, and the parties (who wrote, who lost, who took)
into shared tuples: about 40 bytes a handover instead of 200 as NamedTuples with boxed numbers.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from watcher.model import Writer

REMOVED = -1  # value hash of a leaf that disappeared (hash() never returns -1)


class Handover(NamedTuple):
    """One field changing hands in one write.

    Ownership evidence names the owners before and after (managedFields); value evidence the value hashes before
    and after (labels, annotations, fields of full objects). A write may show either or both.
    """

    at: float
    seq: int  # the object's write counter at this write
    path: str
    by: Writer  # who made the write
    before: Writer | None = None  # owner that lost the field
    after: Writer | None = None  # owner that took it
    was: int | None = None  # value hash before
    now: int | None = None  # value hash after


_Parties = tuple[Writer, Writer | None, Writer | None]
_NONE = -(2**63)  # a value hash that is not there (hash() could return it, with probability 2**-64)
_SLOTS = 4  # numbers a handover: time in microseconds, write counter, value hash before, after
_parties: dict[_Parties, _Parties] = {}
_MAX_PARTIES = 10_000


class HandoverLog:
    """An object's recent handovers, oldest first, bounded by count and age (see `trim`)."""

    __slots__ = ("_numbers", "_parties", "paths")

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._parties: list[_Parties] = []
        self._numbers = array("q")

    def __len__(self) -> int:
        return len(self.paths)

    def __iter__(self) -> Iterator[Handover]:
        return (self._at(i) for i in range(len(self.paths)))

    def extend(self, handovers: Iterable[Handover]) -> None:
        numbers = self._numbers
        for h in handovers:
            self.paths.append(h.path)
            parties = (h.by, h.before, h.after)
            shared = _parties.get(parties)
            if shared is None:
                if len(_parties) >= _MAX_PARTIES:
                    _parties.clear()
                shared = _parties[parties] = parties
            self._parties.append(shared)
            numbers.extend(
                (round(h.at * 1e6), h.seq, _NONE if h.was is None else h.was, _NONE if h.now is None else h.now)
            )

    def trim(self, *, horizon: float, limit: int) -> None:
        """Drop handovers older than `horizon`, then the oldest beyond `limit`."""
        numbers, count = self._numbers, len(self.paths)
        oldest = round(horizon * 1e6)
        if count <= limit and numbers[0] >= oldest:
            return
        expired = next((i for i in range(count) if numbers[i * _SLOTS] >= oldest), count)
        drop = max(expired, count - limit)
        del self.paths[:drop]
        del self._parties[:drop]
        del numbers[: drop * _SLOTS]

    def may_come_back(self, handover: Handover) -> bool:
        """Whether `handover` (not yet logged) might return its field to an earlier owner or value.

        A cheap test in C that is never wrong when it says no: a value that is not among the logged numbers
        cannot be an earlier value. Ownership handovers are rarer and always say maybe.
        """
        return handover.after is not None or (handover.now is not None and handover.now in self._numbers)

    def backs(self, path: str) -> int:
        """How many handovers of `path` returned it to an owner or a value it had before (within the log)."""
        numbers, parties = self._numbers, self._parties
        back = 0
        owners: set[Writer] = set()
        values: set[int] = set()
        for i, p in enumerate(self.paths):
            if p != path:
                continue
            _, before, after = parties[i]
            was, now = numbers[i * _SLOTS + 2], numbers[i * _SLOTS + 3]
            if (after is not None and after in owners) or (now != _NONE and now in values):
                back += 1
            if before is not None:
                owners.add(before)
            if was != _NONE:
                values.add(was)
        return back

    def of(self, paths: str | set[str]) -> list[Handover]:
        """The handovers of one path, or of any path in a set, oldest first."""
        if isinstance(paths, str):
            return [self._at(i) for i, p in enumerate(self.paths) if p == paths]
        return [self._at(i) for i, p in enumerate(self.paths) if p in paths]

    def _at(self, i: int) -> Handover:
        at, seq, was, now = self._numbers[i * _SLOTS : i * _SLOTS + _SLOTS]
        by, before, after = self._parties[i]
        was_, now_ = (None if was == _NONE else was), (None if now == _NONE else now)
        return Handover(at / 1e6, seq, self.paths[i], by, before, after, was_, now_)
