#!/usr/bin/env bash
# Build the native front end (native/, Rust) into watcher/_native.*.so for the given Python (default: the venv's).
# Its crates come from Debian's packages (librust-*-dev, read by cargo as a local registry: native/.cargo), so
# nothing is fetched from crates.io. Needs cargo and rustc (1.63 or later).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-.venv/bin/python}
CRATES=(librust-pyo3-dev librust-serde-json-dev librust-serde-derive-dev librust-indexmap-dev librust-ahash-dev
        librust-chrono-dev)
missing=()
for package in "${CRATES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "native.sh: cargo not found (install Rust: Debian's cargo, or rustup)" >&2; exit 1; }
(cd native && PYO3_PYTHON="$(realpath "../$PYTHON" 2>/dev/null || command -v "$PYTHON")" cargo build --release --offline --quiet)
suffix=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
cp native/target/release/lib_native.so "watcher/_native$suffix"
echo "watcher/_native$suffix"
