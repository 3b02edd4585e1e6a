"""The packed handover log behaves like the plain list of handovers it stands for (with value hashes cut to 32
bits and write counters of 32 bits, as it keeps them), and the native engine's log answers as the Python one does,
call for call. Value hashes are 32-bit CRCs (`hashing.py`), which it keeps as they are."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.captures import IMPLEMENTATIONS
from watcher.detection.handovers import REMOVED, Handover, HandoverLog, Log, cut
from watcher.detection.hashing import text_hash, value_hash
from watcher.model import Writer

WRITERS = [Writer("helm", "Update", ""), Writer("hpa", "Update", ""), Writer("manager", "Apply", "")]
PATHS = ["spec.replicas", "metadata.labels.owner", "data.mode", "metadata.annotations[example.com/at]"]

writers = st.sampled_from(WRITERS)
# Value hashes as attribution makes them (32-bit CRCs, REMOVED for a value that vanished), and any other int, which
# the log cuts to 32 bits.
value_hashes = st.one_of(st.integers(0, 2**32 - 1), st.just(REMOVED), st.integers(-(2**63) + 1, 2**63 - 1))
handovers = st.builds(
    lambda gap, seq, path, by, owners, values: (gap, seq, path, by, owners, values),
    st.floats(0, 120, allow_nan=False),
    st.integers(0, 2**32 - 1),
    st.sampled_from(PATHS),
    writers,
    st.one_of(st.none(), st.tuples(writers, writers)),
    st.one_of(st.none(), st.tuples(value_hashes, st.integers(-5, 5))),
)
batches = st.lists(st.lists(handovers, max_size=6), max_size=40)


def _cut(value: int | None) -> int | None:
    return None if value is None else cut(value)


def _reference_backs(log: list[Handover], path: str) -> int:
    back, owners, values = 0, set(), set()
    for h in log:
        if h.path != path:
            continue
        if (h.after is not None and h.after in owners) or (h.now is not None and h.now in values):
            back += 1
        if h.before is not None:
            owners.add(h.before)
        if h.was is not None:
            values.add(h.was)
    return back


def _new_log(implementation: str) -> Callable[[], Log]:
    if implementation == "python":
        return HandoverLog.empty
    native = importlib.import_module("watcher._native")
    return lambda: native.HandoverLog(Handover)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=200, deadline=None)
@given(batches=batches, limit=st.integers(4, 12), window=st.floats(30, 600, allow_nan=False))
def test_the_packed_log_keeps_and_counts_what_a_list_would(
    implementation: str,
    batches: list[list[tuple[float, int, str, Writer, tuple[Writer, Writer] | None, tuple[int, int] | None]]],
    limit: int,
    window: float,
) -> None:
    log = _new_log(implementation)()
    python = HandoverLog.empty()  # (the reference, for what a list cannot say: which handovers *may* come back)
    reference: list[Handover] = []
    at = 1_600_000_000.0
    for batch in batches:
        made = []
        for gap, seq, path, by, owners, values in batch:
            at += gap
            before, after = owners if owners is not None else (None, None)
            was, now = values if values is not None else (None, None)
            made.append(Handover(round(at, 6), seq, path, by, before, after, was, now))
        if not made:
            continue
        kept = [h._replace(was=_cut(h.was), now=_cut(h.now)) for h in made]  # as the log keeps them
        candidates = log.record(made, horizon=at - window, limit=limit)
        assert candidates == python.record(made, horizon=at - window, limit=limit)
        for h, k in zip(made, kept, strict=True):  # a handover not said to come back must not come back
            if h.path not in candidates:
                assert _reference_backs([*reference, k], h.path) == _reference_backs(reference, h.path)
        reference += kept
        horizon = round((at - window) * 1e6)  # (the log keeps times in microseconds)
        reference = [h for h in reference if round(h.at * 1e6) >= horizon][-limit:]
        assert list(log.handovers()) == reference
        assert log.size() == len(reference)
        for path in PATHS:
            assert log.backs(path) == _reference_backs(reference, path)
            assert log.of(path) == [h for h in reference if h.path == path]
            assert log.single_writer(path) == python.single_writer(path)
        assert log.of(set(PATHS[:2])) == [h for h in reference if h.path in PATHS[:2]]


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()))
def test_value_hashes_are_kept_as_they_are(value: object) -> None:
    """A value hash is 32 bits already: the log keeps it as it is (but for the one word that means no value)."""
    for hashed in (value_hash(value), text_hash(str(value))):
        assert 0 <= hashed < 2**32
        assert cut(hashed) == hashed or hashed == 2**32 - 1
    assert cut(REMOVED) != cut(None)  # a value that vanished is not a value that is not there
