#!/usr/bin/env bash
# Provide the real control-plane binaries the test suite runs: etcd, etcdctl, kube-apiserver,
# kube-controller-manager and kubectl of one pinned Kubernetes release.
#   scripts/control-plane.sh [current|oldest]     (default: $FIGHTWATCH_KUBERNETES, else current)
#   scripts/control-plane.sh current node         the real node's binaries instead: kubelet, kube-scheduler and
#                                                 kube-proxy of the release (harness/node.py), built the same way
# Prints the directory holding them (the controller-runtime envtest layout); everything else goes to stderr, so
# `dir=$(scripts/control-plane.sh)` works.
#
# Where each binary comes from, first match wins (the envtest convention):
#   1. TEST_ASSET_ETCD, TEST_ASSET_KUBE_APISERVER, TEST_ASSET_KUBECTL: that one binary;
#   2. KUBEBUILDER_ASSETS: that directory's (any envtest download; it has no kube-controller-manager);
#   3. otherwise a build of the release pinned in scripts/kubernetes/RELEASE/go.mod (k8s.io/kubernetes at that
#      version, its staging modules at their published v0.x.y, etcd at the version it requires; see
#      scripts/pin-kubernetes.sh), made once with `go build` and cached by version in
#      ${FIGHTWATCH_CACHE:-~/.cache/fightwatch}/control-plane/VERSION. Nothing is installed or started.
# With 1 or 2 the printed directory holds links to the chosen binaries. With KUBEBUILDER_ASSETS nothing is built
# (the tests that need a binary the assets lack say so); with TEST_ASSET_* alone the rest are built.
#
# A build goes to a temporary directory that becomes the cache entry only once every binary is there and runs: an
# interrupted build leaves nothing behind, and the next run builds again. A module that cannot be downloaded stops
# the run with go's own message, which names it.
set -euo pipefail

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
release=${1:-${FIGHTWATCH_KUBERNETES:-current}}
set=${2:-control}
[[ $set == control || $set == node ]] || die "the second argument names a set of binaries: control (default) or node, not '$set'"
pin=$here/kubernetes/$release
[[ -f $pin/go.mod && -f $pin/go.sum ]] || die "no pinned release '$release' (scripts/kubernetes/$release/go.mod): use current or oldest"
version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 } $1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2 }' "$pin/go.mod" | head -n1)
[[ $version =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "cannot read the k8s.io/kubernetes version from $pin/go.mod"
minor=${BASH_REMATCH[1]}

# name -> the package that builds it (a tool of the pinned go.mod)
declare -A package=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [etcd]=go.etcd.io/etcd/server/v3
  [etcdctl]=go.etcd.io/etcd/etcdctl/v3
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
)
if [[ $set == node ]]; then
  names=(kubelet kube-scheduler kube-proxy)
  grep -q 'k8s.io/kubernetes/cmd/kubelet$' "$pin/go.mod" || die "$pin/go.mod has no node tools: the node runs the current release only"
else
  names=(etcd etcdctl kube-apiserver kube-controller-manager kubectl)
fi

# The binaries the environment names.
declare -A given=()
for name in "${names[@]}"; do
  [[ $set == control ]] || break  # the envtest conventions name control-plane binaries only
  case $name in
    etcd) var=TEST_ASSET_ETCD ;;
    kube-apiserver) var=TEST_ASSET_KUBE_APISERVER ;;
    kubectl) var=TEST_ASSET_KUBECTL ;;
    *) var= ;;
  esac
  if [[ -n $var && -n ${!var:-} ]]; then
    [[ -x ${!var} ]] || die "$var=${!var} is not an executable file"
    given[$name]=${!var}
  elif [[ -n ${KUBEBUILDER_ASSETS:-} && -x ${KUBEBUILDER_ASSETS}/$name ]]; then
    given[$name]=$KUBEBUILDER_ASSETS/$name
  fi
done
if [[ -n ${KUBEBUILDER_ASSETS:-} && $set == control ]]; then
  for name in etcd kube-apiserver; do
    [[ -n ${given[$name]:-} ]] || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $name"
  done
fi

