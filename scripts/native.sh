#!/usr/bin/env bash
# Make ready what the native engine (native/, Rust) is built from: check that cargo is there, at the Rust version
# native/Cargo.toml names (rust-version) or later, and fetch the crates native/Cargo.lock pins from crates.io
# (`cargo fetch --locked`), so that a crate that does not download is named here, before the install. Rust itself
# (cargo, rustfmt and clippy for `make lint`) is the machine's, e.g. rustup's; nothing is installed here.
# `make` runs this before every install. Without cargo, with an older one, or when a crate does not download, it
# says so and exits 0: the install goes on without the native engine (`make` then prints a warning box, see
# scripts/check-build.sh), as `make demo` needs only Python. With FIGHTWATCH_REQUIRE_NATIVE=1 (`make test` sets
# it, as it does for setup.py) each of these is an error instead: it exits 1 and the run stops.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

manifest=native/Cargo.toml
cargo=${CARGO:-cargo}
required=0
[[ ${FIGHTWATCH_REQUIRE_NATIVE:-} != "" && ${FIGHTWATCH_REQUIRE_NATIVE:-} != 0 ]] && required=1

problem() {
    if ((required)); then
        echo "native.sh: ERROR: $*" >&2
        echo "native.sh: the native engine is required here (FIGHTWATCH_REQUIRE_NATIVE=1): stopping" >&2
        exit 1
    fi
    echo "native.sh: $*: the install goes on, without the native engine" >&2
    exit 0
}

command -v "$cargo" >/dev/null || problem "no cargo (install Rust, e.g. with rustup)"

# The version as numbers: "cargo 1.95.0 (f2d3ce0bd 2026-03-21)" is 1.95.0.
wanted=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$manifest")
have=$("$cargo" --version 2>/dev/null | awk '{ sub(/-.*/, "", $2); print $2 }')
[[ -n $wanted ]] || problem "$manifest names no rust-version"
[[ -n $have ]] || problem "\`$cargo --version\` does not run"
if [[ $(printf '%s\n%s\n' "$wanted" "$have" | sort -V | head -n 1) != "$wanted" ]]; then
    problem "cargo $have is older than the Rust $wanted that $manifest needs (rustup update)"
fi

# cargo's error says why; the summary line names the crate, as cargo does: by the address it could not download
# it from (.../NAME/VERSION/download), by name and version, or as the dependency it could not look up.
if ! output=$("$cargo" fetch --locked --manifest-path "$manifest" 2>&1); then
    printf '%s\n' "$output" | grep -v '^ *\(Downloading\|Downloaded\|Updating\|Locking\) ' >&2
    crate=$(sed -nE -e 's|.*/([A-Za-z0-9_-]+)/([0-9][^/`]*)/download`.*|\1 v\2|p' \
        -e 's|.*`([A-Za-z0-9_-]+) v([0-9][^` ]*)`.*|\1 v\2|p' \
        -e 's|.*failed to get `([A-Za-z0-9_-]+)` as a dependency.*|\1|p' \
        -e 's|.*no matching package named `([A-Za-z0-9_-]+)` found.*|\1|p' <<<"$output" | head -n 1)
    [[ -n $crate ]] && crate="crate $crate" || crate="the crates"
    problem "could not fetch $crate from crates.io (cargo fetch --locked --manifest-path $manifest)"
fi
exit 0
