#!/usr/bin/env bash
# Say loudly when the installed fightwatch lacks its compiled parts (setup.py): the mypyc-compiled per-event modules
# or the native engine (watcher._native, Rust). Both are optional to the install, which then goes on with pure
# Python or the Python engine (same results, slower) and pip hides why; `make` runs this right after installing.
#   scripts/check-build.sh PYTHON [INSTALL_LOG]
# PYTHON: the environment's interpreter; INSTALL_LOG: the `pip install -v` output, from which the reasons are quoted.
# Prints nothing when both parts are there. A warning is not an error: exits 0 unless fightwatch does not import.
set -uo pipefail

python=${1:?usage: $0 PYTHON [INSTALL_LOG]}
log=${2:-}

# One line per missing part. The compiled build is told by the engine module being an extension module (.so);
# the native one by importing it.
missing=$("$python" - <<'PY'
import importlib.machinery
import importlib.util

engine = importlib.util.find_spec("watcher.detection.engine")
if engine is None or engine.origin is None:
    raise SystemExit("watcher.detection.engine is not installed")
if not engine.origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
    print("the mypyc-compiled modules (watcher/detection/engine.py and the rest of the per-event code):")
    print("  pure Python, about 1.4-1.5x slower")
try:
    import watcher._native  # noqa: F401
except ImportError as error:
    print("the native engine (watcher._native, Rust):")
    print(f"  {error}; `fightwatch replay` uses the Python engine, and tests/unit/test_native.py fails")
PY
) || { echo "check-build: fightwatch is not importable with $python" >&2; exit 1; }

[[ -z $missing ]] && exit 0

if [[ ${FIGHTWATCH_PURE_PYTHON:-} != "" && ${FIGHTWATCH_PURE_PYTHON:-} != 0 ]]; then
    echo "check-build: FIGHTWATCH_PURE_PYTHON is set: fightwatch is built as pure Python, as asked" >&2
    exit 0
fi

reasons=
if [[ -n $log && -r $log ]]; then
    # setup.py's own warnings (no C compiler, no Python.h, no cargo), setuptools-rust's (with the line after it:
    # the failed command or its error) and the first compiler errors.
    reasons=$(awk '/WARNING: fightwatch/ || (/^ *error(\[E[0-9]+\])?: / && !/could not compile/) { print }
                   /build_rust: optional Rust extension/ { print; if ((getline line) > 0) print line }' "$log" \
        | sed 's/^ *//' | cut -c1-200 | awk '!seen[$0]++' | head -n 10)
fi

{
    rule='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
    echo
    echo "$rule"
    echo "!! WARNING: fightwatch was installed WITHOUT part of its compiled code. Missing:"
    sed 's/^/!!   /' <<<"$missing"
    if [[ -n $reasons ]]; then
        echo "!! Why (from ${log}):"
        sed 's/^/!!   /' <<<"$reasons"
    fi
    echo "!! Fix the cause (the native engine needs Rust's cargo and the crates scripts/native.sh fetches, mypyc gcc"
    echo "!! and python3-dev), then \`make clean-build\` and make again."
    [[ -n $log ]] && echo "!! The full build output is in $log."
    echo "$rule"
    echo
} >&2
exit 0
