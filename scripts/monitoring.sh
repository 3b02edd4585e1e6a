#!/usr/bin/env bash
# Provide real Prometheus (with promtool) and Alertmanager binaries for the test suite.
#
# Debian bookworm's `prometheus` (2.42, which brings promtool) and `prometheus-alertmanager` (0.25), unpacked once
# (scripts/deb-unpack.sh) into ~/.cache/fightwatch/tools/monitoring, NOT installed: the packages' maintainer
# scripts would enable (and under systemd start) the prometheus and prometheus-alertmanager services on the host.
# The tests start their own instances on free loopback ports; nothing here runs as a service. The binaries need
# only libc. Idempotent. Prints the directory holding prometheus, promtool and alertmanager (Debian's
# prometheus-alertmanager, under its upstream name) on stdout (everything else goes to stderr), so
# `dir=$(scripts/monitoring.sh)` works. Fails loudly when a binary is missing or does not run; the tests never skip
# for want of one.
set -euo pipefail

log() { printf 'monitoring: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cache=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/tools/monitoring
dir=$cache/bin

runs() {
  local bin
  for bin in prometheus promtool alertmanager; do
    [[ -x $dir/$bin ]] || return 1
    "$dir/$bin" --version >/dev/null 2>&1 || return 1
  done
}

# One filler at a time (parallel test processes): the others wait, then find the binaries there.
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9

if ! runs; then
  log "unpacking Debian's prometheus and prometheus-alertmanager into $cache (not installing them)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$(dirname "$0")/deb-unpack.sh" "$work/root" prometheus prometheus-alertmanager >"$work/versions" \
    || die "could not fetch Debian's prometheus and prometheus-alertmanager packages"
  mkdir -p "$work/bin"
  for pair in prometheus:prometheus promtool:promtool prometheus-alertmanager:alertmanager; do
    from=$work/root/usr/bin/${pair%%:*}
    [[ -x $from ]] || die "the packages have no ${from#"$work/root"}"
    cp "$from" "$work/bin/${pair##*:}"
  done
  rm -rf "$dir"
  mkdir -p "$cache"
  mv "$work/bin" "$dir"
  mv "$work/versions" "$cache/versions"
  log "unpacked $(paste -sd, "$cache/versions" | sed 's/,/, /g')"
fi

for bin in prometheus promtool alertmanager; do
  [[ -x $dir/$bin ]] || die "$dir/$bin is missing"
  "$dir/$bin" --version >/dev/null 2>&1 || die "$dir/$bin does not run: $("$dir/$bin" --version 2>&1 | tail -n1)"
done
printf '%s\n' "$dir"
