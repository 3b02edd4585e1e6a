#!/usr/bin/env bash
# Build the container image (Dockerfile, every stage) with buildah, without a Docker engine or an image registry:
#   scripts/image.sh
# Prints, on stdout, one "KEY VALUE" line each (everything else goes to stderr):
#   image localhost/fightwatch:VERSION       the image's name in buildah's storage (VERSION from pyproject.toml)
#   id sha256:...                            the image's ID
#   archive /path/fightwatch-VERSION.tar     the image as a docker-archive that carries its name, for
#                                            `ctr -n k8s.io images import` (or `docker load`)
#   size BYTES                               the image's size, uncompressed (the archive's: its layers' tars)
#   storage ROOT RUNROOT DRIVER              buildah's storage (its global options --root, --runroot,
#                                            --storage-driver), to run the image: `buildah --root ROOT ...`
#
# No registry is reachable here, so the Dockerfile's two base images (build arguments whose defaults are the official
# python: and rust: images) are made locally and passed in with --build-arg:
#   - Python: Debian bookworm's python3 (mmdebstrap --variant=minbase), trimmed as the official slim images are (no
#     manuals, no docs but copyrights, no locales); the build stage adds python3-dev (BUILD_PACKAGES);
#   - Rust: the machine's rustup toolchain (the version the Dockerfile's RUST_IMAGE names) laid out as the official
#     image has it, /usr/local/rustup and /usr/local/cargo (rustup and its proxies), in an image of those alone.
# Each is made once and kept under a tag that is the digest of its recipe, so a warm run makes neither.
#
# Everything lives under ${FIGHTWATCH_CACHE:-~/.cache/fightwatch}/image: buildah's storage (not the host's default
# /var/lib/containers) and the archive. buildah, runc and mmdebstrap come from Debian's packages when missing (they
# enable no service). Downloads in the build (apt, pip, cargo) go through the host's network with the host's CA
# bundle mounted read-only for each RUN: it is never part of an image. Layers are cached (--layers): a warm build
# with nothing changed takes seconds.
set -euo pipefail