cache_root=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/control-plane
cache=$cache_root/$version
[[ $set == node ]] && cache=$cache_root/$version-node
# The cache entry is good for this go.mod and go.sum and this recipe (bump it when `build` changes what it makes):
# their digest is kept beside it.
recipe=2
digest=$( (cat "$pin/go.mod" "$pin/go.sum"; echo "recipe $recipe") | sha256sum | cut -c1-16)

built_complete() {
  local name
  [[ -f $cache/digest && $(<"$cache/digest") == "$digest" ]] || return 1
  for name in "${names[@]}"; do [[ -x $cache/bin/$name ]] || return 1; done
}

build() {
  command -v go >/dev/null || die "no go on PATH: Go is needed to build Kubernetes $version (or set KUBEBUILDER_ASSETS)"
  local work built gocache info date ldflags name check
  mkdir -p "$cache_root"
  work=$(mktemp -d "$cache_root/.build-${cache##*/}.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  built=$work/entry
  # Go's own build cache, kept until this version is built: a build interrupted halfway goes on from there.
  gocache=$cache_root/.go-build-${cache##*/}
  mkdir -p "$built/bin"
  # Version stamps as Kubernetes' own build writes them (hack/lib/version.sh): `--version`, /version and the
  # User-Agent of every client (kubectl/v1.37.2 ...) say the release; the date is the release's, from the proxy.
  info=$(cd "$pin" && go mod download -json "k8s.io/kubernetes@$version") || die "cannot download k8s.io/kubernetes@$version"
  date=$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$(sed -n 's/.*"Info": *"\([^"]*\)".*/\1/p' <<<"$info")" | head -n1)
  date=$(date -u -d "${date:-@0}" +%Y-%m-%dT%H:%M:%SZ)
  ldflags="-s -w"
  for stamp in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $stamp.gitVersion=$version -X $stamp.gitMajor=1 -X $stamp.gitMinor=$minor"
    ldflags+=" -X $stamp.gitTreeState=clean -X $stamp.buildDate=$date"
  done
  log "building ${names[*]} of Kubernetes $version from Go modules"
  log "(once per version: about 5 minutes on 2 cores, and 2 GB of downloaded modules)"
  for name in "${names[@]}"; do
    # Kubernetes' own build tags for these binaries (hack/lib/golang.sh), statically linked.
    (cd "$pin" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" GOCACHE="$gocache" \
      go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$built/bin/$name" "${package[$name]}") >&2 \
      || die "go build of $name (${package[$name]}) for Kubernetes $version failed: see go's message above"
    case $name in
      kubectl) check=(version --client) ;;
      etcdctl) check=(version) ;;
      *) check=(--version) ;;
    esac
    "$built/bin/$name" "${check[@]}" >/dev/null 2>&1 || die "the $name just built does not run: $built/bin/$name ${check[*]}"
  done
  rm -rf "$gocache"
  printf '%s\n' "$digest" >"$built/digest"
  rm -rf "$cache"
  mv "$built" "$cache"
  rm -rf "$work"
  trap - EXIT
  log "built ${names[*]} of Kubernetes $version into $cache/bin"
}

# envtest assets are used as they are (the tests that need what they lack say so); otherwise what is not given is built.
needs_build=
if [[ -z ${KUBEBUILDER_ASSETS:-} || $set == node ]]; then
  for name in "${names[@]}"; do [[ -n ${given[$name]:-} ]] || needs_build=1; done
fi
if [[ -n $needs_build ]]; then
  mkdir -p "$cache_root"
  # One build at a time (parallel test processes): the others wait, then find the binaries there.
  exec 9>"$cache_root/$version.lock"
  flock 9
  # A build that was killed (SIGKILL skips its clean-up) leaves its temporary directory: never a cache entry.
  rm -rf "$cache_root/.build-${cache##*/}".*
  built_complete || build
fi

if ((${#given[@]} == 0)); then
  printf '%s\n' "$cache/bin"
  exit 0
fi
# A directory of links: the given binaries, the built ones for the rest.
key=$(for name in "${names[@]}"; do printf '%s=%s\n' "$name" "${given[$name]:-$cache/bin/$name}"; done | sha256sum | cut -c1-16)
mixed=$cache_root/assets-$key
mkdir -p "$mixed"
for name in "${names[@]}"; do
  target=${given[$name]:-$cache/bin/$name}
  [[ -x $target ]] && ln -sfn "$(realpath "$target")" "$mixed/$name"
done
printf '%s\n' "$mixed"
