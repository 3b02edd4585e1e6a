"""The exports of audit records that are not JSON: YAML documents and CSV tables, a record at a time.

- **YAML**: what `gcloud logging read` and `gcloud logging tail` print unless given `--format=json`, LogEntries as
  YAML documents with `---` between them (keys sorted; strings that would read as another type quoted). A document is
  parsed when the next one starts (or the stream ends), so memory holds one record at a time and a followed stream
  gives each record as soon as the one after it arrives.
- **CSV**: a table with a header row, as CloudWatch Logs Insights' console exports query results (a column per field
  of the query: `@timestamp`, `@message`, `@logStream`, ...). Fields may span lines (quoted).

Both give each record with the line it starts on, as plain values, for `envelopes.Opener` to open as it opens a
JSON record. Times stay the strings they are written as (YAML's implicit timestamps are not resolved: `parse_time`
reads them, to the nanosecond), and every problem is a `LineError` naming its line.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from typing import IO, Any, Final, Literal

import yaml

Form = Literal["yaml", "csv"]

# The first line of a YAML document: a document marker, or a mapping's first key (`insertId: ...`, `'@type': ...`).
_YAML_START: Final = re.compile(rb"---(?:[ \t].*)?|(?:[A-Za-z_][\w./@-]*|'[^'\n]*'|\"[^\"\n]*\"):(?:[ \t].*)?")
_DOCUMENT_MARKERS: Final = (b"---", b"...")
# A CSV header row of field names, quoted or not (`@timestamp,@message,@logStream`).
_CSV_HEADER: Final = re.compile(rb'("?)[@\w.-]+\1(?:,("?)[@\w.-]+\2)+')
_TIMESTAMP: Final = "tag:yaml.org,2002:timestamp"
_MAX_FIELD: Final = 16 * 2**20  # a CSV field (an event's JSON text): CloudWatch Logs' events are at most 256 KiB


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """YAML's safe loader without implicit timestamps: a time stays the text it is written as."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def sniff(head: bytes) -> Form | None:
    """Tell a stream that is YAML or CSV by its first line that is not blank; None for anything else (JSON, lines)."""
    for line in head.splitlines():
        text = line.strip()
        if not text or text.startswith(b"#"):
            continue
        if text[:1] in (b"{", b"["):
            return None
        if _CSV_HEADER.fullmatch(text) and b"@message" in text:  # a header row of Logs Insights' fields
            return "csv"
        return "yaml" if _YAML_START.fullmatch(line.rstrip()) else None
    return None


class LineError(ValueError):
    """A record that cannot be read, on `line`."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def yaml_records(stream: IO[bytes]) -> Iterator[tuple[int, object]]:
    """Yield (line where it starts, parsed value) of each YAML document of a stream.

    Documents without content are left out. A document that is not YAML, or that the stream ends in the middle of
    (its last line has no line break: a cut file), is yielded as a `LineError` in place of its value, and the stream
    is read on.
    """
    for start, text, complete in _documents(stream):
        if not complete:
            yield start, LineError(start, "the log ends inside this YAML document (truncated file?)")
            continue
        try:
            yield start, yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (SafeLoader's, no timestamps)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            yield start, LineError(start + (mark.line if mark is not None else 0), f"not YAML ({exc.problem or exc})")
        except yaml.YAMLError as exc:
            yield start, LineError(start, f"not YAML ({exc})")


def _documents(stream: IO[bytes]) -> Iterator[tuple[int, bytes, bool]]:
    """(line where it starts, text, whether its last line ends) of each document with content."""
    lines: list[bytes] = []
    start = 1
    for number, line in enumerate(stream, 1):
        marker = line.rstrip()
        if marker in _DOCUMENT_MARKERS or line.startswith((b"--- ", b"---\t")):
            if _content(lines):
                yield start, b"".join(lines), True
            lines, start = ([line[4:]], number) if marker not in _DOCUMENT_MARKERS else ([], number + 1)
            continue
        if not lines:
            start = number
        lines.append(line)
    if _content(lines):
        yield start, b"".join(lines), lines[-1].endswith(b"\n")


def _content(lines: list[bytes]) -> bool:
    return any(line.strip() and not line.lstrip().startswith(b"#") for line in lines)


def csv_records(stream: IO[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line where it starts, {column: value}) of each row of a CSV table with a header row.

    Empty cells are left out. A `LineError` for a row that is not CSV (a quote not closed: a cut file) or has more
    cells than the header: the table cannot be read past it.
    """
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")
    try:
        csv.field_size_limit(max(csv.field_size_limit(), _MAX_FIELD))
        reader = csv.reader(text, strict=True)
        header: list[str] | None = None
        start = 1
        try:
            for cells in reader:
                if header is None:
                    header = [cell.strip() for cell in cells]
                elif len(cells) > len(header):
                    raise LineError(start, f"a row of {len(cells)} cells under a header of {len(header)}")
                elif any(cells):
                    yield start, {name: cell for name, cell in zip(header, cells, strict=False) if cell != ""}
                start = reader.line_num + 1
        except csv.Error as exc:
            raise LineError(start, f"not CSV ({exc}; truncated file?)") from None
    finally:
        text.detach()


__all__ = ["Form", "LineError", "csv_records", "sniff", "yaml_records"]
