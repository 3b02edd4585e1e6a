"""The third-party programs the tests run, built from Go modules as pinned in scripts/programs.

Each directory of scripts/programs is a Go module that pins one program at a released version: the real fights'
Helm 3 and Helm 4 (`helm.sh/helm/v3`, `/v4`; Helm 3 also installs the chart, scripts/helm.sh), Flux's
kustomize-controller, and cert-manager's CA injector (whose binary's own module is not published:
`scripts/programs/cainjector/main.go` sets up cert-manager's injector controllers as its `cmd/cainjector` does); and
Prometheus with its Kubernetes service discovery (Debian's build leaves that out), which scrapes the chart's pods on
the test node. `binary(name)` builds one on first use (`go_build.go_binary`, cached by its sources and
version stamps) and returns its path; `version(name)` is the version pinned.

The version stamps are the ones the projects' own release builds write (their Makefiles' `-X` flags), so that each
program says its version where users see it: `helm version`, and the User-Agent the API server's audit events record.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT
from .commands import output_of
from .go_build import go_binary

PROGRAMS_DIR = REPO_ROOT / "scripts" / "programs"


@dataclass(frozen=True)
class Program:
    directory: str  # under scripts/programs
    package: str  # what `go build` builds
    module: str  # the Go module whose version is pinned in the directory's go.mod
    stamps: tuple[str, ...] = ()  # `-X` flags, `{version}` filled in
    files: tuple[str, ...] = ("go.mod", "go.sum", "tools.go")
    executable: str = ""  # the binary's name, as users have it on PATH (default: the directory's)

    @property
    def source(self) -> Path:
        return PROGRAMS_DIR / self.directory


PROGRAMS: dict[str, Program] = {
    "helm-v3": Program(
        "helm-v3",
        "helm.sh/helm/v3/cmd/helm",
        "helm.sh/helm/v3",
        ("helm.sh/helm/v3/internal/version.version={version}", "helm.sh/helm/v3/internal/version.gitTreeState=clean"),
        executable="helm",  # (Helm's field manager is its executable's name)
    ),
    "helm-v4": Program(
        "helm-v4",
        "helm.sh/helm/v4/cmd/helm",
        "helm.sh/helm/v4",
        ("helm.sh/helm/v4/internal/version.version={version}", "helm.sh/helm/v4/internal/version.gitTreeState=clean"),
        executable="helm",
    ),
    "kustomize-controller": Program(
        "kustomize-controller", "github.com/fluxcd/kustomize-controller", "github.com/fluxcd/kustomize-controller"
    ),
    "prometheus": Program(
        "prometheus",
        "github.com/prometheus/prometheus/cmd/prometheus",
        "github.com/prometheus/prometheus",
        # (the module's v0.316.0 is Prometheus 3.16.0: its Go module versions are v0.<major><minor>.<patch>)
        ("github.com/prometheus/common/version.Version={version}",),
    ),
    "cainjector": Program(
        "cainjector",
        ".",
        "github.com/cert-manager/cert-manager",
        ("github.com/cert-manager/cert-manager/pkg/util.AppVersion={version}",),
        ("go.mod", "go.sum", "main.go"),
    ),
}


# Modules whose files (CRDs) the stage needs beside the programs': Flux's source-controller defines ExternalArtifact,
# the source kind kustomize-controller takes from a producer other than source-controller itself. The release that
# goes with the kustomize-controller pinned (Flux ships them together).
OTHER_MODULES = {"source-controller": ("github.com/fluxcd/source-controller", "v1.9.6")}


def version(name: str) -> str:
    """The version of a program's module pinned in its go.mod (`v3.22.0`)."""
    program = PROGRAMS[name]
    text = (program.source / "go.mod").read_text()
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(program.module)}\s+(v\S+)", text, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{program.source / 'go.mod'} pins no version of {program.module}")
    return found.group(1)


def binary(name: str) -> Path:
    """Build a program (cached) and return its path; RuntimeError with go's output if the build fails."""
    program = PROGRAMS[name]
    stamps = tuple(f"-X {s.format(version=version(name))}" for s in program.stamps)
    return go_binary(program.source, program.package, program.executable or name, program.files, ldflags=stamps)


@functools.cache
def module_dir(name: str) -> Path:
    """The directory of a program's module (or of one of `OTHER_MODULES`) in Go's module cache, downloaded if need be.

    For files the programs' installs use beside the binary: cert-manager's and Flux's CRDs."""
    module, pinned = OTHER_MODULES.get(name) or (PROGRAMS[name].module, version(name))
    with tempfile.TemporaryDirectory() as empty:  # (outside any module: the version is the one asked for)
        argv = ["go", "mod", "download", "-json", f"{module}@{pinned}"]
        done = output_of(argv, what=f"go mod download {module}@{pinned}", cwd=Path(empty), env={"GOFLAGS": "-mod=mod"})
    return Path(json.loads(done)["Dir"])
