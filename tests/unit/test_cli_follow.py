"""`fightwatch audit --follow`: a log read as it is written. A conflict storm is reported while the file still
grows (the rest of the recording not yet written), in the envelope a managed cluster's CLI prints (`aws logs tail`
lines), the same way from a pipe; Ctrl-C (SIGINT) or the pipe's end prints the summary and writes the report."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from harness.envelopes import WRITERS

FIXTURE = Path(__file__).parents[1] / "fixtures" / "audit" / "rmw-fight.metadata.jsonl"
EVENTS: list[dict[str, Any]] = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
NOOP_LOOP: list[dict[str, Any]] = [
    json.loads(line) for line in FIXTURE.with_name("noop-loop.metadata.jsonl").read_text().splitlines()
]
WAIT = 60  # seconds at most for a line of output: a bound on a hang, not a measure of speed
READERS: list[threading.Thread] = []


class Output:
    """The lines a process prints, read by a thread, so that waiting for one never blocks past WAIT."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seen: list[bytes] = []
        self.reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.reader.start()
        READERS.append(self.reader)

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(b"")

    def until(self, text: bytes) -> bytes:
        while True:
            try:
                line = self.lines.get(timeout=WAIT)
            except queue.Empty:
                pytest.fail(f"no line with {text!r} within {WAIT} s; printed: {b''.join(self.seen)!r}")
            self.seen.append(line)
            if not line:
                pytest.fail(f"the output ended without {text!r}: {b''.join(self.seen)!r}")
            if text in line:
                return line

    def rest(self) -> list[bytes]:
        """The lines still to come, up to the end of the output."""
        lines = []
        while line := self.lines.get(timeout=WAIT):
            lines.append(line)
        return lines


@pytest.fixture
def follow(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
    while READERS:
        READERS.pop().join(WAIT)
    for process in started:
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def start(started: list[subprocess.Popen[bytes]], *args: str, stdin: int | None = None) -> subprocess.Popen[bytes]:
    """Start `fightwatch audit --follow`, with SIGINT as a terminal's Ctrl-C finds it.

    A process inherits an ignored SIGINT (a shell's background job ignores it, and so does everything it starts):
    where this test runs so, the process starts with SIGINT at its default, as it would from a terminal.
    """
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        process = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "watcher", "audit", "--follow", *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    started.append(process)
    return process


def exit_status(process: subprocess.Popen[bytes]) -> int:
    """Wait for the process to exit; one that does not within WAIT fails the test with its threads' stacks.

    (faulthandler, on with `-X faulthandler`, prints them on SIGABRT.)
    """
    try:
        return process.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        process.wait(timeout=WAIT)
        stacks = process.stderr.read().decode(errors="replace") if process.stderr is not None else ""
        pytest.fail(f"still running {WAIT} s after it was told to stop; where it was:\n{stacks}")


def storm_opens_at() -> int:
    """How many events of the recording are written before its conflict storm opens (its 10th conflict)."""
    conflicts = [i for i, e in enumerate(EVENTS) if e.get("responseStatus", {}).get("code") == 409]
    return conflicts[9] + 1


def test_a_storm_is_found_while_the_file_grows_and_ctrl_c_prints_the_summary(
    follow: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    log = tmp_path / "audit.log"
    lines = WRITERS["eks-tail"][1](EVENTS).splitlines(keepends=True)
    # (the tail lines interleave another stream's: write up to the storm's opening event, counted in audit events)
    audit_lines = [i for i, line in enumerate(lines) if b"kube-apiserver-audit" in line]
    cut = audit_lines[storm_opens_at() - 1] + 1
    log.write_bytes(b"".join(lines[:5]))
    process = start(follow, "--output", "json", "--html", str(tmp_path / "report.html"), str(log))
    assert process.stdout is not None
    assert process.stderr is not None
    out = Output(process.stdout)
    with log.open("ab") as growing:
        growing.write(b"".join(lines[5:cut]))
    opened = json.loads(out.until(b'"finding opened"'))
    assert (opened["type"], opened["namespace"], opened["name"]) == ("conflict_storm", "rmw-fight", "settings")
    assert log.stat().st_size < len(b"".join(lines))  # found before the rest was written
    with log.open("ab") as growing:  # the rest, then another scenario's events: once its finding shows, all was read
        growing.write(b"".join(lines[cut:]) + WRITERS["eks-tail"][1](NOOP_LOOP))
    out.until(b'"type":"noop_writes"')
    process.send_signal(signal.SIGINT)
    assert exit_status(process) == 0
    summary = [json.loads(line) for line in out.rest() if b'"state":' in line]  # --output json: a finding a line
    storm = next(f for f in summary if f["id"] == opened["id"])
    assert sum(c["conflicts"] for c in storm["clients"]) == sum(
        e.get("responseStatus", {}).get("code") == 409 for e in EVENTS
    )
    assert {f["type"] for f in summary} == {"conflict_storm", "noop_writes"}
    assert (tmp_path / "report.html").exists()
    assert b"wrote the report" in process.stderr.read()


def _records(form: str) -> list[bytes]:
    """The records of the recording in a form, each whole: a LogEntry a line, or a YAML document `---` first."""
    data = WRITERS[form][1](EVENTS)
    if form == "gke-gcloud-tail":
        return [b"---\n" + document for document in data.split(b"---\n")[1:]]
    return data.splitlines(keepends=True)


@pytest.mark.parametrize("form", ["gke-sink", "gke-gcloud-tail"])
def test_a_pipe_is_read_as_it_is_written_and_its_end_prints_the_summary(
    form: str, follow: list[subprocess.Popen[bytes]]
) -> None:
    """A sink's lines, or `gcloud beta logging tail`'s YAML (a document is read when the next one starts)."""
    process = start(follow, "-", stdin=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    out = Output(process.stdout)
    data = _records(form)
    written = storm_opens_at() + (form == "gke-gcloud-tail")
    process.stdin.write(b"".join(data[:written]))
    process.stdin.flush()
    out.until(b"finding opened")
    process.stdin.write(b"".join(data[written:]))
    process.stdin.close()
    assert exit_status(process) == 0
    out.until(b"1 conflict storm")  # the table's totals
    out.until(b"Envelopes: ")


def test_follow_reads_one_log_and_no_gzip(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "watcher", "audit", "--follow", str(FIXTURE), str(FIXTURE)],
        capture_output=True,
        check=False,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert b"--follow reads one log" in result.stderr
    packed = tmp_path / "audit.log.gz"
    packed.write_bytes(b"\x1f\x8b\x08\x00" + bytes(20))
    result = subprocess.run(
        [sys.executable, "-m", "watcher", "audit", "--follow", str(packed)],
        capture_output=True,
        check=False,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert f"{packed}: a gzipped log cannot be followed".encode() in result.stderr
