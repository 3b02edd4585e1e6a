"""The native implementation of write attribution, over `watcher._native` (Rust, `native/`).

It is built where Rust was there to build it (setup.py). It parses each event's JSON text without a Python object per
JSON node and keeps each object's attribution state natively, keyed by the object's key; the reference (`reference.py`)
is what it must agree with, write for write (tests/unit/test_attribution_differential.py).

`implementation(choice)` picks the implementation an engine runs on: the native one where it is built (`auto`),
else the reference.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, cast

from watcher.detection import events
from watcher.detection.attribution import Attribution, Decoder, Write
from watcher.detection.events import EventError, ObjectEvent
from watcher.detection.handovers import Handover, Log
from watcher.detection.ignore import ObjectRules
from watcher.detection.reference import PythonAttribution
from watcher.detection.state import ObjectState
from watcher.model import UNATTRIBUTED, Writer

if TYPE_CHECKING:
    from watcher._native import Front, HandoverLog, Parsed

CHOICES: Final = ("auto", "native", "python")


def native_available() -> bool:
    """Whether the native implementation (`watcher._native`) is installed."""
    return importlib.util.find_spec("watcher._native") is not None


def implementation(choice: str = "auto") -> Attribution:
    """Make a new attribution implementation: `native`, `python`, or `auto`.

    `auto` is native where built, else python. Raises ImportError for `native` where it is not built.
    """
    if choice not in CHOICES:
        raise ValueError(f"unknown engine {choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "python" or (choice == "auto" and not native_available()):
        return PythonAttribution()
    return NativeAttribution()


class NativeAttribution:
    """The attribution protocol over the native engine."""

    name = "native"

    def __init__(self) -> None:
        native = importlib.import_module("watcher._native")  # (built only where Rust was there: ImportError)
        self._front: Front = native.Front(Writer, Handover, UNATTRIBUTED)
        self._log: type[HandoverLog] = native.HandoverLog
        self.object_key: Callable[[str], int] = native.object_key

    @property
    def decode(self) -> Decoder:
        # (a property, not an attribute holding the bound method: that would be a reference cycle, and the native
        # Front, which must be dropped on the thread that made it, would wait for the collector, on any thread)
        return self._decode

    def _decode(
        self, data: bytes, *, observed_at: float | None = None, api_version: str | None = None, kind: str | None = None
    ) -> Parsed | None:
        """Decode an event natively (`events.decode`).

        What the native parser does not read goes to the reference decoder, which names the problem; an event it reads
        after all is an error of its own, not passed over in silence.
        """
        parsed = self._front.parse(data, observed_at, api_version, kind)
        if type(parsed) is str:
            if events.decode(data, observed_at=observed_at, api_version=api_version, kind=kind) is None:
                return None
            raise EventError(f"an event the native reader does not read ({parsed}): use --engine python")
        return parsed  # type: ignore[return-value]  # (not a str: a Parsed, or None for BOOKMARK and ERROR)

    @property
    def stamped(self) -> bool:
        return self._front.stamped

    def baseline(self, event: ObjectEvent, rules: ObjectRules) -> ObjectState:
        self._front.baseline(_parsed(event))
        return ObjectState(event.rv, rules)

    def resync(self, state: ObjectState, event: ObjectEvent) -> None:  # noqa: ARG002 - the protocol's signature
        self._front.resync(_parsed(event))

    def attribute(self, state: ObjectState, event: ObjectEvent, now: float) -> Write:
        # (the parts as a tuple: made here, compiled, a Write costs less than called from the native module)
        writers, changed, handovers = self._front.attribute(_parsed(event), now, state.seq)
        return Write(now, state.seq, writers, changed, handovers)

    def forget(self, key: int) -> None:
        self._front.forget(key)

    def new_log(self) -> Log:
        return self._log(Handover)

    def owned(
        self,
        state: ObjectState,  # noqa: ARG002 - the protocol's signature (this state lives natively)
        event: ObjectEvent,
        writer: Writer,
    ) -> frozenset[str] | None:
        return self._front.owned(event.key, writer)

    def tracked(self) -> int:
        """How many objects the native state holds (the engine's count must match it)."""
        return len(self._front)


def _parsed(event: ObjectEvent) -> Parsed:
    """Return the event as the native engine's own type.

    Its methods check the type: another is a TypeError.
    """
    return cast("Parsed", event)
