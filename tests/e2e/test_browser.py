"""The browser harness (harness/browser.py) in a real headless Chromium: it runs a page's script, sees every request
the page makes (so a check that nothing leaves the page can fail), and saves full-page screenshots and PDFs."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from harness.browser import Browser, open_browser

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>harness check</title>
</head>
<body>
<svg id="chart" width="200" height="100" viewBox="0 0 200 100" role="img" aria-label="chart">
  <rect x="10" y="10" width="80" height="80" fill="#c0392b"/>
  <circle cx="150" cy="50" r="40" fill="#2980b9"/>
</svg>
<p id="status">before</p>
<button id="go" type="button" onclick="document.getElementById('status').textContent = 'after'">go</button>
<div style="height: 2000px; background: linear-gradient(#fff, #999)"></div>
<p>end</p>
</body>
</html>
"""

EXTERNAL_URL = "http://127.0.0.1:9/x.png"  # the discard port: nothing listens, the request is still made


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with open_browser(width=1280, height=900) as running:
        yield running


def _page(directory: Path, name: str, html: str) -> str:
    path = directory / name
    path.write_text(html, encoding="utf-8")
    return path.as_uri()


def _png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])  # IHDR, the first chunk
    return width, height


def test_page_script_runs_and_the_page_requests_only_itself(browser: Browser, tmp_path: Path) -> None:
    url = _page(tmp_path, "page.html", PAGE)
    browser.open(url)

    status = browser.driver.find_element(By.ID, "status")
    assert status.text == "before"
    assert browser.driver.find_element(By.ID, "chart").is_displayed()
    browser.driver.find_element(By.ID, "go").click()
    WebDriverWait(browser.driver, 10).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "status"), "after")
    )
    assert status.text == "after"

    assert browser.requests() == [url]
    assert browser.console_errors() == []


def test_a_request_leaving_the_page_is_seen(browser: Browser, tmp_path: Path) -> None:
    url = _page(tmp_path, "leaky.html", f'<!doctype html><title>leaky</title><img src="{EXTERNAL_URL}" alt="x">')
    browser.open(url)

    assert browser.requests() == [url, EXTERNAL_URL]
    assert any(EXTERNAL_URL in message for message in browser.console_errors())

    # The next page's requests are its own.
    clean = _page(tmp_path, "clean.html", "<!doctype html><title>clean</title><p>nothing to fetch</p>")
    browser.open(clean)
    assert browser.requests() == [clean]
    assert browser.console_errors() == []


def test_screenshot_covers_the_whole_page_and_pdf_prints(browser: Browser, tmp_path: Path) -> None:
    browser.open(_page(tmp_path, "page.html", PAGE))

    png = browser.screenshot(tmp_path / "full.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    assert len(png) > 1000
    width, height = _png_size(png)
    assert width == 1280
    assert height > 2000  # beyond the 900 px viewport: the page's whole height

    viewport = browser.screenshot(tmp_path / "viewport.png", full_page=False).read_bytes()
    assert viewport.startswith(PNG_SIGNATURE)
    assert _png_size(viewport) == (1280, 900)

    pdf = browser.pdf(tmp_path / "page.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    assert len(pdf) > 1000


def test_phone_width(browser: Browser, tmp_path: Path) -> None:
    browser.open(_page(tmp_path, "page.html", PAGE))
    browser.set_width(390)
    try:
        assert browser.driver.execute_script("return window.innerWidth") == 390
        png = browser.screenshot(tmp_path / "phone.png").read_bytes()
        assert _png_size(png)[0] == 390
    finally:
        browser.set_width(1280)
