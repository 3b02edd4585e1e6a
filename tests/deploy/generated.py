"""Files the repository generates with a script of its own (the chart's values schema, the dashboards, the krew
manifest): each committed as its script makes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def assert_up_to_date(script: str) -> None:
    """`python scripts/<script> --check` passes: what the script generates is committed as it generates it now."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
