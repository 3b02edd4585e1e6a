#!/bin/sh
# The two install steps of the container image, shared by the Dockerfile and CI (tests/deploy/test_image.py):
#   image-install.sh build WHEELS            build the fightwatch wheel and download/build every dependency wheel
#   image-install.sh install WHEELS PREFIX   make a virtual environment at PREFIX from those wheels only (offline),
#                                            without pip and setuptools: nothing in it needs them at run time
# POSIX sh: the slim Python image has no bash-isms to rely on. pip runs from a virtual environment of its own, as
# Debian's python3 (a base made from Debian's packages, see scripts/image.sh) has pip in virtual environments only.
set -eu

usage() { echo "usage: $0 build WHEELS | install WHEELS PREFIX" >&2; exit 2; }

[ $# -ge 2 ] || usage
step=$1
wheels=$2
python=${PYTHON:-python3}

case $step in
  build)
    # From the project root (where pyproject.toml is).
    tools=$(mktemp -d)
    trap 'rm -rf "$tools"' EXIT
    "$python" -m venv "$tools"
    "$tools/bin/pip" wheel --no-cache-dir --wheel-dir "$wheels" .
    ;;
  install)
    [ $# -eq 3 ] || usage
    prefix=$3
    "$python" -m venv "$prefix"
    "$prefix/bin/pip" install --no-cache-dir --no-index --no-compile --find-links "$wheels" fightwatch
    "$prefix/bin/pip" uninstall --quiet --yes pip setuptools
    # Bytecode as the image runs it, optimised (PYTHONOPTIMIZE=2, Dockerfile), and no other: pip's would never be read.
    "$prefix/bin/python" -OO -m compileall -q "$prefix"
    PYTHONOPTIMIZE=2 PYTHONDONTWRITEBYTECODE=1 "$prefix/bin/fightwatch" --help >/dev/null
    ;;
  *) usage ;;
esac
