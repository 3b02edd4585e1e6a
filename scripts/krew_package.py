"""Build the krew plugin: the archive krew installs (`dist/kubectl-fightwatch-vVERSION.tar.gz`) and its manifest
(`deploy/krew/fightwatch.yaml`).

The archive holds the launcher `deploy/krew/kubectl-fightwatch` (which installs fightwatch of this version from
PyPI into an environment of its own on the first run) and the LICENSE. It is built byte for byte the same on every
machine (no times, owners or modes of the checkout in it), so the manifest's sha256 stays valid until the launcher
or the version changes. `--check` fails when the committed manifest does not match what is built (CI runs it).

    python scripts/krew_package.py            # build dist/..., write the manifest's version, uri and sha256
    python scripts/krew_package.py --check    # the committed manifest matches the archive
    kubectl krew install --manifest=deploy/krew/fightwatch.yaml --archive=dist/kubectl-fightwatch-v0.1.0.tar.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import sys
import tarfile
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "deploy" / "krew" / "kubectl-fightwatch"
MANIFEST = ROOT / "deploy" / "krew" / "fightwatch.yaml"
RELEASES = "https://github.com/fightwatch/fightwatch/releases/download"  # where a release's archive is published


def version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def archive_bytes(release: str) -> bytes:
    """The archive: the launcher (this release's version in it) and the LICENSE, with fixed metadata."""
    files = {
        "kubectl-fightwatch": (LAUNCHER.read_text().replace("@VERSION@", release).encode(), 0o755),
        "LICENSE": ((ROOT / "LICENSE").read_bytes(), 0o644),
    }
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(tar_buffer.getvalue())
    return out.getvalue()


def archive_name(release: str) -> str:
    return f"kubectl-fightwatch-v{release}.tar.gz"


def manifest(release: str, sha256: str) -> dict[str, object]:
    """krew's Plugin manifest (krew.googlecontainertools.github.com/v1alpha2)."""
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "fightwatch"},
        "spec": {
            "version": f"v{release}",
            "homepage": "https://github.com/fightwatch/fightwatch",
            "shortDescription": "Find controllers fighting over objects, and hot reconcile loops",
            "description": (
                "Watches the cluster of the current context for a while, read-only, and reports controllers that\n"
                "keep overwriting each other's changes to the same fields (an autoscaler and a GitOps tool over\n"
                "spec.replicas, two operators over a label) and objects rewritten in endless reconcile loops:\n"
                "the writers, the contested fields and a fix hint. Needs Python 3.11 or newer: the first run\n"
                "installs fightwatch from PyPI into an environment of its own.\n"
            ),
            "caveats": (
                "The first run installs fightwatch with pip (Python 3.11 or newer: set FIGHTWATCH_PYTHON to choose\n"
                "the interpreter). Then: kubectl fightwatch --for 5m\n"
            ),
            "platforms": [
                {
                    "selector": {"matchExpressions": [{"key": "os", "operator": "In", "values": ["linux", "darwin"]}]},
                    "uri": f"{RELEASES}/v{release}/{archive_name(release)}",
                    "sha256": sha256,
                    "bin": "kubectl-fightwatch",
                    "files": [
                        {"from": "kubectl-fightwatch", "to": "."},
                        {"from": "LICENSE", "to": "."},
                    ],
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Texts of several lines as literal blocks (`|`), as manifests are written by hand."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check the committed manifest against the archive")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the archive is written (default dist/)")
    args = parser.parse_args(argv)
    release = version()
    data = archive_bytes(release)
    text = "# Generated by scripts/krew_package.py: edit it there.\n" + yaml.dump(
        manifest(release, hashlib.sha256(data).hexdigest()), Dumper=_Dumper, sort_keys=False, width=120
    )
    if args.check:
        if MANIFEST.read_text() != text:
            print(f"{MANIFEST} does not match the archive built now: run scripts/krew_package.py", file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / archive_name(release)).write_bytes(data)
    MANIFEST.write_text(text)
    print(f"wrote {args.out / archive_name(release)} and {MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
