#!/usr/bin/env bash
# Install what the native front end (native/, Rust) is built from: Debian's packaged crates (librust-*-dev), which
# cargo reads as a local registry (native/.cargo/config.toml), so the build fetches nothing from crates.io.
# `pip install .` builds it (setup.py, setuptools-rust) when these crates and cargo (Rust 1.63 or later) are there;
# without them it warns and installs the Python engine. `make` runs this before every install; where it cannot
# install them (no root, no apt) it says so and the install goes on (tests/unit/test_native.py then fails).
set -uo pipefail
# Debian's cargo too: the image's build stage has only that one (Rust 1.63), and tests/deploy/test_image.py builds
# with it as the image does. A newer cargo first on PATH (rustup) builds everything else.
CRATES=(librust-pyo3-dev librust-serde-json-dev librust-serde-derive-dev librust-indexmap-dev librust-ahash-dev
        librust-chrono-dev cargo)
missing=()
for package in "${CRATES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
        >/dev/null 2>&1 || echo "native.sh: could not install ${missing[*]}: the native front end will not be built" >&2
fi
command -v cargo >/dev/null || echo "native.sh: no cargo (install Rust 1.63+): the native front end will not be built" >&2
exit 0
