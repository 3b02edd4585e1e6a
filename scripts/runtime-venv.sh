#!/usr/bin/env bash
# A virtualenv with fightwatch's runtime dependencies only, as the container image installs them (none of the
# test extras: import-linter brings rich, which structlog imports when it is there, 4 MiB), running this
# checkout's fightwatch with its compiled modules. The benchmarks measure memory with it:
#
#   .venv/bin/python scripts/bench_live.py --fightwatch fightwatch=$(scripts/runtime-venv.sh):auto:metadata
#
# Prints the path of the interpreter as the image runs it (bin/python-image, below). The versions are those of .venv
# (pip freeze as constraints), so both run the same libraries; the venv is cached under ~/.cache/fightwatch/runtime-venv/<digest of the checkout's path, pyproject.toml
# and the versions> (each checkout, a worktree too, its own: the venv runs the checkout it was made for).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dev=${VENV:-$repo/.venv}
constraints=$("$dev/bin/pip" freeze --exclude-editable)
digest=$( { echo "$repo"; cat "$repo/pyproject.toml"; echo "$constraints"; } | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch/runtime-venv
target=$cache/$digest
if [[ ! -x $target/bin/python ]]; then
	mkdir -p "$cache"
	rm -rf "$target.tmp"
	trap 'rm -rf "$target.tmp"' EXIT
	# the [project] dependencies of pyproject.toml, read with the dev venv's tomllib
	mapfile -t deps < <("$dev/bin/python" -c 'import tomllib, sys
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$repo/pyproject.toml")
	python3 -m venv "$target.tmp"
	"$target.tmp/bin/pip" install --quiet --disable-pip-version-check -c <(echo "$constraints") "${deps[@]}" >&2
	purelib=$("$target.tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	echo "$repo" >"$purelib/fightwatch-checkout.pth"
	# (built aside and renamed: an interrupted build leaves nothing half filled; bin/python works after the move,
	# which is all the benchmarks run)
	mv "$target.tmp" "$target"
fi
# The interpreter as the image runs it (Dockerfile): PYTHONOPTIMIZE=2 and PYTHONDONTWRITEBYTECODE set, reading the
# optimised bytecode (-OO: no docstrings, no asserts) of the standard library, the libraries and the checkout's modules,
# compiled ahead as the image compiles them. Here they are compiled into the venv's own cache (PYTHONPYCACHEPREFIX), not
# beside the interpreter's sources; only what changed is compiled again. Without it each start would compile from
# source and hold 1 MiB more for it. The printed path runs the venv's python so (bin/python-image); the floor watchers
# of the benchmarks run on it too.
image_env=(PYTHONOPTIMIZE=2 PYTHONDONTWRITEBYTECODE=1 "PYTHONPYCACHEPREFIX=$target/pycache")
paths=$("$target/bin/python" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["stdlib"], p["purelib"])')
# (-x: the standard library's test data holds files that are not valid Python on purpose)
# shellcheck disable=SC2086
env "${image_env[@]}" "$target/bin/python" -OO -m compileall -q -j0 -x '/(test|tests|idle_test)/' \
	$paths "$repo/watcher" >&2
printf '#!/bin/sh\nexec env %s "%s" "$@"\n' "${image_env[*]}" "$target/bin/python" >"$target/bin/python-image.tmp"
chmod +x "$target/bin/python-image.tmp"
mv "$target/bin/python-image.tmp" "$target/bin/python-image"
echo "$target/bin/python-image"
