"""The HTML report (`fightwatch demo --html`) in a real headless Chromium: every finding with its writers, a
timeline per finding with one lane per writer and every recorded write drawn once (a mark, or counted in a group
or a bin), filters that work, nothing requested from anywhere, usable at a phone's width, printable."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from harness.browser import Browser, open_browser
from watcher.config import Config
from watcher.model import Finding, Timeline
from watcher.offline import DEMO_AUDIT, DEMO_CAPTURE, Analysis


@pytest.fixture(scope="module")
def findings() -> dict[str, Finding]:
    """The demo's findings with their timelines, by id: the same analysis as the command's (its capture joined with its
    audit log)."""
    data = resources.files("watcher") / "data"
    with resources.as_file(data / DEMO_CAPTURE) as capture, resources.as_file(data / DEMO_AUDIT) as audit:
        analysis = Analysis(Config(), captures=[str(capture)], requests=[str(audit)])
        analysis.run(skip_invalid=False)
    return {f.id: f for f in analysis.findings()}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    path = tmp_path_factory.mktemp("report") / "demo.html"
    fightwatch = [sys.executable, "-m", "watcher", "demo"]
    result = subprocess.run([*fightwatch, "-o", "json", "--html", str(path)], capture_output=True, check=True)
    return path, [orjson.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with open_browser(width=1280, height=900) as opened:
        yield opened


@pytest.fixture
def page(browser: Browser, report: tuple[Path, list[dict[str, Any]]]) -> Browser:
    browser.set_width(1280)
    browser.open(report[0].as_uri())
    return browser


def _cards(browser: Browser) -> list[WebElement]:
    return browser.driver.find_elements(By.CSS_SELECTOR, "article.finding")


def _visible(browser: Browser) -> list[str]:
    return [c.get_attribute("id") or "" for c in _cards(browser) if c.is_displayed()]


def _drawn(card: WebElement) -> int:
    """The writes a card's timeline draws: single marks, the counts of groups of marks too close to tell apart."""
    marks = card.find_elements(By.CSS_SELECTOR, "svg.timeline .mark")
    groups = card.find_elements(By.CSS_SELECTOR, "svg.timeline .mark-group")
    return len(marks) + sum(int(g.get_attribute("data-count") or 0) for g in groups)


def _folded(card: WebElement) -> int:
    return sum(int(b.get_attribute("data-count") or 0) for b in card.find_elements(By.CSS_SELECTOR, "svg .bin"))


def test_every_finding_is_shown_with_its_writers_and_a_timeline_of_every_write(
    page: Browser, report: tuple[Path, list[dict[str, Any]]], findings: dict[str, Finding]
) -> None:
    printed = report[1]
    cards = {c.get_attribute("id"): c for c in _cards(page)}
    assert set(cards) == {f"finding-{f['id']}" for f in printed}
    assert [c.get_attribute("id") for c in _cards(page)] == [f"finding-{f['id']}" for f in printed]  # same order
    for found in printed:
        card = cards[f"finding-{found['id']}"]
        text = card.text
        assert found["object"]["name"] in text
        for writer in found["writers"]:
            assert (writer["manager"] or "(unattributed)") in text
        timeline = findings[found["id"]].timeline
        assert isinstance(timeline, Timeline)
        lanes = [g.get_attribute("data-writer") for g in card.find_elements(By.CSS_SELECTOR, "svg.timeline g.lane")]
        assert lanes == [w.display() for w in timeline.lanes]
        assert _drawn(card) == len(timeline.marks()), found["object"]["name"]
        assert _folded(card) == sum(b.writes for b in timeline.bins)
        shapes = {g.get_attribute("data-shape") for g in card.find_elements(By.CSS_SELECTOR, "svg.timeline g.lane")}
        assert len(shapes) == len(lanes)  # told apart without colour
        assert card.find_elements(By.CSS_SELECTOR, "svg.timeline .detected")


def test_the_filters_choose_the_findings_shown(page: Browser, report: tuple[Path, list[dict[str, Any]]]) -> None:
    findings = report[1]
    everything = _visible(page)
    assert len(everything) == len(findings)
    kind = Select(page.driver.find_element(By.ID, "filter-type"))
    kind.select_by_value("hot_loop")
    hot = _visible(page)
    loops = sum(f["type"] == "hot_loop" for f in findings)
    assert 0 < len(hot) == loops < len(findings)
    assert page.driver.find_element(By.ID, "filter-count").text == f"Showing {loops} of {len(findings)} findings"
    namespace = Select(page.driver.find_element(By.ID, "filter-namespace"))
    namespace.select_by_value("flux-hpa")  # a fight: no hot loop there
    assert _visible(page) == []
    assert page.driver.find_element(By.ID, "no-match").is_displayed()
    page.driver.find_element(By.ID, "filter-clear").click()
    assert _visible(page) == everything


def test_nothing_is_requested_from_anywhere(page: Browser, report: tuple[Path, list[dict[str, Any]]]) -> None:
    requested = [url for url in page.requests() if not url.startswith("data:")]
    assert requested == [report[0].as_uri()]
    assert page.console_errors() == []


def test_at_a_phones_width_the_page_does_not_overflow(page: Browser) -> None:
    page.set_width(390)
    page.open(page.driver.current_url)
    width = page.driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390
    first = _cards(page)[0]
    assert first.is_displayed()
    assert first.find_element(By.CSS_SELECTOR, "svg.timeline").size["width"] > 0


def test_it_prints_to_pdf(page: Browser, tmp_path: Path) -> None:
    pdf = page.pdf(tmp_path / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    assert pdf.count(b"/Type /Page") - pdf.count(b"/Type /Pages") >= 2  # the findings, over several pages
