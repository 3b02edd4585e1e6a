"""The native engine (`native/`, Rust) parses events and attributes writes; the Python reference is what it must
agree with. Beside the protocol-level differential test (test_attribution_differential.py), whole replays must
agree: the same findings and the same totals, to the byte, on every real capture and the demo capture, one by one
and merged, and the same errors, with file and line, on malformed input. And `--engine auto` picks the native
engine where it is built, the Python one (with a warning for `run`) where it is not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.unit.captures import CAPTURES, RELEASE_CAPTURES, RELEASES
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.native import implementation, native_available
from watcher.detection.reference import PythonAttribution

AUDIT = CAPTURES.parent / "audit"  # (the audit scenarios' watch captures: *.watch.jsonl)

# A pure-Python build (FIGHTWATCH_PURE_PYTHON, asked for by hand: CI never sets it) has no native engine.
pytestmark = pytest.mark.skipif(
    os.environ.get("FIGHTWATCH_PURE_PYTHON", "") not in {"", "0"}, reason="FIGHTWATCH_PURE_PYTHON: no native front end"
)


def replay(*args: str, cwd: Path) -> tuple[int, bytes, bytes]:
    result = subprocess.run(
        [sys.executable, "-m", "watcher", *args], cwd=cwd, capture_output=True, check=False, timeout=300
    )
    return result.returncode, result.stdout, result.stderr


def both(*args: str, cwd: Path) -> tuple[tuple[int, bytes, bytes], tuple[int, bytes, bytes]]:
    return replay(*args, "--engine", "native", cwd=cwd), replay(*args, "--engine", "python", cwd=cwd)


def test_native_engine_is_built() -> None:
    assert native_available(), (
        "watcher._native is not built: see setup.py (Rust's cargo, and the crates scripts/native.sh fetches)"
    )
    assert Engine(Config().detection).implementation == "native"  # (what `auto`, the default, picks)


def test_without_the_native_engine_auto_is_the_python_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "watcher._native", None)  # (as if it were not built: it cannot be imported)
    assert not native_available()
    assert isinstance(implementation("auto"), PythonAttribution)
    with pytest.raises(ImportError):
        implementation("native")
    with pytest.raises(ValueError, match="unknown engine 'rust'"):
        implementation("rust")


def test_run_says_when_it_falls_back_to_python(tmp_path: Path) -> None:
    """`fightwatch run` where the native engine is not built warns and runs on the Python engine; here it then
    cannot connect (no cluster), which it says too."""
    script = (
        "import sys; sys.modules['watcher._native'] = None; from watcher import cli; sys.exit(cli.main(sys.argv[1:]))"
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    result = subprocess.run(
        [sys.executable, "-c", script, "run", "--kubeconfig", str(kubeconfig), "--listen", "127.0.0.1:0"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
        timeout=60,
    )
    log = result.stdout.decode() + result.stderr.decode()
    assert "native engine not built: running on the Python engine" in log
    assert result.returncode == 2
    assert "cannot connect" in log


@pytest.mark.parametrize("output", ["json", "table"])
@pytest.mark.parametrize("release", RELEASES)
def test_native_and_python_find_the_same(tmp_path: Path, output: str, release: str) -> None:
    """Every recording of each release (the current one's and v1.20's: the scenario captures and the audit
    scenarios' watch captures), one by one and all together, and the demo: byte for byte the same output."""
    audit = AUDIT / ("" if release == "current" else release)
    captures = sorted(str(path) for path in RELEASE_CAPTURES[release].glob("*.jsonl"))
    captures += sorted(str(path) for path in audit.glob("*.watch.jsonl"))
    runs: list[tuple[str, ...]] = [("replay", "--output", output, c) for c in captures]
    runs += [("replay", "--output", output, *captures), ("demo", "--output", output)]
    fights = 0
    for args in runs:
        native, python = both(*args, cwd=tmp_path)
        assert native[0] == python[0] == 0, (args, native[2], python[2])
        assert native[1] == python[1], args
        fights += native[1].count(b'"type":"fight"')
    if output == "json":
        assert fights >= 20


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'{"type": "ADDED", "object": {"kind": "ConfigMap"', "invalid JSON"),
        (b'{"type": "CHANGED", "object": {}}', "unknown watch event type 'CHANGED'"),
        (
            b'{"type": "ADDED", "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}}',
            "no metadata.uid",
        ),
        (
            b'{"type": "ADDED", "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"uid": "u", '
            b'"name": "a", "managedFields": [{"manager": "m", "fieldsV1": [1]}]}}}',
            "fieldsV1 of manager 'm' is not an object",
        ),
        (b'{"kind": "ConfigMapList", "metadata": {}, "items": []}', "this is a List, not a watch stream"),
        (
            b'{"type": "ADDED", "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"uid": "u", '
            b'"name": "a", "managedFields": ["m"]}}}',
            "a managedFields entry is not an object",
        ),
        (
            b'{"type": "ADDED", "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"uid": "u", '
            b'"name": "a", "managedFields": [{"manager": "m", "time": "yesterday"}]}}}',
            "Invalid isoformat string: 'yesterday'",
        ),
    ],
)
def test_native_errors_name_the_problem_and_keep_what_was_read(tmp_path: Path, text: bytes, problem: str) -> None:
    good = (CAPTURES / "fight-data.jsonl").read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(good + text + b"\n")
    line = good.count(b"\n") + 1
    native, python = both("replay", "--output", "json", str(bad), cwd=tmp_path)
    assert native == python
    assert native[0] == 2
    assert f"{bad}:{line}: " in native[2].decode()
    assert problem in native[2].decode()
    assert b'"type":"fight"' in native[1]  # the analysis of what came before is kept


