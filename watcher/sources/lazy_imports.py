"""Import kubernetes-asyncio's packages name by name, on first use, instead of all at once.

kubernetes-asyncio's package `__init__`s import every generated API class and model: about 1,500 modules and
36 MiB of resident memory, the largest part of an idle fightwatch. fightwatch uses the config loaders, `ApiClient`
with raw JSON, and (with leader election on) the Lease API. `install()` puts a finder in front of the import
system that loads the packages below as modules whose names are imported when first read (PEP 562's module
`__getattr__`), each from the module the package's `__init__` imports it from.

Only an `__init__` made of nothing but such imports, string constants and `__all__` loads this way (a release
that changes its shape is imported as usual). The check reads it a line at a time, and a name is looked up in the
file when first asked for: nothing of the 200 KB of `__init__`s is kept, and no syntax tree is built (which
would leave 2 MiB of freed but fragmented heap behind).
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

LAZY_PACKAGES = frozenset(
    {
        "kubernetes_asyncio",
        "kubernetes_asyncio.client",
        "kubernetes_asyncio.client.api",
        "kubernetes_asyncio.client.models",
    }
)

# The statements a lazy `__init__` may hold, one a line (besides its docstring and an `__all__` list).
_STATEMENT = re.compile(
    r"""
      from \s+ [\w.]+ \s+ import \s+ \w+ (?: \s+ as \s+ \w+ )?
    | import \s+ [\w.]+ \s+ as \s+ \w+
    | __\w+__ \s* = \s* (?: "[^"\\]*" | '[^'\\]*' )
    """,
    re.VERBOSE,
)
_DOCSTRING = re.compile(r'\A(?:\s*#[^\n]*\n)*\s*(?:"""[^\\]*?"""|\'\'\'[^\\]*?\'\'\')')  # (after comments)
_ALL = re.compile(r"^__all__\s*=\s*\[([^\]]*)\]", re.MULTILINE)
_CONSTANT = re.compile(r"^(__\w+__)\s*=\s*(\"[^\"\\]*\"|'[^'\\]*')\s*$", re.MULTILINE)


def install() -> None:
    """Load LAZY_PACKAGES lazily from now on (a no-op when installed already, or a package is imported)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def lazy_shape(source: str) -> dict[str, Any] | None:
    """Return the string constants of an `__init__` that holds only imports of names and constants.

    That is, nothing but one-line imports of names, string constants and an `__all__` list; None if it holds anything
    else.
    """
    rest = _ALL.sub("", _DOCSTRING.sub("", source, count=1), count=1)
    for line in rest.splitlines():
        text = line.split("#", 1)[0].strip()
        if text and not _STATEMENT.fullmatch(text):
            return None
    return {name: ast.literal_eval(value) for name, value in _CONSTANT.findall(source)}


def find_name(source: str, name: str) -> tuple[str, str | None] | None:
    """Where an `__init__` imports `name` from: (module, attribute), attribute None for `import module as name`."""
    found = re.search(
        rf"^(?:from\s+([\w.]+)\s+import\s+(?:{name}|(\w+)\s+as\s+{name})|import\s+([\w.]+)\s+as\s+{name})\s*(?:#.*)?$",
        source,
        re.MULTILINE,
    )
    if found is None:
        return None
    module, renamed, whole = found.groups()
    return (module, renamed or name) if module else (whole, None)


def all_names(source: str) -> list[str]:
    """Return the `__all__` of an `__init__`, or every name it imports."""
    listed = _ALL.search(source)
    if listed is not None:
        return list(ast.literal_eval(f"[{listed.group(1)}]"))
    return re.findall(r"^(?:from\s+[\w.]+\s+import\s+(?:\w+\s+as\s+)?|import\s+[\w.]+\s+as\s+)(\w+)", source, re.M)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, _target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in LAZY_PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or not spec.origin.endswith("__init__.py"):
            return None
        constants = lazy_shape(Path(spec.origin).read_text(encoding="utf-8"))
        if constants is None:
            return None
        spec.loader = _Loader(Path(spec.origin), constants)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, init: Path, constants: dict[str, Any]) -> None:
        self.init = init
        self.constants = constants

    def create_module(self, _spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        init = self.init

        def __getattr__(name: str) -> Any:  # noqa: N807 - PEP 562
            source = init.read_text(encoding="utf-8")
            found = find_name(source, name) if name.isidentifier() else None
            value: Any
            if found is not None:
                value = importlib.import_module(found[0])
                if found[1] is not None:
                    value = getattr(value, found[1])
            elif name == "__all__":
                value = all_names(source)
            else:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            setattr(module, name, value)
            return value

        def __dir__() -> list[str]:  # noqa: N807 - PEP 562
            return sorted({*module.__dict__, *all_names(init.read_text(encoding="utf-8"))})

        module.__dict__.update(self.constants, __getattr__=__getattr__, __dir__=__dir__)
