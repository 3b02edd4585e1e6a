"""Handovers (a field changing hands or value in one write) and the per-object log the fight detector reads.

Objects with steady benign churn keep a log of up to `history` handovers for a whole window, so the log is the
largest part of the engine's memory: it is packed into one `array` of 32-bit words, five per handover: the time
in microseconds (52 bits, split over two words) with the handover's *key* (12 bits), the write counter, and
32-bit hashes of the values before and after. The key is the path and the parties (who wrote, who lost, who
took): a log names few of them, so it keeps each once in a small tuple and the words hold its index. 20 bytes a
handover and about 150 a log, instead of 200 a handover as NamedTuples.

Value hashes are cut to 32 bits in the log only (a value counts as come back when its cut hash was seen before:
a false match has a probability of 2**-32 per pair of values), and the write counter wraps at 2**32.
"""

from __future__ import annotations

# Not used here, but imported by a compiled module: mypyc makes the subclasses of `Words` (an `array`) look up
# `array.array` through a module reference it only declares for a compiled module that imports `array` itself.
import array  # noqa: F401
import struct
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from watcher.detection.words import Words
from watcher.model import Writer

REMOVED: Final = -1  # value hash of a leaf that disappeared (value hashes are 32-bit CRCs: never negative)


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


class Log(Protocol):
    """What the fight rule asks of an object's handover log: `HandoverLog`, or the native engine's own (`_native`).

    Both keep the same words and answer alike (tests/unit/test_handovers.py runs both on the same handovers).
    """

    def size(self) -> int:
        """How many handovers the log holds."""
        ...

    def record(self, handovers: list[Handover], *, horizon: float, limit: int) -> list[str]:
        """Log one write's handovers and trim the log; return the paths of those that may have come back."""
        ...

    def backs(self, path: str) -> int:
        """How many handovers of `path` returned it to an owner or a value it had before."""
        ...

    def single_writer(self, path: str) -> Writer | None:
        """Return the one writer behind every handover of `path`, when they are all value flips."""
        ...

    def of(self, paths: str | set[str]) -> list[Handover]:
        """Return the handovers of one path, or of any path in a set, oldest first."""
        ...

    def handovers(self) -> Iterable[Handover]:
        """Every handover logged, oldest first."""
        ...


_Key = tuple[str, Writer, Writer | None, Writer | None]  # path, by, before, after
# Words a handover: time (low 32 bits), time (high 20 bits) << 12 | key index, write counter, was, now.
_SLOTS: Final = 5
_LOW: Final = (1 << 32) - 1
_KEY_BITS: Final = 12
_KEY_MASK: Final = (1 << _KEY_BITS) - 1
_MAX_TIME: Final = 1 << 52  # microseconds: until the year 2112
_NONE: Final = _LOW  # a value hash that is not there
_keys: Final[dict[_Key, _Key]] = {}  # shared by every log: objects of one kind fight over the same few fields
_key_tuples: Final[dict[tuple[_Key, ...], tuple[_Key, ...]]] = {}  # and their logs name them in the same order
_MAX_KEYS: Final = 10_000
_WORD: Final = struct.Struct("=I")  # one word of the log, as its bytes
_T = TypeVar("_T")


def _shared(pool: dict[_T, _T], item: _T) -> _T:
    """Return the copy of `item` every log shares (the pool starts again when full)."""
    found = pool.get(item)
    if found is None:
        if len(pool) >= _MAX_KEYS:
            pool.clear()
        found = pool[item] = item
    return found


def cut(value: int | None) -> int:
    """Cut a value hash as the log keeps it: 32 bits, never `_NONE` unless there is no value."""
    if value is None:
        return _NONE
    low = value & _LOW
    return low - 1 if low == _NONE else low


def _index_of(keys: tuple[_Key, ...], key: _Key) -> int:
    """`keys.index(key)`, or -1: a new key would raise there, and compiled code pays dearly for an exception."""
    for i, known in enumerate(keys):
        if known == key:
            return i
    return -1


def _may_come_back(words: bytes, handover: Handover) -> bool:
    """Whether `handover` (not yet logged) might return its field to an earlier owner or value; `words`: the log's.

    A cheap test in C that is never wrong when it says no: a value that is not among the logged words
    cannot be an earlier value. Ownership handovers are rarer and always say maybe. (The words are searched as
    bytes, which is faster than comparing them as ints; a match across two words only says maybe. With `find`,
    not `in`: `bytes in bytes` first tries the operand as an int, and formats the error it then drops.)
    """
    return handover.after is not None or (handover.now is not None and words.find(_WORD.pack(cut(handover.now))) >= 0)


def _micros(at: float) -> int:
    """Return a time as the log keeps it.

    Times before 1970 are kept as 1970: no write the engine sees is that old.
    """
    return min(max(round(at * 1e6), 0), _MAX_TIME - 1)


