#!/usr/bin/env bash
# Install what the native engine (native/, Rust) is built and linted with, all from Debian: its packaged crates
# (librust-*-dev), which cargo reads as a local registry (native/.cargo/config.toml), so the build fetches nothing
# from crates.io; cargo (Rust 1.63); and rustfmt and rust-clippy for `make lint` (`cargo fmt`, `cargo clippy`).
# No rustup needed.
# `pip install .` builds it (setup.py, setuptools-rust) when these crates and cargo (Rust 1.63 or later) are there;
# without them it warns and installs the Python engine. `make` runs this before every install; where it cannot
# install them (no root, no apt) it says so and the install goes on (`make` then prints a warning box, see
# scripts/check-build.sh, and tests/unit/test_native.py fails).
set -uo pipefail
# Debian's cargo too: the image's build stage has only that one (Rust 1.63), and tests/deploy/test_image.py builds
# with it as the image does. A newer cargo first on PATH (rustup) builds everything else.
CRATES=(librust-pyo3-dev librust-serde-json-dev librust-serde-derive-dev librust-indexmap-dev librust-ahash-dev
        librust-chrono-dev librust-crc32fast-dev cargo)
# `cargo fmt` and `cargo clippy` (make lint) with Debian's toolchain: same 1.63 release as its rustc.
LINT=(rustfmt rust-clippy)

not_installed() {
    local package
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || printf '%s\n' "$package"
    done
}

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -n "$@"; fi; }

mapfile -t missing < <(not_installed "${CRATES[@]}" "${LINT[@]}")
if ((${#missing[@]})); then
    echo "native.sh: installing ${missing[*]}" >&2
    { as_root apt-get update -q && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
        "${missing[@]}"; } >/dev/null 2>&1 || true
    mapfile -t still < <(not_installed "${CRATES[@]}")
    ((${#still[@]})) && echo "native.sh: could not install ${still[*]}: the native engine will not be built" >&2
    mapfile -t still < <(not_installed "${LINT[@]}")
    ((${#still[@]})) && echo "native.sh: could not install ${still[*]}: make lint cannot check native/" >&2
fi
command -v cargo >/dev/null || echo "native.sh: no cargo (install Rust 1.63+): the native engine will not be built" >&2
exit 0
