"""The alert rules: valid for Prometheus 2.42 (`promtool check rules`), behaving as their fixture series say
(`promtool test rules`), and every runbook link pointing at a section that exists in docs/runbook.md."""

from __future__ import annotations

import re

import yaml

from harness.control_plane import REPO_ROOT
from harness.monitoring import RULES_FILE, RULES_TEST_FILE, promtool
from watcher.model import FindingType
from watcher.sinks import alertmanager

RUNBOOK = REPO_ROOT / "docs" / "runbook.md"


def _rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _anchors() -> set[str]:
    """GitHub's anchors of the runbook's headings."""
    headings = re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", RULES_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_every_alert_has_fixture_series_that_fire_it_and_do_not_yet() -> None:
    tests = yaml.safe_load(RULES_TEST_FILE.read_text())["tests"]
    checks = [c for t in tests for c in t["alert_rule_test"]]
    for rule in _rules():
        mine = [c for c in checks if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{rule['alert']}: no check while it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{rule['alert']}: no check before it fires"
    result = promtool("test", "rules", RULES_TEST_FILE.name, cwd=RULES_TEST_FILE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_documented_and_links_its_runbook_section() -> None:
    anchors = _anchors()
    for rule in _rules():
        labels, annotations = rule["labels"], rule["annotations"]
        assert isinstance(labels, dict)
        assert isinstance(annotations, dict)
        assert labels["severity"] in {"info", "warning", "critical"}
        assert {"summary", "description", "runbook_url"} <= set(annotations)
        base, _, anchor = str(annotations["runbook_url"]).partition("#")
        assert base == alertmanager.RUNBOOK
        assert anchor == str(rule["alert"]).lower()
        assert anchor in anchors, f"docs/runbook.md has no section {rule['alert']}"


def test_direct_alerts_share_the_rules_names_and_runbook_sections() -> None:
    names = {str(rule["alert"]) for rule in _rules()}
    for kind in FindingType:
        assert alertmanager.ALERT_NAMES[kind] in names
        assert alertmanager.RUNBOOK_ANCHORS[kind] == alertmanager.ALERT_NAMES[kind].lower()
