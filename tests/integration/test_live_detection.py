"""End to end on the real control plane: real clients fight while a real watch records; the engine finds them.

All scenarios run at once (each in its own namespace) under one recorder, the slow fight at its real pace (one write
every 50 s), with kube-controller-manager providing the benign status and ReplicaSet churn and the real
HorizontalPodAutoscaler, on each release the suite runs: the current one (the session's `live_run`, which `fightwatch
run` follows at the same time) and the oldest upstream still supports (a run of its own). The expectations are the
same as for the current release's recorded fixtures, so a fixture that no longer matches what a server does today
fails here.
"""

from __future__ import annotations

from collections import defaultdict

import orjson
import pytest

from harness.control_plane import default_release
from harness.scenarios import scenario_of
from tests.expectations import BENIGN, FINDINGS, assert_found
from tests.integration.conftest import LiveRun, live_releases
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.model import Finding


@pytest.fixture(scope="module", params=live_releases())
async def live_events(request: pytest.FixtureRequest, live_run: LiveRun) -> dict[str, list[dict[str, object]]]:
    """Each scenario's watch events, live on one release: the session's run on the default release, the run beside it
    (a recorder, no watcher) on the other."""
    release = request.param
    recorded = live_run.events if release == default_release() else live_run.other_releases[release]
    by_scenario: dict[str, list[dict[str, object]]] = defaultdict(list)
    for event in recorded:
        scenario = scenario_of(event["object"])
        if scenario is not None:
            by_scenario[scenario].append(event)
    return by_scenario


def _analyse(events: list[dict[str, object]]) -> tuple[list[Finding], Engine]:
    engine = Engine(Config().detection)
    for doc in events:
        event = engine.decode(orjson.dumps(doc))
        assert event is not None
        engine.process(event)
    return engine.active() + engine.resolved(), engine


@pytest.mark.parametrize("scenario", sorted(FINDINGS))
async def test_live_fights_and_hot_loops_are_found(
    live_events: dict[str, list[dict[str, object]]], scenario: str
) -> None:
    findings, _ = _analyse(live_events[scenario])
    assert_found(scenario, findings)


@pytest.mark.parametrize("scenario", BENIGN)
async def test_live_benign_churn_is_not_flagged(live_events: dict[str, list[dict[str, object]]], scenario: str) -> None:
    findings, engine = _analyse(live_events[scenario])
    assert engine.stats.writes > 0
    assert findings == []


async def test_all_scenarios_together_give_exactly_the_injected_findings(
    live_events: dict[str, list[dict[str, object]]],
) -> None:
    every = sorted((e for events in live_events.values() for e in events), key=lambda e: str(e["observedAt"]))
    findings, _ = _analyse(every)
    assert sorted((f.object.kind, f.object.name) for f in findings) == sorted(
        (e.kind, e.name) for e in FINDINGS.values()
    )
