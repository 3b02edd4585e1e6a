"""The alert rules: valid for Prometheus 2.42 (`promtool check rules`), behaving as their fixture series say
(`promtool test rules`), every runbook link pointing at a section that exists in docs/runbook.md, and the finding
alerts in two groups of the same names, one per incident and one per finding, as fightwatch's `delivery.per` says."""

from __future__ import annotations

import re
from typing import Any, get_args

import yaml

from harness import REPO_ROOT
from harness.monitoring import RULES_FILE, RULES_TEST_FILE, promtool
from watcher.config import DeliverySettings
from watcher.delivery import alertmanager
from watcher.model import FindingType

RUNBOOK = REPO_ROOT / "docs" / "runbook.md"
# The groups of the finding alerts, by the `delivery.per` they alert for (their rules' `per` label).
FINDING_GROUPS = {"incident": "fightwatch.incidents", "finding": "fightwatch.findings"}


def _groups() -> dict[str, list[dict[str, Any]]]:
    return {group["name"]: group["rules"] for group in yaml.safe_load(RULES_FILE.read_text())["groups"]}


def _rules() -> list[dict[str, Any]]:
    return [rule for rules in _groups().values() for rule in rules]


def _exports_per(test: dict[str, Any], per: str) -> bool:
    """Whether a unit test's fixture has a fightwatch process that alerts `per` (fightwatch_alerting_info)."""
    return any(
        s["series"].startswith("fightwatch_alerting_info{") and f'per="{per}"' in s["series"]
        for s in test["input_series"]
    )


def _anchors() -> set[str]:
    """GitHub's anchors of the runbook's headings."""
    headings = re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", RULES_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_every_alert_has_fixture_series_that_fire_it_and_do_not_yet() -> None:
    """Per rule: the finding alerts share their names between two groups, told apart by their `per` label (checked
    in fixtures of processes that alert that way)."""
    tests = yaml.safe_load(RULES_TEST_FILE.read_text())["tests"]
    for rule in _rules():
        per = rule["labels"].get("per")
        mine = [
            c
            for t in tests
            if per is None or _exports_per(t, per)
            for c in t["alert_rule_test"]
            if c["alertname"] == rule["alert"]
        ]
        what = f"{rule['alert']} (per {per})" if per else rule["alert"]
        fired = [a for c in mine for a in c["exp_alerts"] if a["exp_labels"].get("per") == per]
        assert fired, f"{what}: no check while it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{what}: no check before it fires"
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


def test_finding_alerts_fire_per_incident_or_per_finding_as_fightwatch_says() -> None:
    """Each finding alert has a rule per incident and one per finding, alike but for what they count and link, each
    keeping only the series of the processes whose `fightwatch_alerting_info{per}` is its own."""
    assert set(FINDING_GROUPS) == set(get_args(DeliverySettings.model_fields["per"].annotation))
    assert DeliverySettings().per == "incident"
    groups = _groups()
    names = [alertmanager.ALERT_NAMES[kind] for kind in FindingType]
    incidents, findings = groups[FINDING_GROUPS["incident"]], groups[FINDING_GROUPS["finding"]]
    assert sorted(r["alert"] for r in incidents) == sorted(names)
    assert [r["alert"] for r in findings] == [r["alert"] for r in incidents]
    for per, rules in (("incident", incidents), ("finding", findings)):
        for rule in rules:
            assert rule["labels"]["per"] == per
            assert f'and on (job, instance) fightwatch_alerting_info{{per="{per}"}}' in rule["expr"], rule["alert"]
            assert "max without (instance, pod)" in rule["expr"]  # a shard's replicas counted once
    for by_incident, by_finding in zip(incidents, findings, strict=True):
        assert by_incident["for"] == by_finding["for"]
        assert by_incident["labels"]["severity"] == by_finding["labels"]["severity"]
        assert by_incident["annotations"]["runbook_url"] == by_finding["annotations"]["runbook_url"]
        assert "sum without (shard)" in by_incident["expr"]  # one alert per incident, whatever shards it is in
        annotations = by_incident["annotations"]
        assert annotations["objects"] == '{{ printf "%.0f" $value }}'
        assert "/findings?incident={{ $labels.incident }}" in annotations["description"]
    # No other rule alerts on findings or incidents.
    others = [r for name, rules in groups.items() if name not in FINDING_GROUPS.values() for r in rules]
    assert not [r["alert"] for r in others if re.search(r"fightwatch_(finding|incident)_", r["expr"])]
