"""The container image, built as `make image` builds it (scripts/image.sh: buildah, local base images, no registry).

image = build_image()       # warm: seconds
node.import_image(image.archive)
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT

IMAGE_SCRIPT = REPO_ROOT / "scripts" / "image.sh"


class ImageError(RuntimeError):
    """scripts/image.sh failed: the message carries the end of what it said."""


@dataclass(frozen=True)
class Image:
    name: str  # localhost/fightwatch:VERSION
    archive: Path  # a docker-archive that carries the name, for `ctr images import`
    size: int  # bytes, uncompressed


def build_image() -> Image:
    """Build the image with scripts/image.sh, and read what it printed (`KEY VALUE` lines)."""
    done = subprocess.run(["bash", str(IMAGE_SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise ImageError(f"{IMAGE_SCRIPT} failed (exit {done.returncode}):\n{done.stderr[-5000:]}")
    printed = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.strip())
    return Image(printed["image"], Path(printed["archive"]), int(printed["size"]))