def test_native_reads_entries_without_a_time_as_the_reference_does(tmp_path: Path) -> None:
    """A managedFields entry may lack its time, or hold null: the write is untimed by it, in both engines."""

    def event(kind: str, rv: int, value: str, time: str | None) -> bytes:
        entry: dict[str, object] = {"manager": "m", "operation": "Update", "fieldsV1": {"f:data": {"f:k": {}}}}
        if time != "missing":
            entry["time"] = time
        meta = {"uid": "u1", "name": "a", "namespace": "n", "resourceVersion": str(rv), "managedFields": [entry]}
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": value}}
        return orjson.dumps({"type": kind, "object": obj}) + b"\n"

    capture = tmp_path / "untimed.jsonl"
    capture.write_bytes(
        event("ADDED", 1, "a", "missing") + event("MODIFIED", 2, "b", None) + event("MODIFIED", 3, "c", "missing")
    )
    native, python = both("replay", "--output", "table", str(capture), cwd=tmp_path)
    assert native == python
    assert native[0] == 0, native[2]


@pytest.mark.parametrize("adopted", [True, False])
def test_a_controller_that_adopts_or_orphans_an_object_counts_from_that_version(tmp_path: Path, adopted: bool) -> None:
    """The real shared-manager-name fight (one manager name flipping a label), with a controller ownerReference
    added after the first version (adopted: the flips are then an echo of the controller, not a fight) or present
    in the first version only (orphaned: a fight again). Both engines read it from each version."""
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "d1", "controller": True}
    lines = []
    for i, line in enumerate((CAPTURES / "fight-shared-manager.jsonl").read_bytes().splitlines()):
        event = orjson.loads(line)
        meta = event["object"]["metadata"]
        if meta["name"] == "shared" and (i > 0) == adopted:
            meta["ownerReferences"] = [owner]
        lines.append(orjson.dumps(event))
    capture = tmp_path / "owned.jsonl"
    capture.write_bytes(b"\n".join(lines) + b"\n")
    native, python = both("replay", "--output", "json", str(capture), cwd=tmp_path)
    assert native == python
    assert native[0] == 0, native[2]
    fights = [f for f in map(orjson.loads, native[1].splitlines()) if f["type"] == "fight"]
    assert [f["object"]["name"] for f in fights] == ([] if adopted else ["shared"])
