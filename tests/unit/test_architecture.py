"""docs/architecture.md names real code: every `watcher....` name of its "Life of a watch event" section resolves to
a module, class or function, so the page a newcomer reads follows the code as it is."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
NAME = re.compile(r"`(watcher(?:\.\w+)+)`")


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _resolves(dotted: str) -> bool:
    """Import the longest module prefix, then read the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_the_life_of_a_watch_event_names_functions_that_exist() -> None:
    names = NAME.findall(_section("Life of a watch event"))
    assert len(set(names)) >= 25  # (the section lists the whole path)
    missing = sorted({n for n in names if not _resolves(n)})
    assert missing == []
