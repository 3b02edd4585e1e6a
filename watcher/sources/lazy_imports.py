"""Import kubernetes-asyncio's packages name by name, on first use, instead of all at once.

kubernetes-asyncio's package `__init__`s import every generated API class and model: about 1,500 modules and
36 MiB of resident memory, the largest part of an idle fightwatch. fightwatch uses the config loaders, `ApiClient`
with raw JSON, and (with leader election on) the Lease API. `install()` puts a finder in front of the import
system that loads the packages below with the same names, each imported from the same module as in the package's
`__init__` when it is first read (PEP 562's module `__getattr__`). A package whose `__init__` holds anything but
imports and constant assignments (a release that changes its shape) is imported as usual.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
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

# name -> (module, attribute in it, or None for the module itself)
Names = dict[str, tuple[str, str | None]]


def install() -> None:
    """Load LAZY_PACKAGES lazily from now on (a no-op when installed already, or a package is imported)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def lazy_names(source: str) -> tuple[Names, dict[str, Any]] | None:
    """The names an `__init__` imports and the constants it assigns; None if it does anything else."""
    names: Names = {}
    constants: dict[str, Any] = {}
    for node in ast.parse(source).body:
        match node:
            case ast.Expr(value=ast.Constant()):  # the docstring
                continue
            case ast.ImportFrom(module="__future__"):
                continue
            case ast.ImportFrom(module=str(module), level=0) if all(alias.name != "*" for alias in node.names):
                for alias in node.names:
                    names[alias.asname or alias.name] = (module, alias.name)
            case ast.Import(names=[ast.alias(name=module, asname=str(asname))]):
                names[asname] = (module, None)
            case ast.Assign(targets=[ast.Name(id=target)]):
                try:
                    constants[target] = ast.literal_eval(node.value)
                except ValueError:
                    return None
            case _:
                return None
    return names, constants


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, _target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in LAZY_PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or not spec.origin.endswith("__init__.py"):
            return None
        with open(spec.origin, encoding="utf-8") as source:
            found = lazy_names(source.read())
        if found is None:
            return None
        spec.loader = _Loader(*found)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, names: Names, constants: dict[str, Any]) -> None:
        self.names = names
        self.constants = constants

    def create_module(self, _spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        names = self.names

        def __getattr__(name: str) -> Any:  # noqa: N807 - PEP 562
            try:
                source, attribute = names[name]
            except KeyError:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None
            value = importlib.import_module(source)
            if attribute is not None:
                value = getattr(value, attribute)
            setattr(module, name, value)
            return value

        def __dir__() -> list[str]:  # noqa: N807 - PEP 562
            return sorted({*module.__dict__, *names})

        module.__dict__.update(self.constants, __getattr__=__getattr__, __dir__=__dir__)