log() { printf 'image: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cache=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/image
ca_bundle=/etc/ssl/certs/ca-certificates.crt
suite=bookworm
mirror=http://deb.debian.org/debian

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

# --- the tools -------------------------------------------------------------------------------------------------
install_tools() {
  local missing=() tool
  for tool in buildah runc mmdebstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  ((${#missing[@]})) || return 0
  local install=(apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}")
  log "installing ${missing[*]} from Debian"
  if ! as_root "${install[@]}" >&2; then
    # A fresh machine has no package lists yet: update them once and try again.
    log "apt-get update, then installing ${missing[*]} again"
    as_root apt-get update -q -o DPkg::Lock::Timeout=600 >&2 || die "apt-get update failed"
    as_root "${install[@]}" >&2 || die "apt-get install ${missing[*]} failed"
  fi
}

# --- buildah, on storage of its own ------------------------------------------------------------------------------
# overlay on the ext4 disk; vfs (a full copy per layer: slow and large) where the kernel refuses overlay.
choose_storage() {
  local driver
  for driver in overlay vfs; do
    buildah=(buildah --root "$cache/containers/$driver" --runroot "$cache/containers/run-$driver"
      --storage-driver "$driver")
    if "${buildah[@]}" images >/dev/null 2>"$cache/storage.log"; then
      storage="$cache/containers/$driver $cache/containers/run-$driver $driver"
      return 0
    fi
    log "storage driver $driver does not work here: $(tail -n 1 "$cache/storage.log")"
  done
  die "buildah cannot use its storage under $cache/containers (see $cache/storage.log)"
}

# buildah 1.28 leaves the working containers of a stage that is only copied from (the rust stage) behind, mounted.
rust_image=
remove_stage_containers() {
  [[ -n $rust_image ]] || return 0
  local stray
  stray=$("${buildah[@]}" containers --quiet --filter "ancestor=$rust_image") || return 1
  # shellcheck disable=SC2086 # one ID a line
  [[ -z $stray ]] || "${buildah[@]}" rm $stray >/dev/null
}

# Containers the script made, removed on exit whatever happens (with them go their mounts).
containers=()
work=
cleanup() {
  local container
  for container in "${containers[@]}"; do "${buildah[@]}" rm "$container" >/dev/null 2>&1 || true; done
  remove_stage_containers 2>/dev/null || true
  [[ -z $work ]] || rm -rf "$work"
}
trap cleanup EXIT

image_exists() { "${buildah[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# An image from scratch: new_container sets $container to a new working container; commit_container commits it as
# NAME (and removes it).
new_container() {
  container=$("${buildah[@]}" from scratch) || die "buildah from scratch failed"
  containers+=("$container")
}
commit_container() {
  "${buildah[@]}" commit --quiet --rm "$container" "$1" >/dev/null || die "buildah commit $1 failed"
  containers=()
  # A base made from an older recipe is not used again.
  local old
  for old in $("${buildah[@]}" images --noheading --format '{{.Name}}:{{.Tag}}' | grep "^${1%:*}:" | grep -vxF "$1"); do
    "${buildah[@]}" rmi "$old" >/dev/null 2>&1 || log "could not remove the older base $old"
  done
}

# --- the Python base -------------------------------------------------------------------------------------------
# The recipe, one "KEY VALUE" a line: mmdebstrap's options, then the image's environment. Its digest tags the image.
# The sources are named (mmdebstrap would read them from stdin otherwise), security updates included; /usr is merged
# by mmdebstrap's hook, not by the usrmerge package (which would bring all of Perl along); dpkg leaves out what the
# official slim images leave out. The package lists are not kept (the build stage runs apt-get update itself).
python_recipe() {
  cat <<EOF
recipe 2
option --variant=minbase
option --include=python3,python3-venv,ca-certificates
option --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
option --skip=output/dev
option --dpkgopt=path-exclude=/usr/share/man/*
option --dpkgopt=path-exclude=/usr/share/doc/*
option --dpkgopt=path-include=/usr/share/doc/*/copyright
option --dpkgopt=path-exclude=/usr/share/locale/*
option --dpkgopt=path-exclude=/usr/share/info/*
source deb $mirror $suite main
source deb $mirror $suite-updates main
source deb http://deb.debian.org/debian-security $suite-security main
env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
env LANG=C.UTF-8
EOF
}

# Sets $python_image.
python_base() {
  local tag digest
  digest=$(python_recipe | sha256sum | cut -c1-16)
  tag=localhost/fightwatch-base-python:$digest
  python_image=$tag
  if image_exists "$tag"; then log "Python base: $tag (cached)"; return 0; fi
  log "Python base: mmdebstrap $suite (python3, python3-venv, ca-certificates) into $tag"
  local options=() sources=() envs=() key value
  while read -r key value; do
    case $key in
      option) options+=("$value") ;;
      source) sources+=("$value") ;;
      env) envs+=(--env "$value") ;;
    esac
  done < <(python_recipe)
  mmdebstrap --quiet "${options[@]}" "$suite" "$work/python.tar" "${sources[@]}" </dev/null >&2 \
    || die "mmdebstrap of the Python base failed"
  new_container
  "${buildah[@]}" add --quiet "$container" "$work/python.tar" / >&2 || die "buildah add of the Python base failed"
  rm -f "$work/python.tar"
  "${buildah[@]}" config "${envs[@]}" --cmd python3 --created-by "mmdebstrap $suite python3" "$container" >&2 \
    || die "buildah config of the Python base failed"
  commit_container "$tag"
}

# --- the Rust image ----------------------------------------------------------------------------------------------
# Sets $rust_image.
rust_base() {
  local version host rustup_home toolchain source tag digest
  version=$(sed -nE 's/^ARG RUST_IMAGE=rust:([0-9]+\.[0-9]+\.[0-9]+)-.*/\1/p' "$repo/Dockerfile")
  [[ -n $version ]] || die "the Dockerfile names no RUST_IMAGE=rust:X.Y.Z-... default"
  host=$(uname -m)-unknown-linux-gnu  # (the images are Debian's: glibc)
  rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
  toolchain=$version-$host
  source=$rustup_home/toolchains/$toolchain
  [[ -x $source/bin/cargo && -x $source/bin/rustc ]] \
    || die "no Rust $version toolchain in $source (rustup toolchain install $version)"
  source=$(readlink -f "$source")
  local rustup=${CARGO_HOME:-$HOME/.cargo}/bin/rustup
  [[ -x $rustup ]] || die "no rustup at $rustup"
  digest=$( (echo "recipe 1"; echo "$toolchain"; "$source/bin/rustc" -vV; "$source/bin/cargo" -V; "$rustup" -V 2>/dev/null) \
    | sha256sum | cut -c1-16)
  tag=localhost/fightwatch-base-rust:$version-$digest
  rust_image=$tag
  if image_exists "$tag"; then log "Rust image: $tag (cached)"; return 0; fi
  log "Rust image: the toolchain $toolchain (rustc, cargo, the standard library; no docs) into $tag"
  # The official image's layout: rustup and its proxies in /usr/local/cargo/bin, the toolchain, the default.
  local layout=$work/rust
  mkdir -p "$layout/usr/local/cargo/bin" "$layout/usr/local/rustup/toolchains/$toolchain"
  cp -a "$source/bin" "$source/lib" "$layout/usr/local/rustup/toolchains/$toolchain/" \
    || die "copying the toolchain from $source failed"
  install -m 755 "$rustup" "$layout/usr/local/cargo/bin/rustup"
  local proxy
  for proxy in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver; do
    [[ -e $source/bin/$proxy ]] && ln -s rustup "$layout/usr/local/cargo/bin/$proxy"
  done
  printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\n' "$toolchain" \
    >"$layout/usr/local/rustup/settings.toml"
  new_container
  "${buildah[@]}" add --quiet "$container" "$layout/usr" /usr >&2 || die "buildah add of the Rust toolchain failed"
  rm -rf "$layout"
  "${buildah[@]}" config --env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --created-by "rustup toolchain $toolchain" "$container" >&2 || die "buildah config of the Rust image failed"
  commit_container "$tag"
}

# --- the build -----------------------------------------------------------------------------------------------
main() {
  install_tools
  mkdir -p "$cache/containers"
  work=$(mktemp -d "$cache/work.XXXXXX")
  choose_storage
  local version name
  version=$(sed -nE 's/^version = "([^"]+)"$/\1/p' "$repo/pyproject.toml" | head -n 1)
  [[ -n $version ]] || die "no version in pyproject.toml"
  name=localhost/fightwatch:$version
  python_base
  rust_base
  [[ -r $ca_bundle ]] || die "no CA bundle at $ca_bundle (the build's downloads need it)"

  log "building $name (Dockerfile, with --layers: unchanged steps come from the cache)"
  # runc, not crun (which refuses hybrid cgroups); rlimits may only be lowered here, so they are set, not raised.
  "${buildah[@]}" build --layers --force-rm --pull=never --runtime runc --network host \
    --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
    --volume "$ca_bundle:$ca_bundle:ro" \
    --build-arg PYTHON_IMAGE="$python_image" --build-arg RUST_IMAGE="$rust_image" \
    --build-arg BUILD_PACKAGES="gcc libc6-dev python3-dev" \
    --iidfile "$work/iid" --tag "$name" --file "$repo/Dockerfile" "$repo" >&2 \
    || die "buildah build of $name failed (its output is above)"
  local id archive size
  id=$(<"$work/iid")
  remove_stage_containers || die "buildah rm of the build's containers failed"

  # The archive, made again only when the image changed.
  archive=$cache/fightwatch-$version.tar
  if [[ -f $archive && -f $archive.id && $(<"$archive.id") == "$id" ]]; then
    log "archive $archive is of this image already"
  else
    log "saving $name to $archive (docker-archive)"
    rm -f "$archive" "$archive.id"
    "${buildah[@]}" push --quiet "$name" "docker-archive:$archive.part:$name" >&2 \
      || die "buildah push of $name to $archive failed"
    mv "$archive.part" "$archive"
    printf '%s\n' "$id" >"$archive.id"
  fi
  size=$(stat -c %s "$archive")

  if grep -q " $cache/" /proc/self/mountinfo; then
    die "mounts of buildah's storage are left behind: $(grep " $cache/" /proc/self/mountinfo | cut -d' ' -f5 | tr '\n' ' ')"
  fi
  printf 'image %s\nid %s\narchive %s\nsize %s\nstorage %s\n' "$name" "$id" "$archive" "$size" "$storage"
}

main "$@"
