#!/usr/bin/env bash
# Provide a real headless browser for the test suite: Debian's chromium and chromium-driver (chromedriver, which
# Selenium drives; harness/browser.py).
#
# Installed with apt-get (as root, or through `sudo -n`) when missing: neither package, nor anything they pull in
# without recommends, ships a service, so nothing is enabled or started on the host. apt-get update runs only when
# the package lists do not know the packages, or when an install from them fails (stale lists). Idempotent: when
# both are installed this only checks that they run. One installer at a time (parallel test processes): the others
# wait, then find them installed. Prints two lines on stdout, the chromium binary's path then chromedriver's
# (everything else goes to stderr), so `{ read -r chromium; read -r chromedriver; } < <(scripts/browser.sh)` works.
# Fails loudly when they cannot be installed or do not run; the tests never skip for want of a browser.
set -euo pipefail

log() { printf 'browser: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PACKAGES=(chromium chromium-driver)

not_installed() {
  local package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || printf '%s\n' "$package"
  done
}

as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo -n "$@"
  else
    die "not root and no sudo: cannot run $*"
  fi
}

apt_get() {
  # Waits for dpkg's lock (another apt-get on the host) rather than failing at once.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 "$@" >&2
}

install() {
  command -v apt-get >/dev/null || die "no apt-get: install Debian's ${*} by hand"
  log "installing ${*} (apt-get, no recommends)"
  if ! apt-cache show --no-all-versions "$@" >/dev/null 2>&1; then
    log "the package lists do not have them: apt-get update"
    apt_get update || die "apt-get update failed"
  fi
  if ! apt_get install -y --no-install-recommends "$@"; then
    log "apt-get install failed: updating the package lists and trying again"
    apt_get update || die "apt-get update failed"
    apt_get install -y --no-install-recommends "$@" || die "apt-get install ${*} failed"
  fi
}

# One installer at a time: a second caller waits here, then finds the packages installed.
lock=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/tools/browser.lock
mkdir -p "$(dirname "$lock")" 2>/dev/null || lock=${TMPDIR:-/tmp}/fightwatch-browser.lock  # no writable home
exec 9>"$lock" || die "cannot open the lock file $lock"
flock 9

mapfile -t missing < <(not_installed "${PACKAGES[@]}")
if ((${#missing[@]})); then
  install "${missing[@]}"
  mapfile -t missing < <(not_installed "${PACKAGES[@]}")
  ((${#missing[@]} == 0)) || die "still not installed after apt-get: ${missing[*]}"
fi
exec 9>&-

# The browser itself, not Debian's /usr/bin/chromium launcher: that shell script adds the flags in /etc/chromium.d
# (extensions, GPU rasterization; its /dev/shm check even prints shell errors where /dev/shm is mounted twice).
# The harness sets every flag it needs.
chromium=/usr/lib/chromium/chromium
chromedriver=$(command -v chromedriver) || die "chromium-driver is installed, but there is no chromedriver on PATH"
[[ -x $chromium ]] || die "chromium is installed, but $chromium is missing"
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
browser_version=$("$chromium" --version 2>"$errors") || die "$chromium does not run: $(tail -n5 "$errors")"
driver_version=$("$chromedriver" --version 2>"$errors") || die "$chromedriver does not run: $(tail -n5 "$errors")"
# "Chromium 156.0.8078.79 " / "ChromeDriver 156.0.8078.79 (a21ce95c...-refs/branch-heads/8078@{#1704})"
browser_major=$(grep -oE '[0-9]+\.[0-9.]+' <<<"$browser_version" | head -n1 | cut -d. -f1)
driver_major=$(grep -oE '[0-9]+\.[0-9.]+' <<<"$driver_version" | head -n1 | cut -d. -f1)
[[ -n $browser_major && $browser_major == "$driver_major" ]] \
  || die "chromium and chromedriver do not match: '$browser_version' vs '$driver_version'"
log "${browser_version% }; $driver_version"
printf '%s\n%s\n' "$chromium" "$chromedriver"
