"""Records of each form as their publishers printed them (cloud documentation, the clouds' CLIs' examples, other
projects' test data: `tests/fixtures/audit/published`, SOURCES.md saying where each came from and under which licence)
are read as their form: every record an audit event or a counted skip, as `manifest.yaml` says of each file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from watcher.sources.audit import AuditError, AuditStats, read_audit_log

PUBLISHED = Path(__file__).parents[1] / "fixtures" / "audit" / "published"
MANIFEST: dict[str, dict[str, Any]] = yaml.safe_load((PUBLISHED / "manifest.yaml").read_text())["files"]
NOT_SAMPLES = {"SOURCES.md", "manifest.yaml"}


def test_every_sample_has_its_source_licence_and_expectations() -> None:
    samples = {path.name for path in PUBLISHED.iterdir()} - NOT_SAMPLES
    assert samples == set(MANIFEST)
    sources = (PUBLISHED / "SOURCES.md").read_text()
    for name, entry in MANIFEST.items():
        assert entry["source"]
        assert entry["licence"]
        assert f"| {name} |" in sources


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_each_published_sample_is_read_as_its_form(name: str) -> None:
    expect = MANIFEST[name]["expect"]
    path = PUBLISHED / name
    stats = AuditStats()
    read: list[Any] = []
    if "error" in expect:
        with pytest.raises(AuditError) as error:
            read.extend(read_audit_log(str(path), stats=stats))
        assert str(error.value) == f"{path}:{expect['error']}"
    else:
        read.extend(read_audit_log(str(path), stats=stats))
    envelopes = stats.envelopes
    assert [e.value for e in envelopes.records] in ([expect["envelope"]], [])
    assert (sum(envelopes.records.values()) or stats.events) == expect["records"]
    assert (stats.events, stats.requests, stats.without_object, sum(stats.stages_skipped.values())) == (
        expect["events"],
        expect["on_objects"],
        expect["non_resource"],
        expect["other_stages"],
    )
    assert len(read) == stats.requests
    assert dict(envelopes.skipped) == expect["skipped"]
    assert not envelopes.unread
    # Every record is an event or a counted skip.
    assert sum(envelopes.records.values()) in (0, stats.events + envelopes.passed_over)