@mypyc_attr(native_class=False)  # a subclass of a built-in type: a plain Python class, also when compiled
class HandoverLog(Words):
    """An object's recent handovers, oldest first, bounded by count and age (see `trim`).

    The log *is* its array of words (five a handover, see above), plus the tuple of the keys they index: one
    object per log instead of three. As an array, its length, indexing and iteration are in words. Made by
    `empty` (mypyc compiles no `__new__` for a subclass of a built-in type).
    """

    __slots__ = ("_keys",)
    _keys: tuple[_Key, ...]

    @classmethod
    def empty(cls) -> HandoverLog:
        made = cls("I")
        made._keys = ()
        return made

    def size(self) -> int:
        """How many handovers the log holds (its `len` is in words)."""
        return len(self) // _SLOTS

    def handovers(self) -> Iterator[Handover]:
        """Yield the handovers logged, their value hashes cut to 32 bits (see above)."""
        return (self._at(i) for i in range(self.size()))

    def record(self, handovers: list[Handover], *, horizon: float, limit: int) -> list[str]:
        """Log one write's handovers, then trim the log (see `trim`).

        Return the paths of the handovers that may have come back (each once, in order: see `_may_come_back`), as
        tested before they were logged.
        """
        words = self.tobytes()
        candidates = list(dict.fromkeys(h.path for h in handovers if _may_come_back(words, h)))
        self.add(handovers[-limit:])  # (more could not stay: see `trim`)
        self.trim(horizon=horizon, limit=limit)
        return candidates

    def add(self, handovers: Iterable[Handover]) -> None:
        keys = self._keys
        for h in handovers:
            key = (h.path, h.by, h.before, h.after)
            index = _index_of(keys, key)
            if index < 0:
                index = len(keys)
                if index > _KEY_MASK:  # (a log holds at most `history` <= 1024 handovers: see `trim`)
                    raise ValueError("too many distinct handovers for one log")
                keys = self._keys = _shared(_key_tuples, (*keys, _shared(_keys, key)))
            at = _micros(h.at)
            self.extend((at & _LOW, (at >> 32) << _KEY_BITS | index, h.seq & _LOW, cut(h.was), cut(h.now)))

    def _time(self, i: int) -> int:
        """Return the time of the i-th handover, in microseconds."""
        base = i * _SLOTS
        return (self[base + 1] >> _KEY_BITS) << 32 | self[base]

    def trim(self, *, horizon: float, limit: int) -> None:
        """Drop handovers older than `horizon`, then the oldest beyond `limit`; forget keys no longer used."""
        count = self.size()
        oldest = _micros(horizon)
        if count <= limit and self._time(0) >= oldest:
            return
        expired = next((i for i in range(count) if self._time(i) >= oldest), count)
        del self[: max(expired, count - limit) * _SLOTS]
        if len(self._keys) > 2 * self.size() + 4:  # (a log of many paths, e.g. one timestamp per write)
            self._compact()

    def _compact(self) -> None:
        old = self._keys
        keys: list[_Key] = []
        renumbered: dict[int, int] = {}
        for i in range(1, len(self), _SLOTS):
            index = self[i] & _KEY_MASK
            new = renumbered.get(index)
            if new is None:
                new = renumbered[index] = len(keys)
                keys.append(old[index])
            self[i] = self[i] & ~_KEY_MASK | new
        self._keys = _shared(_key_tuples, tuple(keys))

    def backs(self, path: str) -> int:
        """How many handovers of `path` returned it to an owner or a value it had before (within the log)."""
        keys = self._keys
        mine = {i for i, key in enumerate(keys) if key[0] == path}
        back = 0
        owners: set[Writer] = set()
        values: set[int] = set()
        for i in range(0, len(self), _SLOTS):
            index = self[i + 1] & _KEY_MASK
            if index not in mine:
                continue
            _, _, before, after = keys[index]
            was, now = self[i + 3], self[i + 4]
            if (after is not None and after in owners) or (now != _NONE and now in values):
                back += 1
            if before is not None:
                owners.add(before)
            if was != _NONE:
                values.add(was)
        return back

    def single_writer(self, path: str) -> Writer | None:
        """Return the one writer behind every handover of `path`, when they are all value flips.

        It wrote each handover of `path` in the log, and lost the field to nobody else. None when another party is
        named, a handover was one of ownership, or the one party is the unattributed writer (unknown: not one writer).
        """
        found: Writer | None = None
        for key in self._keys:
            if key[0] != path:
                continue
            _, by, before, after = key
            if after is not None:
                return None
            for party in (by, before):
                if party is None:
                    continue
                if found is None:
                    found = party
                elif party != found:
                    return None
        return found if found is not None and found.manager is not None else None

    def of(self, paths: str | set[str]) -> list[Handover]:
        """Return the handovers of one path, or of any path in a set, oldest first."""
        wanted = {paths} if isinstance(paths, str) else paths
        mine = {i for i, key in enumerate(self._keys) if key[0] in wanted}
        return [self._at(i) for i in range(self.size()) if self[i * _SLOTS + 1] & _KEY_MASK in mine]

    def _at(self, i: int) -> Handover:
        base = i * _SLOTS
        seq, was, now = self[base + 2], self[base + 3], self[base + 4]
        path, by, before, after = self._keys[self[base + 1] & _KEY_MASK]
        was_, now_ = (None if was == _NONE else was), (None if now == _NONE else now)
        return Handover(self._time(i) / 1e6, seq, path, by, before, after, was_, now_)
