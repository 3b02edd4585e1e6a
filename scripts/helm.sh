#!/usr/bin/env bash
# Provide a real helm v3 binary for the chart tests and print its path.
#
# Helm is built from its Go modules (helm.sh/helm/v3 at the version scripts/programs/helm-v3/go.mod pins, with the
# version stamps of Helm's own release build), like the Kubernetes binaries; once, then cached in
# ~/.cache/fightwatch/helm-v3 (harness/programs.py). $HELM, when set to an executable, wins.
set -euo pipefail

log() { printf 'helm: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -n ${HELM:-} ]]; then
  [[ -x $HELM ]] || die "HELM=$HELM is not executable"
  printf '%s\n' "$HELM"
  exit 0
fi

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
[[ -x $python ]] || die "no $python: run make first (the build goes through harness/programs.py)"
helm=$(cd "$root" && "$python" -c 'from harness.programs import binary; print(binary("helm-v3"))') \
  || die "building helm from Go modules failed (see above)"
want=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 }' "$root/scripts/programs/helm-v3/go.mod")
version=$("$helm" version --template '{{.Version}}') || die "$helm does not run"
[[ $version == "$want" ]] || die "$helm is $version, expected $want"
printf '%s\n' "$helm"
