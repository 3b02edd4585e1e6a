#!/usr/bin/env bash
# A virtualenv with fightwatch's runtime dependencies only, as the container image installs them (none of the
# test extras: import-linter brings rich, which structlog imports when it is there, 4 MiB), running this
# checkout's fightwatch with its compiled modules. The benchmarks measure memory with it:
#
#   .venv/bin/python scripts/bench_live.py --fightwatch fightwatch=$(scripts/runtime-venv.sh):auto:metadata
#
# Prints the interpreter's path. The versions are those of .venv (pip freeze as constraints), so both run the same
# libraries; the venv is cached under ~/.cache/fightwatch/runtime-venv/<digest of the checkout's path, pyproject.toml
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
# Bytecode for the checkout's modules, as pip writes it when the image installs the wheel: where nothing else writes it
# (PYTHONDONTWRITEBYTECODE set, as the image sets it) each start would compile them from source, and hold 1 MiB more
# for it than the image does. (Only what changed is compiled again.)
"$target/bin/python" -m compileall -q "$repo/watcher" >&2
echo "$target/bin/python"
