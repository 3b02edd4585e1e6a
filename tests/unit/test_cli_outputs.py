"""Every output of `fightwatch audit` and `fightwatch replay` (`-o table|wide|json|yaml`, `--html`) on every file under
tests/fixtures, found by glob (a fixture added later is taken in): it ends in a result or in a clear error, never a
traceback.

A watch capture (under captures/, or named `*.watch.*`) is replayed, alone and with the audit log recorded beside it;
any other file is read as an audit log. The exit status is 0, 3 with findings (`--fail-on-findings`), or 2 with a
message naming the file (a file that is no audit log, or a record the readers refuse). The command runs in this
process (`cli.main`), as the user's shell would run it, only without a new interpreter per run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import orjson
import pytest
import yaml

from watcher import cli, offline
from watcher.exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK

FIXTURES: Final = Path(__file__).parents[1] / "fixtures"
FILES: Final = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".md")


def _is_capture(path: Path) -> bool:
    return "captures" in path.relative_to(FIXTURES).parts or ".watch." in path.name


def _audit_beside(capture: Path) -> Path | None:
    """The audit log recorded with a capture (`x.watch.jsonl`: `x.audit.jsonl`, `x.metadata.jsonl`, ...), if any."""
    stem = capture.name.partition(".watch.")[0]
    beside = sorted(
        p for p in capture.parent.glob(f"{stem}.*") if p != capture and p.suffix != ".md" and ".watch." not in p.name
    )
    return beside[0] if beside else None


def _commands() -> list[tuple[str, list[str]]]:
    commands = []
    for path in FILES:
        name = str(path.relative_to(FIXTURES))
        if not _is_capture(path):
            commands.append((name, ["audit", str(path)]))
            continue
        commands.append((name, ["replay", str(path)]))
        audit = _audit_beside(path) if ".watch." in path.name else None
        if audit is not None:
            commands.append((f"{name}+{audit.name}", ["replay", str(path), "--audit", str(audit)]))
    return commands


COMMANDS: Final = _commands()
OUTPUTS: Final = (("table", True, False), ("wide", False, False), ("json", False, False), ("yaml", False, True))


def test_the_fixtures_are_found() -> None:
    names = [name for name, _ in COMMANDS]
    assert len(FILES) > 100
    assert "audit/rmw-fight.watch.jsonl+rmw-fight.metadata.jsonl" in names
    assert any(name.startswith("real/") and "+" in name for name in names)


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_output_ends_in_a_result_or_a_clear_error(
    name: str, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offline, "tune_gc", lambda: None)  # (the process's collector is pytest's too)
    files = [a for a in command[1:] if not a.startswith("-")]
    for output, html, skip in OUTPUTS:
        report = tmp_path / f"{output}.html"
        args = [*command, "-o", output, "--fail-on-findings"]
        args += ["--html", str(report)] if html else []
        args += ["--skip-invalid"] if skip else []
        status = cli.main(args)
        out, err = capsys.readouterr()
        where = f"{name} -o {output}: {err}"
        assert "Traceback" not in err, where
        assert status in {EXIT_OK, EXIT_FINDINGS, EXIT_ERROR}, where
        if status == EXIT_ERROR:
            assert any(f"fightwatch: {f}" in err for f in files), where  # the error names the file
        if output == "json":
            found = [orjson.loads(line) for line in out.splitlines()]
            assert status == EXIT_ERROR or (status == EXIT_FINDINGS) == bool(found), where
        elif output == "yaml":
            assert all(isinstance(document, dict) for document in yaml.safe_load_all(out)), where
        elif out:  # (an error before any event was read prints no table)
            assert " events" in out, where
        if html and (status != EXIT_ERROR or report.exists()):
            text = report.read_text()
            assert "What was analysed" in text, where
            assert "Time range" in text, where
