#!/usr/bin/env python3
"""Build the krew plugin's archive and write its manifest (harness/krew.py).

`--check` fails when the committed manifest (deploy/krew/fightwatch.yaml) does not match what is built (CI runs it).

    python scripts/krew_package.py            # build dist/..., write the manifest's version, uri and sha256
    python scripts/krew_package.py --check    # the committed manifest matches the archive
    kubectl krew install --manifest=deploy/krew/fightwatch.yaml --archive=dist/kubectl-fightwatch-v0.1.0.tar.gz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import REPO_ROOT, krew


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check the committed manifest against the archive")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "dist", help="where the archive is written (default dist/)"
    )
    args = parser.parse_args(argv)
    release = krew.version()
    data = krew.archive_bytes(release)
    text = krew.manifest_text(release, data)
    if args.check:
        if krew.MANIFEST.read_text() != text:
            print(f"{krew.MANIFEST} does not match the archive built now: run scripts/krew_package.py", file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / krew.archive_name(release)).write_bytes(data)
    krew.MANIFEST.write_text(text)
    print(f"wrote {args.out / krew.archive_name(release)} and {krew.MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
