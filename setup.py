"""Build steps beyond pyproject.toml: the per-event code is compiled, in two parts.

- mypyc compiles the modules every watch event runs through to C. They are the same typed Python the tests and
  `mypy --strict` check; compiled, they replay a capture about 1.4-1.5x as fast (docs/benchmarks.md).
- setuptools-rust builds the native engine (native/, Rust) into `watcher._native`: it parses events and
  attributes writes for `fightwatch run` and `replay`, about 1.7x as fast again (docs/benchmarks.md). Its crates
  come from crates.io at the versions native/Cargo.lock pins (`cargo --locked`); `scripts/native.sh` checks cargo
  against the Rust version native/Cargo.toml names and fetches them first. It is optional: without cargo, or where
  it does not build, the build warns and the package runs on the Python engine, with the same results. With
  FIGHTWATCH_REQUIRE_NATIVE=1 (`make test`, the image's build stage) either is an error instead.

Set FIGHTWATCH_PURE_PYTHON=1 to build a pure-Python package (same results, slowest); without a C compiler or
Python's headers it is built so anyway, with a warning. `fightwatch --version` tells which build is installed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools_rust import RustExtension

# The per-event path: capture and audit log reading (the clouds' envelopes too), the model and the detection core.
# `words.py` stays Python (see it);
# everything else (CLI, live watcher, sinks) is I/O-bound and stays Python too.
COMPILED = [
    "watcher/model.py",
    "watcher/sources/audit.py",
    "watcher/sources/capture.py",
    "watcher/sources/envelopes.py",
    *sorted(
        str(path) for path in Path("watcher/detection").glob("*.py") if path.name not in {"__init__.py", "words.py"}
    ),
]


def missing_build_tools() -> str | None:
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[:1]
    if not compiler or shutil.which(compiler[0]) is None:
        return f"no C compiler ({compiler[0] if compiler else 'CC'}: install gcc)"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python.h (install python3-dev)"
    return None


def compiled_modules() -> list[Extension]:
    if os.environ.get("FIGHTWATCH_PURE_PYTHON", "") not in {"", "0"}:
        return []
    missing = missing_build_tools()
    if missing:
        print(f"WARNING: fightwatch is built as pure Python (slower): {missing}", file=sys.stderr)
        return []
    from mypyc.build import mypycify  # noqa: PLC0415 - only the compiled build needs mypy

    extensions = mypycify(COMPILED, opt_level="3", group_name="watcher")
    # The group's functions are called within its shared object only (the modules' shims reach it through a capsule,
    # and PyInit_* keep their default visibility): hidden, the dynamic linker neither exports nor relocates them,
    # 0.25 MiB less resident at import.
    for extension in extensions:
        extension.extra_compile_args.append("-fvisibility=hidden")
    return extensions


def native_front_end() -> list[RustExtension]:
    if os.environ.get("FIGHTWATCH_PURE_PYTHON", "") not in {"", "0"}:
        return []
    required = os.environ.get("FIGHTWATCH_REQUIRE_NATIVE", "") not in {"", "0"}
    cargo = os.environ.get("CARGO", "cargo")  # as setuptools-rust finds it
    if shutil.which(cargo) is None:
        why = f"no {cargo} (install Rust, e.g. with rustup, at native/Cargo.toml's rust-version or later)"
        if required:
            raise SystemExit(f"ERROR: fightwatch's native engine is required (FIGHTWATCH_REQUIRE_NATIVE): {why}")
        print(
            "WARNING: fightwatch's native engine is not built (fightwatch runs on the Python engine instead):",
            why,
            file=sys.stderr,
        )
        return []
    # The crates at the versions Cargo.lock pins, never others. Always a release build, editable installs too: the
    # tests and the benchmark use it.
    return [
        RustExtension(
            "watcher._native", "native/Cargo.toml", optional=not required, debug=False, cargo_manifest_args=["--locked"]
        )
    ]


setup(ext_modules=compiled_modules(), rust_extensions=native_front_end())
