#!/usr/bin/env python3
"""What grouping findings into incidents costs (`detection.incidents.group`), which every scrape of /metrics does
for the active findings (the incident series), as do /api/v1/incidents and the page.

The findings are real: the 28 of the bundled demo capture (every recorded scenario, four of them consequences of
a fight). Each `--findings` count is made of copies of them on other objects (name and uid replaced, finding ids and
their `related` links made anew), all active, in two shapes:

- `shared`: the copies keep their writers, so the findings form the same 14 incidents, each on many objects;
- `distinct`: each copy's writers are renamed, so every copy of a pattern is an incident of its own (about one
  incident per two findings: the most incidents N findings make but for one each).

It prints, per count and shape, the incidents made and the best and median time of `--repeat` calls of `group`.

    .venv/bin/python scripts/bench_incidents.py [--findings 10000 50000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from dataclasses import replace
from pathlib import Path

from harness.bench.machine import machine
from watcher.config import Config
from watcher.detection.engine import Engine
from watcher.detection.incidents import group
from watcher.model import Finding, FindingState, WriterCount
from watcher.sources.capture import ReadStats, read_capture

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "watcher" / "data" / "demo-capture.jsonl.gz"


def real_findings() -> list[Finding]:
    """The findings of the demo capture."""
    engine = Engine(Config().detection)
    for event in read_capture(str(DEMO), engine.decode, stats=ReadStats()):
        engine.process(event)
    return engine.active() + engine.resolved()


def _id(finding_id: str, copy: int) -> str:
    return hashlib.blake2b(f"{finding_id}/{copy}".encode(), digest_size=8).hexdigest()


def copies(base: list[Finding], count: int, *, distinct: bool) -> list[Finding]:
    """`count` active findings: copies of `base` on objects of other names and uids (`distinct`: by writers renamed
    per copy too)."""
    made: list[Finding] = []
    for copy in range(count // len(base) + 1):
        for finding in base:
            ref = finding.object
            writers = finding.writers
            if distinct:
                writers = tuple(
                    WriterCount(c.writer._replace(manager=f"{c.writer.manager}-{copy}"), c.writes, c.users)
                    for c in writers
                )
            made.append(
                replace(
                    finding,
                    id=_id(finding.id, copy),
                    object=replace(ref, name=f"{ref.name}-{copy}", uid=f"{ref.uid}-{copy}"),
                    writers=writers,
                    related=None if finding.related is None else _id(finding.related, copy),
                    state=FindingState.ACTIVE,
                    resolved_at=None,
                )
            )
    return made[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--findings", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    base = real_findings()
    about = machine()
    print(f"{len(base)} real findings; {about['cpu']}, {about['cores']} cores, Python {about['python']}")
    for count in args.findings:
        for shape in ("shared", "distinct"):
            findings = copies(base, count, distinct=shape == "distinct")
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                incidents = group(findings)
                times.append(time.perf_counter() - start)
            print(
                f"{count:>7,} findings, {shape:<8}: {len(incidents):>6,} incidents, "
                f"group() best {min(times) * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms"
            )


if __name__ == "__main__":
    main()
