#!/usr/bin/env bash
# Pin a Kubernetes release for the test suite: write scripts/kubernetes/RELEASE/go.mod (and go.sum) for VERSION.
#   scripts/pin-kubernetes.sh RELEASE VERSION      e.g. scripts/pin-kubernetes.sh current v1.37.2
#   scripts/pin-kubernetes.sh --newest             list the newest patch of each minor release the Go proxy serves
# RELEASE is `current` (the newest release, everything runs on it) or `oldest` (the oldest release upstream still
# supports; the live-detection and audit-scenario tests run on it too). The go.mod requires k8s.io/kubernetes at
# VERSION and replaces each k8s.io/* staging module with its published v0.x.y (k8s.io/kubernetes' own go.mod points
# them at ./staging, which a module download does not have); its tools are what scripts/control-plane.sh builds:
# kube-apiserver, kube-controller-manager and kubectl of that release, and etcd and etcdctl at the version that
# release's go.mod requires. Pinning `current` also moves the client-go informer of scripts/bench_live.py
# (scripts/informer) to that release's k8s.io/client-go and k8s.io/apimachinery v0.x.y. Needs go and the Go module
# proxy.
set -euo pipefail

log() { printf 'pin-kubernetes: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%,*}

served() { curl -fsS "$proxy/k8s.io/kubernetes/@v/$1.info" >/dev/null 2>&1; }

if [[ ${1:-} == --newest ]]; then
  # The proxy's version list is not always complete: probe patch numbers past the listed ones too.
  listed=$(curl -fsS "$proxy/k8s.io/kubernetes/@v/list") || die "cannot list k8s.io/kubernetes at $proxy"
  minors=$(grep -E '^v1\.[0-9]+\.[0-9]+$' <<<"$listed" | cut -d. -f2 | sort -n | uniq | tail -n 4)
  minors="$minors $(($(tail -n 1 <<<"$minors") + 1))"  # a newer minor release the list may not show yet
  for minor in $minors; do
    newest=
    misses=0
    for ((patch = 0; misses < 4; patch++)); do
      if served "v1.$minor.$patch"; then newest=v1.$minor.$patch; misses=0; else misses=$((misses + 1)); fi
    done
    [[ -n $newest ]] && printf '%s\n' "$newest"
  done
  exit 0
fi

[[ $# -eq 2 ]] || die "usage: $0 current|oldest VERSION, or $0 --newest"
release=$1 version=$2
[[ $release == current || $release == oldest ]] || die "RELEASE must be current or oldest, not $release"
[[ $version =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "VERSION must look like v1.37.2, not $version"
staging=v0.${version#v1.}

upstream=$(curl -fsS "$proxy/k8s.io/kubernetes/@v/$version.mod") || die "the Go proxy does not serve k8s.io/kubernetes@$version"
go_version=$(awk '$1 == "go" { print $2; exit }' <<<"$upstream")
mapfile -t replaced < <(grep -oE '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' <<<"$upstream" | awk '{ print $1 }')
((${#replaced[@]})) || die "k8s.io/kubernetes@$version replaces no staging module: not the layout this script knows"

dir=$here/kubernetes/$release
mkdir -p "$dir"
{
  printf '// Kubernetes %s for the test suite (the %s release): written by scripts/pin-kubernetes.sh, built by\n' \
    "$version" "$release"
  printf '// scripts/control-plane.sh. Edit neither by hand: run scripts/pin-kubernetes.sh %s vX.Y.Z.\n' "$release"
  printf 'module fightwatch.test/kubernetes/%s\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\n' "$release" "$go_version" "$version"
  printf 'replace (\n'
  for module in "${replaced[@]}"; do printf '\t%s => %s %s\n' "$module" "$module" "$staging"; done
  printf ')\n\ntool (\n'
  printf '\tk8s.io/kubernetes/cmd/%s\n' kube-apiserver kube-controller-manager kubectl
  # The real node (harness/node.py) runs the current release: its kubelet, kube-scheduler and kube-proxy too.
  [[ $release == current ]] && printf '\tk8s.io/kubernetes/cmd/%s\n' kubelet kube-scheduler kube-proxy
  printf '\tgo.etcd.io/etcd/server/v3\n\tgo.etcd.io/etcd/etcdctl/v3\n)\n'
} >"$dir/go.mod"
rm -f "$dir/go.sum"
# etcd at the version Kubernetes' own go.mod requires (its etcd server is there already, as a test dependency).
etcd=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' <<<"$upstream")
[[ -n $etcd ]] || die "k8s.io/kubernetes@$version does not require go.etcd.io/etcd/server/v3"
(cd "$dir" && go get "go.etcd.io/etcd/etcdctl/v3@$etcd" "go.etcd.io/etcd/server/v3@$etcd" && go mod tidy) >&2 \
  || die "go mod tidy failed in $dir"
log "pinned $release to Kubernetes $version with etcd $etcd in $dir/go.mod"
if [[ $release == current ]]; then
  (cd "$here/informer" && go get "k8s.io/client-go@$staging" "k8s.io/apimachinery@$staging" && go mod tidy) >&2 \
    || die "cannot move scripts/informer to k8s.io/client-go@$staging"
  log "moved scripts/informer to k8s.io/client-go and k8s.io/apimachinery $staging"
fi
