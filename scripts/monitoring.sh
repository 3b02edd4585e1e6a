#!/usr/bin/env bash
# Provide real Prometheus (with promtool) and Alertmanager binaries for the test suite.
#
# Debian bookworm's `prometheus` (2.42, which brings promtool) and `prometheus-alertmanager` (0.25), unpacked once
# (scripts/deb-unpack.sh) into ~/.cache/fightwatch/tools/monitoring, NOT installed: the packages' maintainer
# scripts would enable (and under systemd start) the prometheus and prometheus-alertmanager services on the host.
# The tests start their own instances on free loopback ports; nothing here runs as a service. The binaries need
# only libc; Debian's alertmanager also reads its built-in templates (default.tmpl) and UI from
# /usr/share/prometheus/alertmanager, a path compiled into it, so those data files (only them: no service, no
# configuration) are copied there when they are missing. Idempotent. Prints the directory holding prometheus, promtool and alertmanager (Debian's
# prometheus-alertmanager, under its upstream name) on stdout (everything else goes to stderr), so
# `dir=$(scripts/monitoring.sh)` works. Fails loudly when a binary is missing or does not run; the tests never skip
# for want of one.
set -euo pipefail

log() { printf 'monitoring: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cache=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/tools/monitoring
dir=$cache/bin
share=$cache/share/alertmanager  # the package's /usr/share/prometheus/alertmanager
templates=/usr/share/prometheus/alertmanager

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

runs() {
  local bin
  for bin in prometheus promtool alertmanager; do
    [[ -x $dir/$bin ]] || return 1
    "$dir/$bin" --version >/dev/null 2>&1 || return 1
  done
  [[ -f $share/default.tmpl ]]
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
  [[ -f $work/root$templates/default.tmpl ]] || die "prometheus-alertmanager has no $templates/default.tmpl"
  rm -rf "$dir" "$share"
  mkdir -p "$cache/share"
  mv "$work/root$templates" "$share"
  mv "$work/bin" "$dir"
  mv "$work/versions" "$cache/versions"
  log "unpacked $(paste -sd, "$cache/versions" | sed 's/,/, /g')"
fi

if [[ ! -f $templates/default.tmpl ]]; then
  log "copying alertmanager's templates and UI to $templates (data files only)"
  as_root mkdir -p "$templates"
  as_root cp -r "$share/." "$templates/"
fi
[[ -f $templates/default.tmpl ]] || die "$templates/default.tmpl is missing: alertmanager cannot start without it"
for bin in prometheus promtool alertmanager; do
  [[ -x $dir/$bin ]] || die "$dir/$bin is missing"
  "$dir/$bin" --version >/dev/null 2>&1 || die "$dir/$bin does not run: $("$dir/$bin" --version 2>&1 | tail -n1)"
done
printf '%s\n' "$dir"
