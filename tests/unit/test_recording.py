"""`--record`: JSON Lines that replay reads back to exactly the events and times the watcher analysed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.unit.captures import IMPLEMENTATIONS, again, events
from tests.unit.captures import event as make_event
from watcher.config import Config
from watcher.detection.attribution import Decoder
from watcher.detection.events import ObjectEvent, encode, event_object
from watcher.detection.native import implementation
from watcher.model import format_observed, observed_time, parse_time
from watcher.recording import LAST_APPLIED, Recording, spliced
from watcher.sources.capture import ReadStats, read_capture, read_captures
from watcher.sources.discovery import ApiResource

SECRETS = ApiResource(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)
CONFIGMAPS = ApiResource(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)
APPLIED = '{"data":{"password":"aHVudGVyMg=="}}'  # what kubectl apply keeps of a Secret: its data


@pytest.fixture(params=IMPLEMENTATIONS)
def decode(request: pytest.FixtureRequest) -> Decoder:
    """The decoder of an attribution implementation (what `Engine.decode` is)."""
    return implementation(request.param).decode


def _stamped(name: str, decode: Decoder) -> list[ObjectEvent]:
    start = observed_time(time.time())
    return [again(decode, e, at=observed_time(start + n * 0.0137)) for n, e in enumerate(events(name, decode))]


def _view(event: ObjectEvent) -> tuple[Any, ...]:
    """What an event says (decoded events of two texts of the same event do not compare equal themselves)."""
    return (event.type, event.uid, event.resource_version, event.observed_at, event_object(event))


def test_a_recording_replays_to_the_same_events_and_times(tmp_path: Path, decode: Decoder) -> None:
    path = tmp_path / "rec.jsonl"
    originals = _stamped("fight-data", decode)
    recording = Recording(path, max_bytes=2**30, keep=1)
    for event in originals:
        recording.write(event)
    recording.close()
    replayed = list(read_capture(str(path), decode, stats=ReadStats()))
    assert [_view(e) for e in replayed] == [_view(e) for e in originals]  # types, objects and float times, exactly
    assert [e.data.rstrip() for e in replayed] == [e.data.rstrip() for e in originals]  # the very text, too
    assert recording.events == len(originals)
    assert recording.bytes_written == path.stat().st_size


def test_observed_times_survive_the_text_round_trip_exactly() -> None:
    for n in range(10_000):
        t = observed_time(1_790_000_000 + n * 12.345678901)
        text = format_observed(t)
        assert parse_time(text) == t
        assert text.endswith("Z")
        assert len(text) == 27


def test_rotation_by_size_keeps_the_newest_parts_and_replays_in_order(tmp_path: Path, decode: Decoder) -> None:
    path = tmp_path / "rec.jsonl"
    originals = _stamped("hot-loop-timestamp", decode)
    recording = Recording(path, max_bytes=8_000, keep=2)
    for event in originals:
        recording.write(event)
    recording.close()
    parts = sorted(p.name for p in tmp_path.iterdir())
    assert parts == ["rec.jsonl", "rec.jsonl.1", "rec.jsonl.2"]
    assert recording.rotations > 2  # older parts were dropped
    for part in ("rec.jsonl.1", "rec.jsonl.2"):
        assert (tmp_path / part).stat().st_size >= 8_000
    files = [str(tmp_path / p) for p in ("rec.jsonl.2", "rec.jsonl.1", "rec.jsonl")]
    replayed = list(read_captures(files, decode, stats=ReadStats()))
    assert [_view(e) for e in replayed] == [_view(e) for e in originals[-len(replayed) :]]


def test_a_recording_continues_an_existing_file(tmp_path: Path, decode: Decoder) -> None:
    path = tmp_path / "rec.jsonl"
    originals = _stamped("fight-data", decode)
    for half in (originals[:3], originals[3:]):
        recording = Recording(path, max_bytes=2**30, keep=1)
        for event in half:
            recording.write(event)
        recording.close()
    assert [orjson.loads(line)["type"] for line in path.read_bytes().splitlines()] == [e.type for e in originals]


def test_a_failing_disk_stops_the_recording_not_the_caller(tmp_path: Path, decode: Decoder) -> None:
    path = tmp_path / "rec.jsonl"
    recording = Recording(path, max_bytes=100, keep=1)
    tmp_path.chmod(0o500)  # rotation cannot rename in a read-only directory
    try:
        for event in _stamped("fight-data", decode):
            recording.write(event)
    finally:
        tmp_path.chmod(0o700)
    recording.close()
    if recording.error is not None:  # (root ignores directory permissions: nothing fails then)
        assert str(path) in recording.error


def _secret(decode: Decoder, annotations: dict[str, str]) -> ObjectEvent:
    obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "x", "uid": "u-1", "resourceVersion": "7", "annotations": annotations},
        "type": "Opaque",
    }
    return make_event(decode, "MODIFIED", obj, 1_800_000_000.0)


def test_a_secrets_last_applied_configuration_is_recorded_as_its_digest(tmp_path: Path, decode: Decoder) -> None:
    path = tmp_path / "rec.jsonl"
    recording = Recording(path, max_bytes=2**30, keep=1)
    event = _secret(decode, {LAST_APPLIED: APPLIED, "team": "a"})
    recording.write(event, secret=True)
    recording.close()
    text = path.read_bytes()
    assert b"aHVudGVyMg" not in text
    (replayed,) = read_capture(str(path), decode, stats=ReadStats())
    annotations = event_object(replayed)["metadata"]["annotations"]
    assert annotations[LAST_APPLIED].startswith("sha256:")
    assert annotations["team"] == "a"
    assert replayed.kind == "Secret"
    other = _secret(decode, {LAST_APPLIED: APPLIED.replace("aHVudGVyMg==", "c2VjcmV0"), "team": "a"})
    assert _recorded(tmp_path / "other.jsonl", other)[LAST_APPLIED] != annotations[LAST_APPLIED]  # changes show
    # The event itself is left as it was: the engine analyses it after it is recorded.
    assert event_object(event)["metadata"]["annotations"][LAST_APPLIED] == APPLIED


def _recorded(path: Path, event: ObjectEvent) -> dict[str, str]:
    """The annotations a Secret's event is recorded with."""
    recording = Recording(path, max_bytes=2**30, keep=1)
    recording.write(event, secret=True)
    recording.close()
    (line,) = path.read_bytes().splitlines()
    annotations: dict[str, str] = orjson.loads(line)["object"]["metadata"]["annotations"]
    return annotations


