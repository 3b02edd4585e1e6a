"""`Words`: the base class of the engine's packed tables, an `array` of 32-bit words.

The tables are `values.LeafTable` and `handovers.HandoverLog`; the array is typed as `array[int]`.

A module of its own because it is not compiled (see setup.py): `array[int]` is not subscriptable at run time
before Python 3.12, so the run-time base is plain `array`, and mypyc would treat that branch as unreachable in
a compiled module.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    Words = array[int]
else:
    Words = array
