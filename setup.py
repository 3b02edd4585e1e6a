"""Build step beyond pyproject.toml: the modules every watch event runs through are compiled to C with mypyc.

They are the same typed Python the tests and `mypy --strict` check; mypyc turns them into a C extension, which
replays a capture about 1.4x as fast (README, "Benchmark"). Set FIGHTWATCH_PURE_PYTHON=1 to build a pure-Python
package instead (no C compiler needed; same results, slower).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import Extension, setup

# The per-event path: capture reading, the model and the detection core. `words.py` stays Python (see it);
# everything else (CLI, live watcher, sinks) is I/O-bound and stays Python too.
COMPILED = [
    "watcher/model.py",
    "watcher/sources/capture.py",
    *sorted(
        str(path) for path in Path("watcher/detection").glob("*.py") if path.name not in {"__init__.py", "words.py"}
    ),
]


def compiled_modules() -> list[Extension]:
    if os.environ.get("FIGHTWATCH_PURE_PYTHON", "") not in {"", "0"}:
        return []
    from mypyc.build import mypycify  # noqa: PLC0415 - only the compiled build needs mypy

    return mypycify(COMPILED, opt_level="3", group_name="watcher")


setup(ext_modules=compiled_modules())
