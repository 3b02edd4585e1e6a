#!/usr/bin/env python3
"""The screenshots of the page in docs/images: findings of the bundled demo capture, drawn by a real headless
Chromium (harness/browser.py), at a desktop width and at a phone's.

    .venv/bin/python scripts/screenshots.py [--out docs/images]

Writes timeline-fight.png (two writers over a Deployment's spec.replicas), timeline-three-writers.png,
timeline-hot-loop.png (about 150 writes of a status loop), and page-phone.png (the fight's card, 390 px wide).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from selenium.webdriver.common.by import By

from harness.browser import Browser, open_browser

REPO = Path(__file__).resolve().parents[1]

# file name -> the object whose finding it shows
CARDS = {
    "timeline-fight.png": "fight-apply-vs-update-replicas",
    "timeline-three-writers.png": "fight-three-writers",
    "timeline-hot-loop.png": "hot-loop-status",
}


def shoot(browser: Browser, namespace: str, path: Path) -> None:
    """A screenshot of the card of the finding in `namespace`, with the sticky filter bar out of its way."""
    driver = browser.driver
    driver.execute_script("document.getElementById('filters').style.position = 'static'")
    card = driver.find_element(By.CSS_SELECTOR, f'article.finding[data-namespace="{namespace}"]')
    driver.execute_script("arguments[0].scrollIntoView()", card)
    card.screenshot(str(path))
    print(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "demo.html"
        fightwatch = Path(sys.executable).with_name("fightwatch")
        subprocess.run([str(fightwatch), "demo", "--html", str(report)], check=True, capture_output=True)
        with open_browser(width=1280, height=900) as browser:
            browser.open(report.as_uri())
            for name, namespace in CARDS.items():
                shoot(browser, namespace, args.out / name)
            browser.set_width(390)
            browser.open(report.as_uri())
            shoot(browser, CARDS["timeline-fight.png"], args.out / "page-phone.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
