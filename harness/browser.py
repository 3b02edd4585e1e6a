"""A real headless Chromium for the tests that render HTML (Debian's chromium and chromium-driver, scripts/browser.sh),
driven by Selenium.

`open_browser()` starts one (a temporary profile, no sandbox: the tests run as root in CI) and quits it on exit. The
`Browser` it yields opens pages and reports what they did: every URL they requested (from Chrome's performance log,
so a page that fetches something it should not can be caught), their console errors, a full-page screenshot, the
page at a phone's width and the page printed to PDF. A browser that cannot start raises RuntimeError with the tail
of chromedriver's log: the tests never skip for want of one.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.print_page_options import PrintOptions
from selenium.webdriver.remote.command import Command
from selenium.webdriver.support.wait import WebDriverWait

from . import REPO_ROOT
from .control_plane import LOG_TAIL_LINES

BROWSER_SCRIPT = REPO_ROOT / "scripts" / "browser.sh"

# Widths below this are emulated as a phone (mobile viewport: the page's <meta name="viewport"> applies).
MOBILE_MAX_WIDTH = 600

# The DevTools events (performance log) that are the page asking for a URL: every request (document, script,
# stylesheet, image, font, fetch/XHR, beacon, EventSource, each redirect hop) and every WebSocket it opens.
_REQUEST_EVENTS = {"Network.requestWillBeSent": ("request", "url"), "Network.webSocketCreated": ("url",)}


@functools.cache
def browser_paths() -> tuple[Path, Path]:
    """The chromium binary and chromedriver (scripts/browser.sh installs Debian's on first use)."""
    proc = subprocess.run(["bash", str(BROWSER_SCRIPT)], capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or len(lines) < 2:
        tail = "\n".join(proc.stderr.strip().splitlines()[-LOG_TAIL_LINES:])
        raise RuntimeError(f"{BROWSER_SCRIPT} failed (exit {proc.returncode}):\n{tail}")
    return Path(lines[-2]), Path(lines[-1])


@dataclass
class Browser:
    """A running headless Chromium, one tab. Requests and console errors are those since the last `open`."""

    driver: webdriver.Chrome
    width: int
    height: int
    _requests: list[str] = field(default_factory=list, repr=False)
    _console_errors: list[str] = field(default_factory=list, repr=False)
    # Until the request for the document of the page opened last shows up, the log's requests are an earlier page's.
    _awaiting_document: bool = field(default=False, repr=False)
    _opened_ms: float = field(default=0.0, repr=False)

    def open(self, url: str) -> None:
        """Load `url` and wait for its load event (images included, failed ones too)."""
        self._drain()  # what earlier pages did is not this one's
        self._requests.clear()
        self._console_errors.clear()
        self._awaiting_document = not url.startswith("about:")  # about:blank is no request
        self._opened_ms = time.time() * 1000
        self.driver.get(url)

    def requests(self) -> list[str]:
        """Every URL the page requested since the last `open`, in order, the document itself first (data: URLs
        included)."""
        try:
            WebDriverWait(self.driver, 10).until(self._drained_to_document)
        except TimeoutException:
            raise RuntimeError("Chrome's performance log has no request for the page opened last") from None
        return list(self._requests)

    def console_errors(self) -> list[str]:
        """The browser console's SEVERE messages since the last `open` (uncaught exceptions, console.error, failed
        loads)."""
        self._drain()
        return list(self._console_errors)

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        """Save a PNG of the whole page (its full scroll height), or of the viewport alone."""
        if full_page:
            size = self._cdp("Page.getLayoutMetrics")["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            shot = self._cdp("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
            png = base64.b64decode(shot["data"])
        else:
            png = self.driver.get_screenshot_as_png()
        path.write_bytes(png)
        return path

    def set_width(self, px: int) -> None:
        """Lay the page out at `px` CSS pixels wide (a phone below MOBILE_MAX_WIDTH); the height stays."""
        self.width = px
        self._emulate_viewport()

    def _emulate_viewport(self) -> None:
        # The viewport is exactly width x height: headless Chromium's own, from --window-size, is shorter (it
        # leaves room for a toolbar it does not draw).
        self._cdp(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=self.width < MOBILE_MAX_WIDTH,
        )

    def pdf(self, path: Path) -> Path:
        """Print the page to PDF (Chromium's print, backgrounds included) at `path`."""
        options = PrintOptions()
        options.background = True
        path.write_bytes(base64.b64decode(self.driver.print_page(options)))
        return path

    def _cdp(self, command: str, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.driver.execute_cdp_cmd(command, params)
        return result

    def _log(self, kind: str) -> list[dict[str, Any]]:
        """The entries of one of chromedriver's logs since it was last read (what `driver.get_log` returns)."""
        entries: list[dict[str, Any]] = self.driver.execute(Command.GET_LOG, {"type": kind})["value"]
        return entries

    def _drained_to_document(self, _driver: object) -> bool:
        self._drain()
        return not self._awaiting_document

    def _drain(self) -> None:
        """Read the performance and browser logs (chromedriver hands each entry out once) into the lists."""
        # A tab's main frame has the tab's id (its window handle), whatever page it shows.
        main_frame = self.driver.current_window_handle if self._awaiting_document else None
        for entry in self._log("performance"):
            event = json.loads(entry["message"])["message"]
            keys = _REQUEST_EVENTS.get(event.get("method", ""))
            if keys is None:
                continue
            params: dict[str, Any] = event.get("params", {})
            value: Any = params
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if not isinstance(value, str):
                continue
            if self._awaiting_document:  # an earlier page's requests, up to the new main-frame document
                if params.get("type") != "Document" or params.get("frameId") != main_frame:
                    continue
                self._awaiting_document = False
            self._requests.append(value)
        self._console_errors.extend(
            str(entry["message"])
            for entry in self._log("browser")
            if entry.get("level") == "SEVERE" and entry.get("timestamp", 0) >= self._opened_ms
        )


def spki_digest(certificate: Path) -> str:
    """The base64 SHA-256 of a certificate's public key (SubjectPublicKeyInfo), as Chromium pins keys."""
    cert = x509.load_pem_x509_certificate(certificate.read_bytes())
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


@contextlib.contextmanager
def open_browser(*, width: int = 1280, height: int = 900, trust: Sequence[Path] = ()) -> Iterator[Browser]:
    """A headless Chromium with a `width` x `height` viewport and a fresh profile, quit on exit. `trust`: server
    certificates (PEM) it accepts whoever signed them (pinned by their public key; every other certificate is
    verified as usual), e.g. a test server's."""
    chromium, chromedriver = browser_paths()
    # Explicit paths skip Selenium Manager altogether; should anything still call it, it downloads nothing.
    os.environ.setdefault("SE_OFFLINE", "true")
    with tempfile.TemporaryDirectory(prefix="fightwatch-browser-", ignore_cleanup_errors=True) as tmp:
        log = Path(tmp) / "chromedriver.log"
        options = webdriver.ChromeOptions()
        options.binary_location = str(chromium)
        for argument in (
            "--headless=new",
            "--no-sandbox",  # Chromium refuses to run as root with its sandbox (and containers often lack userns)
            "--disable-dev-shm-usage",  # a container's /dev/shm is small: shared memory in /tmp instead
            "--disable-gpu",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            f"--window-size={width},{height}",
            "--force-device-scale-factor=1",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            "--disable-component-update",  # nothing reaches the network but the pages' own requests
            "--disable-background-networking",
            "--disable-domain-reliability",
            "--no-pings",
        ):
            options.add_argument(argument)
        if trust:
            options.add_argument(f"--ignore-certificate-errors-spki-list={','.join(map(spki_digest, trust))}")
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        options.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": False})
        service = Service(executable_path=str(chromedriver), log_output=str(log), service_args=["--enable-chrome-logs"])
        try:
            driver = webdriver.Chrome(service=service, options=options)
        except WebDriverException as error:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]) if log.exists() else ""
            raise RuntimeError(
                f"could not start {chromium} through {chromedriver}: {error.msg}\nchromedriver's log:\n{tail}"
            ) from error
        try:
            browser = Browser(driver, width, height)
            browser._emulate_viewport()
            browser.open("about:blank")  # away from the new-tab page Chromium starts on (it goes on loading)
            yield browser
        finally:
            driver.quit()
