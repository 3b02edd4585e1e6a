#!/usr/bin/env bash
# Unpack Debian packages into a directory WITHOUT installing them: `apt-get download` then `dpkg-deb -x`.
#   scripts/deb-unpack.sh DIR PACKAGE...
# For the services the tests run themselves (etcd, Prometheus, Alertmanager): installing their packages would enable
# (and, on a machine running systemd, start) their system services; unpacked, only their files are there, under DIR
# (DIR/usr/bin/...). No maintainer script runs, nothing outside DIR changes, except `apt-get update` (as root) when
# apt's package lists lack a package. Prints "PACKAGE VERSION" for each on stdout; everything else goes to stderr.
set -euo pipefail

log() { printf 'deb-unpack: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $# -ge 2 ]] || die "usage: $0 DIR PACKAGE..."
dest=$1
shift

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
chmod 755 "$debs"
# apt downloads as its sandbox user _apt (as root): let it write there.
if [[ $(id -u) -eq 0 ]] && getent passwd _apt >/dev/null; then chown _apt "$debs"; fi
download() { (cd "$debs" && apt-get download -q "$@") >&2; }
if ! download "$@"; then
  # Fresh machine (no package lists yet) or lists older than the archive: update them once and try again.
  log "apt-get update, then downloading $* again"
  as_root apt-get update -qq >&2 || die "apt-get update failed"
  download "$@" || die "apt-get download $* failed"
fi

mkdir -p "$dest"
for package in "$@"; do
  deb=$(find "$debs" -maxdepth 1 -name "${package}_*.deb" | head -n1)
  [[ -n $deb ]] || die "apt-get download $package produced no .deb"
  dpkg-deb -x "$deb" "$dest" || die "dpkg-deb -x $deb failed"
  printf '%s %s\n' "$package" "$(dpkg-deb -f "$deb" Version)"
done
