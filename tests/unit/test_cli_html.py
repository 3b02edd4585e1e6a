"""`--html FILE`: the self-contained report of `replay`, `audit` and `demo`, written whole or not at all, also when
the input breaks off (what was analysed before is in it, and the report says where it stopped)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson

from tests.unit.captures import capture

AUDIT = Path(__file__).parents[1] / "fixtures" / "audit"


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True, check=False, timeout=120)


def _cards(html: str) -> set[str]:
    return set(re.findall(r'<article[^>]* id="finding-([0-9a-f]+)"', html))


def test_replay_writes_a_report_with_every_finding_it_prints(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    names = ("fight-three-writers", "hot-loop-status", "fight-cabundle")
    result = run("replay", *(str(capture(n)) for n in names), "-o", "json", "--html", str(report))
    assert result.returncode == 0, result.stderr
    printed = [orjson.loads(line) for line in result.stdout.splitlines()]
    html = report.read_text()
    assert _cards(html) == {f["id"] for f in printed}
    assert f"wrote the report to {report}" in result.stderr.decode()
    for name in names:
        assert f"{name}.jsonl" in html  # the summary names what was analysed
    assert "Content-Security-Policy" in html


def test_audit_and_a_joined_replay_write_reports_too(tmp_path: Path) -> None:
    audit = tmp_path / "audit.html"
    result = run("audit", str(AUDIT / "rmw-fight.metadata.jsonl"), "-o", "json", "--html", str(audit))
    assert result.returncode == 0, result.stderr
    assert _cards(audit.read_text()) == {orjson.loads(line)["id"] for line in result.stdout.splitlines()}
    assert "<td>ops/labeler-6d9c7f5b4-qx2lp</td>" in audit.read_text()  # the pod of a client, in the clients table
    joined = tmp_path / "joined.html"
    watch = str(AUDIT / "rmw-fight.watch.jsonl")
    result = run("replay", watch, "--audit", str(AUDIT / "rmw-fight.metadata.jsonl"), "--html", str(joined))
    assert result.returncode == 0, result.stderr
    assert 'data-kind="conflict"' in joined.read_text()  # the 409s audit events show, on the fight's timeline


def test_a_capture_that_breaks_off_still_gets_its_report_saying_where(tmp_path: Path) -> None:
    whole = capture("fight-three-writers").read_bytes()
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(whole + b'{"type": "MODIFIED", "object": {"metadata": \n')
    report = tmp_path / "report.html"
    result = run("replay", str(broken), "--html", str(report))
    assert result.returncode == 2
    html = report.read_text()
    assert len(_cards(html)) == 1
    assert f"{broken}:" in html  # the file and line it stopped at
    assert "covers the events read before it" in html


def test_a_report_that_cannot_be_written_is_an_error_naming_the_file_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "missing-directory" / "report.html"
    result = run("replay", str(capture("fight-data")), "--html", str(target))
    assert result.returncode == 2
    assert f"--html {target}: No such file or directory" in result.stderr.decode()
    assert not target.parent.exists()
    assert "fight-data/service-endpoints" in result.stdout.decode()  # the table is printed all the same
