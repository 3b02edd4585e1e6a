#!/usr/bin/env bash
# Provide what the test node (harness/node.py) runs beside the Kubernetes binaries (`scripts/control-plane.sh
# current node` builds kubelet, kube-scheduler and kube-proxy), and print where it is, one "KEY VALUE..." line each:
#   containerd DIR       containerd, containerd-shim-runc-v2 and ctr (Debian's containerd, unpacked: see below)
#   cni DIR              the CNI plugins bridge, host-local, loopback and portmap (Debian's containernetworking-plugins)
#   pause ARCHIVE NAME   the pod sandbox ("pause") image, as a docker-archive for `ctr images import`, and its name
# Everything else goes to stderr, so `scripts/node.sh | while read -r key value` works.
#
# From Debian, installed when missing: runc (the OCI runtime containerd runs; crun refuses this kind of host's hybrid
# cgroups), iptables and conntrack (kube-proxy's iptables mode), containernetworking-plugins, and buildah (builds the
# pause image). None of them is a service. containerd is a service: its package would enable (and, under systemd,
# start) containerd.service, so it is unpacked instead (scripts/deb-unpack.sh) into the cache, and harness/node.py
# runs it with its own configuration, sockets and directories.
#
# The pause image: no image registry is reachable here, so registry.k8s.io/pause cannot be pulled. A static Go
# program (scripts/node/pause) that does what Kubernetes' pause does is built into a one-file image `FROM scratch`.
# Cached in ${FIGHTWATCH_CACHE:-~/.cache/fightwatch}/node by a digest of what makes it.
set -euo pipefail

log() { printf 'node: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
cache=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/node
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9  # parallel test processes: one prepares, the others find it ready

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# Debian packages -> a file each installs, to tell whether it is there.
declare -A provides=(
  [runc]=/usr/sbin/runc
  [iptables]=/usr/sbin/iptables
  [conntrack]=/usr/sbin/conntrack
  [containernetworking-plugins]=/usr/lib/cni/bridge
  [buildah]=/usr/bin/buildah
)
missing=()
for package in "${!provides[@]}"; do [[ -x ${provides[$package]} ]] || missing+=("$package"); done
if ((${#missing[@]})); then
  log "installing ${missing[*]} from Debian"
  install() {
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 "${missing[@]}" >&2
  }
  install || { as_root apt-get update -qq >&2 && install; } || die "apt-get install ${missing[*]} failed"
fi

# containerd, unpacked (not installed) at the version Debian has.
containerd_version=$(apt-cache policy containerd | awk '$1 == "Candidate:" { print $2 }')
[[ -n $containerd_version && $containerd_version != "(none)" ]] || die "Debian's package lists have no containerd"
containerd=$cache/containerd-$containerd_version
if [[ ! -x $containerd/usr/bin/containerd ]]; then
  rm -rf "$containerd.partial"
  "$here/deb-unpack.sh" "$containerd.partial" containerd >/dev/null || die "cannot unpack Debian's containerd"
  mv "$containerd.partial" "$containerd"
fi
"$containerd/usr/bin/containerd" --version >/dev/null || die "$containerd/usr/bin/containerd does not run"

# The pause image.
name=localhost/fightwatch/pause:1.0
digest=$( (cat "$here/node/pause/main.go" "$here/node/pause/go.mod"; echo "$name"; go version) | sha256sum | cut -c1-16)
archive=$cache/pause-$digest.tar
if [[ ! -s $archive ]]; then
  command -v go >/dev/null || die "no go on PATH: Go builds the pause image's program"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$here/node/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/pause" .) >&2 \
    || die "go build of scripts/node/pause failed"
  # buildah's own storage in the work directory (vfs: one small layer, no mounts left behind).
  buildah=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
  box=$("${buildah[@]}" from scratch) || die "buildah from scratch failed"
  "${buildah[@]}" copy "$box" "$work/pause" /pause >/dev/null
  "${buildah[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$box"
  "${buildah[@]}" commit --quiet "$box" "docker-archive:$archive.partial:$name" >/dev/null \
    || die "buildah commit of the pause image failed"
  "${buildah[@]}" rm "$box" >/dev/null
  rm -f "$cache"/pause-*.tar
  mv "$archive.partial" "$archive"
  log "built the pause image $name into $archive"
fi

printf 'containerd %s\n' "$containerd/usr/bin"
printf 'cni %s\n' /usr/lib/cni
printf 'pause %s %s\n' "$archive" "$name"
