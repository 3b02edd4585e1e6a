#!/usr/bin/env bash
# Provide real Prometheus (with promtool) and Alertmanager binaries for the test suite.
#
# Debian bookworm's `prometheus` (2.42, which brings promtool) and `prometheus-alertmanager` (0.25), installed
# once with apt-get; idempotent. Prints the directory holding prometheus, promtool and alertmanager on stdout
# (everything else goes to stderr), so `dir=$(scripts/monitoring.sh)` works. Fails loudly when a binary is
# missing or does not run; the tests never skip for want of one.
#
# The packages' services are not used: the tests start their own instances on free loopback ports. Where
# the packages' maintainer scripts start the system services (a machine with systemd), they are stopped
# again so nothing listens on 9090/9093 on our behalf.
set -euo pipefail

log() { printf 'monitoring: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

missing=()
for pkg in prometheus prometheus-alertmanager; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing ${missing[*]}"
  as_root apt-get update -qq >&2
  # policy-rc.d exit 101: the maintainer scripts must not start the system services.
  policy=/usr/sbin/policy-rc.d
  restore=
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    restore=1
  fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
    || { [[ -n $restore ]] && as_root rm -f "$policy"; die "apt-get install ${missing[*]} failed"; }
  [[ -n $restore ]] && as_root rm -f "$policy"
fi

dir=/usr/bin
for bin in prometheus promtool prometheus-alertmanager; do
  [[ -x $dir/$bin ]] || die "$dir/$bin is missing after installing its package"
done
"$dir/promtool" --version >/dev/null 2>&1 || die "$dir/promtool does not run"
"$dir/prometheus" --version >/dev/null 2>&1 || die "$dir/prometheus does not run"
"$dir/prometheus-alertmanager" --version >/dev/null 2>&1 || die "$dir/prometheus-alertmanager does not run"
printf '%s\n' "$dir"
