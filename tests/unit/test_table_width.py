"""The table fits the terminal: cut to its width (`COLUMNS`, else the terminal's), whole in `-o wide`, when piped,
and in JSON and YAML, which hold the same objects."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import termios
from typing import Any

import orjson
import pytest
import yaml

from watcher.cli import main
from watcher.rendering.columns import Cell, Column, lay_out
from watcher.rendering.output import table_width


def demo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    assert main(["demo", *args]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def json_findings(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    out, _ = demo(capsys, "-o", "json", *args)
    return [orjson.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("width", [80, 120])
def test_no_line_of_the_demo_is_longer_than_the_terminal(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    out, err = demo(capsys)
    lines = out.splitlines() + err.splitlines()
    assert max(len(line) for line in lines) <= width
    assert max(len(line) for line in lines) > width - 10  # (the width is used, not a narrower one)
    header = next(i for i, line in enumerate(lines) if line.startswith("#"))
    assert {"#", "TYPE", "STATE", "OBJECT", "WRITERS", "FIELDS"} <= set(lines[header].split())
    rows = [line.split()[0] for line in lines[header + 1 :][: len(json_findings(capsys))]]
    assert rows == [str(n) for n in range(1, len(rows) + 1)]  # (every finding keeps its row and number)


def test_wide_gives_every_writer_and_field_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out, _ = demo(capsys, "-o", "wide")
    rows = out.splitlines()
    assert any(len(line) > 200 for line in rows)
    for finding in json_findings(capsys):
        writers = ", ".join(w["display"] for w in finding["writers"])
        fields = ", ".join(finding["fields"])
        ref = finding["object"]
        name = f"{ref['namespace']}/{ref['name']}" if ref["namespace"] else f" {ref['name']}"
        assert any(name in line and writers in line and fields in line for line in rows), (name, writers, fields)


def test_piped_without_columns_the_table_is_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl never cuts a table; off a terminal (grep, a file) neither does fightwatch, unless COLUMNS says."""
    piped, _ = demo(capsys)
    wide, _ = demo(capsys, "-o", "wide")
    assert piped == wide


@pytest.mark.parametrize("incidents", [False, True])
def test_yaml_holds_the_json_objects_in_their_order(capsys: pytest.CaptureFixture[str], incidents: bool) -> None:
    more = ["--incidents"] if incidents else []
    out, _ = demo(capsys, "-o", "yaml", *more)
    assert out.startswith("---\n")
    assert list(yaml.safe_load_all(out)) == json_findings(capsys, *more)


def test_the_width_is_columns_else_the_terminals_else_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert table_width(io.StringIO()) is None
    leader, follower = os.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 97, 0, 0))
        with open(follower, "w", closefd=False) as terminal:
            assert table_width(terminal) == 97
            assert table_width(terminal, wide=True) is None
            monkeypatch.setenv("COLUMNS", "132")
            assert table_width(terminal) == 132
            assert table_width(io.StringIO()) == 132
            monkeypatch.setenv("COLUMNS", "wide")  # (not a number: ignored)
            assert table_width(terminal) == 97
    finally:
        os.close(leader)
        os.close(follower)


COLUMNS = [
    Column("#"),
    Column("NAME", cut="middle", minimum=10),
    Column("TEXT", cut="end", minimum=8),
    Column("EXTRA", drop=2),
    Column("WHEN", drop=1),
]
ROWS: list[list[Cell]] = [
    ["1", ("Deployment.apps team-a/frontend", "Deployment team-a/frontend"), "a rather long text", "x", "yesterday"],
    ["2", ("ConfigMap b/c", "ConfigMap b/c"), "short", "y", "today"],
]


def test_every_cell_is_whole_without_a_width() -> None:
    lines = lay_out(COLUMNS, ROWS, None)
    assert lines[1].split("  ")[1] == "Deployment.apps team-a/frontend"
    assert "a rather long text" in lines[1]
    assert lines[0].split() == ["#", "NAME", "TEXT", "EXTRA", "WHEN"]


def test_a_column_shows_its_shorter_forms_before_being_cut() -> None:
    lines = lay_out(COLUMNS, ROWS, 70)
    assert "Deployment team-a/frontend" in lines[1]
    assert "ConfigMap b/c" in lines[2]  # (the column's cells read alike: all in the shorter form)
    assert "Deployment.apps" not in "\n".join(lines)


def test_cut_columns_give_up_text_before_a_column_is_dropped() -> None:
    lines = lay_out(COLUMNS, ROWS, 52)
    assert lines[0].split() == ["#", "NAME", "TEXT", "EXTRA", "WHEN"]
    assert max(map(len, lines)) <= 52
    assert "…" in lines[1]


@pytest.mark.parametrize(("width", "headers"), [(40, ["#", "NAME", "TEXT", "EXTRA"]), (28, ["#", "NAME", "TEXT"])])
def test_columns_are_dropped_lowest_first(width: int, headers: list[str]) -> None:
    lines = lay_out(COLUMNS, ROWS, width)
    assert max(map(len, lines)) <= width
    assert lines[0].split() == headers


@pytest.mark.parametrize("width", [20, 12, 5])
def test_no_line_is_longer_even_when_nothing_fits(width: int) -> None:
    assert max(map(len, lay_out(COLUMNS, ROWS, width))) <= width


def test_a_middle_cut_keeps_both_ends() -> None:
    (_, row) = lay_out([Column("NAME", cut="middle")], [["Deployment very-long-namespace/the-name-that-matters"]], 25)
    assert row == "Deployment v…that-matters"