def test_only_secrets_are_redacted_and_the_watcher_says_which_are(tmp_path: Path) -> None:
    """The watcher records what it analyses (a Secret's last-applied-configuration as its digest only)."""
    from watcher.service import Service  # noqa: PLC0415 - the composition root, only for its recording

    service = Service(Config(), kubeconfig=None, context=None, record=None)
    path = tmp_path / "rec.jsonl"
    service.pipeline.recording = Recording(path, max_bytes=2**30, keep=1)
    event = _secret(service.pipeline.decode, {LAST_APPLIED: APPLIED})
    service._on_event(event, SECRETS)
    service._on_event(event, CONFIGMAPS)  # (the same text, as if it were a ConfigMap's: recorded as it is)
    service.pipeline.recording.close()
    secret, configmap = (orjson.loads(line) for line in path.read_bytes().splitlines())
    assert secret["object"]["metadata"]["annotations"][LAST_APPLIED].startswith("sha256:")
    assert configmap["object"]["metadata"]["annotations"][LAST_APPLIED] == APPLIED
    assert secret["observedAt"] == configmap["observedAt"] == format_observed(1_800_000_000.0)


def _watch_line(obj: dict[str, Any], kind: str = "MODIFIED") -> bytes:
    """A watch event's text as kube-apiserver writes it (Go's encoder: no spaces, struct fields in order)."""
    return orjson.dumps({"type": kind, "object": obj})


_META = {
    "name": "a",
    "namespace": "x",
    "uid": "9b99b1c1-fcd9-40af-8e7e-ac2b049836b7",
    "resourceVersion": "200",
    "labels": {"l": "2 <&> \u00e9"},
    "managedFields": [
        {
            "manager": "m",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-27T04:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:l": {}}}},
        }
    ],
}


@pytest.mark.parametrize(
    ("obj", "spliced_as_sent"),
    [
        ({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": _META}, True),
        ({"kind": "ConfigMap", "apiVersion": "v1", "metadata": _META, "data": {"k": "v"}}, True),
        ({"metadata": _META, "kind": "ConfigMap", "apiVersion": "v1"}, False),  # (not the server's order)
    ],
)
def test_a_recorded_line_is_the_servers_text_with_its_kind_and_time(
    obj: dict[str, Any], spliced_as_sent: bool, decode: Decoder, tmp_path: Path
) -> None:
    event = decode(
        _watch_line(obj), observed_at=observed_time(1_790_000_000.123456), api_version="v1", kind="ConfigMap"
    )
    assert event is not None
    path = tmp_path / "rec.jsonl"
    recording = Recording(path, max_bytes=2**30, keep=1)
    recording.write(event)
    recording.close()
    line = path.read_bytes().rstrip(b"\n")
    expected = orjson.loads(encode(event.type, event_object(event), event.observed_at))
    assert orjson.loads(line) == expected  # the same event, time and kind as decoding and encoding it gives
    assert expected["object"]["kind"] == "ConfigMap"
    assert (spliced(event) is not None) == spliced_as_sent
    if spliced_as_sent:
        assert b'"l":"2 <&> \xc3\xa9"' in line  # (the sent text, not re-encoded)
