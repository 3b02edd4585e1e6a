#!/usr/bin/env bash
# Provide real etcd + kube-apiserver (+ kube-controller-manager) binaries for the test suite.
#
# Prints the directory holding them (the controller-runtime envtest layout: etcd, kube-apiserver, ...),
# plus etcdctl in the cache directory (envtest assets have none: callers fall back to etcdctl on PATH).
#   1. $KUBEBUILDER_ASSETS, when set and complete: any envtest version the user downloaded.
#   2. Otherwise the cache ~/.cache/fightwatch/control-plane/v1.20.2, built once from Debian bookworm's
#      `kubernetes` source package (which vendors every Go dependency), with etcd and etcdctl unpacked from
#      Debian's etcd-server and etcd-client (scripts/deb-unpack.sh). Those two packages are not installed:
#      etcd-server's maintainer scripts would enable (and under systemd start) etcd.service on the host; for the
#      same reason the build's rsync is unpacked too. The packages this script does install (kubernetes-client,
#      and for the one-off build golang-go, dpkg-dev, make, golang-github-modern-go-reflect2-dev) enable no
#      service.
# Everything else this script prints goes to stderr, so `dir=$(scripts/control-plane.sh)` works.
set -euo pipefail

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

want=(etcd kube-apiserver kube-controller-manager)

complete() {
  local dir=$1 bin
  for bin in etcd kube-apiserver; do [[ -x $dir/$bin ]] || return 1; done
}

if [[ -n ${KUBEBUILDER_ASSETS:-} ]]; then
  complete "$KUBEBUILDER_ASSETS" || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks etcd or kube-apiserver"
  printf '%s\n' "$KUBEBUILDER_ASSETS"
  exit 0
fi

version=v1.20.2
cache=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/control-plane/$version
bin=$cache/bin
mkdir -p "$bin"
# One filler at a time (parallel test processes): the others wait, then find the binaries there.
exec 9>"$cache.lock"
flock 9

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

apt_updated=
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ -z $apt_updated ]]; then as_root apt-get update -qq >&2; apt_updated=1; fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# etcd and etcdctl (for tests that inspect or compact etcd): Debian's etcd-server and etcd-client (3.4), unpacked
# into the cache, not installed. (Earlier versions of this script linked $bin/etcd to an installed /usr/bin/etcd:
# such links are replaced too.)
runs() { [[ -x $1 && ! -L $1 ]] && "$1" "$2" >/dev/null 2>&1; }
if ! runs "$bin/etcd" --version || ! runs "$bin/etcdctl" version; then
  log "unpacking Debian's etcd-server and etcd-client into $bin (not installing them)"
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' EXIT
  "$(dirname "$0")/deb-unpack.sh" "$unpacked/root" etcd-server etcd-client >"$unpacked/versions" \
    || die "could not fetch Debian's etcd-server and etcd-client packages"
  for name in etcd etcdctl; do
    [[ -x $unpacked/root/usr/bin/$name ]] || die "Debian's packages have no /usr/bin/$name"
    rm -f "$bin/$name"  # a new file: an etcd running from the old one keeps it
    cp "$unpacked/root/usr/bin/$name" "$bin/$name"
  done
  log "unpacked $(paste -sd, "$unpacked/versions" | sed 's/,/, /g')"
  rm -rf "$unpacked"
  trap - EXIT
fi
runs "$bin/etcd" --version || die "$bin/etcd does not run"
runs "$bin/etcdctl" version || die "$bin/etcdctl does not run"

# kubectl (any recent client; Debian's kubernetes-client when none is installed), for the tests of the
# README's kubectl capture path.
command -v kubectl >/dev/null || apt_install kubernetes-client
command -v kubectl >/dev/null || die "kubectl is not installed and kubernetes-client did not provide it"

if [[ -x $bin/kube-apiserver && -x $bin/kube-controller-manager ]]; then
  printf '%s\n' "$bin"
  exit 0
fi

# kube-apiserver / kube-controller-manager: build from Debian's source package.
src_list=/etc/apt/sources.list.d/fightwatch-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  log "adding deb-src entries ($src_list)"
  as_root tee "$src_list" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  as_root apt-get update -qq >&2
  apt_updated=1
fi
apt_install golang-go dpkg-dev make golang-github-modern-go-reflect2-dev
# rsync, which the build scripts call, is unpacked, not installed: its package enables an rsync service (SysV).
tools=$cache/build-tools
"$(dirname "$0")/deb-unpack.sh" "$tools/root" rsync libpopt0 libxxhash0 >/dev/null
mkdir -p "$tools/bin"
libs=$tools/root/usr/lib/x86_64-linux-gnu:$tools/root/lib/x86_64-linux-gnu
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
  "$libs" "$tools/root/usr/bin/rsync" >"$tools/bin/rsync"
chmod 755 "$tools/bin/rsync"
"$tools/bin/rsync" --version >/dev/null || die "the unpacked rsync does not run"

work=$cache/build
rm -rf "$work"
mkdir -p "$work"
log "fetching and unpacking Debian's kubernetes source package into $work"
(cd "$work" && apt-get source -qq kubernetes >&2)
tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
[[ -n $tree ]] || die "apt-get source kubernetes produced no source tree in $work"

# reflect2 v1.0.1 (vendored) panics under Go >= 1.18 once custom resources are written; use Debian's 1.0.2.
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -d $reflect2 ]] || die "golang-github-modern-go-reflect2-dev did not install $reflect2"
rm -rf "$tree/vendor/github.com/modern-go/reflect2"
cp -r "$reflect2" "$tree/vendor/github.com/modern-go/reflect2"
sed -i 's#^\(github.com/modern-go/reflect2\) v1\.0\.1.*#\1 v1.0.2#' "$tree/vendor/modules.txt"
sed -i 's#\(github.com/modern-go/reflect2\) v1\.0\.1#\1 v1.0.2#' "$tree/go.mod"

# The build scripts expect a GOPATH layout.
mkdir -p "$work/.go/src/k8s.io"
ln -sfn "$tree" "$work/.go/src/k8s.io/kubernetes"
log "building kube-apiserver and kube-controller-manager (about 5-10 minutes on 2 cores)"
(
  cd "$work/.go/src/k8s.io/kubernetes"
  export GOPATH=$work/.go GO111MODULE=off GOFLAGS=-mod=vendor CGO_ENABLED=0 GOCACHE=$cache/gocache
  export KUBE_GIT_VERSION=$version KUBE_GIT_TREE_STATE=clean PATH=$tools/bin:$PATH
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >&2
)
out=$(find "$tree/_output" -type f -name kube-apiserver -path '*bin*' | head -n1)
[[ -n $out ]] || die "the build produced no kube-apiserver"
cp "$out" "$bin/kube-apiserver"
cp "$(dirname "$out")/kube-controller-manager" "$bin/kube-controller-manager"
rm -rf "$work" "$cache/gocache" "$tools"
log "built $("$bin/kube-apiserver" --version 2>&1)"
printf '%s\n' "$bin"
