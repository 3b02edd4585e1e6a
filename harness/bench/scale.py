"""Measure one watcher at a time over many objects (scripts/bench_scale.py), and the API server serving it.

A turn starts one watcher, `fightwatch run` or the client-go metadata informer (scripts/informer), alone on the
control plane, and takes it through four phases, each with the API server's CPU seconds, peak (VmHWM, reset at
the phase's start) and resident memory at its end:

- start: from the process's start to ready (fightwatch's /readyz 200; the informer's caches synced);
- idle: `IDLE_SECONDS` of nothing;
- load: merge patches at a fixed rate (`Scale.rate` a second for `Scale.duration` s), until the watcher has
  received every write: its CPU seconds per event, its peak and its memory at the end;
- relist: the watcher stopped (SIGSTOP), one ConfigMap written, etcd compacted and the API server restarted, so
  that the watch resumes from an expired resourceVersion (410 Gone) and reads every object again; from the resumed
  watcher to ready again (fightwatch: the ConfigMaps read twice and /readyz 200; the informer: its reflector's last
  synced resourceVersion at or past a write made after the restart, and its handlers past a ConfigMap written
  then, as they are given the relisted objects first). The API server's figures are its new
  process's: its own start included, which a turn with no watcher measures alone.

The ConfigMaps (`configmaps`) and the relist's steps (`expire_watches`) are scripts/bench_initial_state.py's too.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.bench import cluster_load
from harness.bench.cluster_load import Write, write_at_rate
from harness.bench.polling import poll
from harness.bench.process import cpu_seconds, memory_kib, reset_peak
from harness.bench.scale_report import FIGHTWATCH, INFORMER, NO_WATCHER
from harness.control_plane import ControlPlane
from harness.kube import CONFIGMAPS, JSON, Kube
from harness.watcher import Watcher as Fightwatch

IDLE_SECONDS = 10.0
READY_DEADLINE = 1200.0  # seconds to ready, or ready again: generous, 100,000 objects on a loaded machine
DRAIN_DEADLINE = 600.0
RESTART_DEADLINE = 600.0  # seconds for the API server to be ready again over the objects
MANAGERS = ("writer-a", "writer-b")  # the load's field managers, each writing a data key of its own
MARKER = "bench-marker-"  # the name prefix of the ConfigMaps the informer says it has seen
STRIDE = 7919  # the k-th write goes to object k * STRIDE mod objects: spread over all, no two in a row alike


@dataclass(frozen=True)
class Scale:
    """The objects, and the load on them."""

    objects: int
    namespaces: int
    rate: float  # writes per second
    duration: float  # seconds of load


def namespace_of(n: int, namespaces: int) -> str:
    return f"bench-{n % namespaces}"


def configmaps(objects: int, namespaces: int) -> Iterator[tuple[str, JSON]]:
    """Yield the ConfigMaps (collection path, body): ~1 KB of data and two labels each, over `namespaces`."""
    for n in range(objects):
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{n:06d}", "labels": {"app": f"app-{n % 50}", "tier": "bench"}},
            "data": {"payload": "x" * 1000},
        }
        yield CONFIGMAPS.path(namespace_of(n, namespaces)), body


def load_write(k: int, objects: int, namespaces: int, *, stamp: int) -> Write:
    """The load's k-th write: a merge patch of one data key, by one of `MANAGERS` in turn.

    The value carries the load's `stamp`: a write of the value an object holds would change nothing, and the API
    server sends no event for it (a second load of the same writes would be mostly such).
    """
    n = k * STRIDE % objects
    manager = MANAGERS[k % len(MANAGERS)]
    path = CONFIGMAPS.path(namespace_of(n, namespaces), f"cm-{n:06d}")
    return Write(path, {"data": {manager: f"{stamp}-{k}"}}, manager)


async def expire_watches(cp: ControlPlane, kube: Kube, name: str) -> None:
    """Write a ConfigMap `name`, compact etcd and restart the API server: every watch from before gets 410 Gone.

    The watchers are to be stopped meanwhile (SIGSTOP), so that none reads the write before its relist.
    """
    await kube.create(CONFIGMAPS.path("bench-0"), _marker(name), manager="bench-setup")
    revision = cp.etcd_revision()
    cp.stop_apiserver()
    cp.run_etcdctl("compact", str(revision))
    cp.start_apiserver(deadline=RESTART_DEADLINE)


def _marker(name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


def memory_mib(pid: int) -> dict[str, float]:
    """Read VmHWM and VmRSS of a process, in MiB."""
    return {key: kib / 1024 for key, kib in memory_kib(pid).items()}


async def lists_done(watcher: Fightwatch, count: int) -> bool | None:
    """Tell whether fightwatch read the ConfigMaps `count` times and is ready (None: not yet)."""
    lists = await watcher.metric("fightwatch_watch_lists_total", group="", resource="configmaps")
    status, _ = await watcher.readiness()
    return True if lists is not None and lists >= count and status == 200 else None


class Subject(Protocol):
    """A watcher a turn measures."""

    name: str

    @property
    def pid(self) -> int: ...

    async def start(self) -> None: ...

    async def wait_ready(self) -> None: ...

    async def events(self) -> int:
        """The events received so far."""

    async def ready_again(self, written: int) -> bool:
        """Tell whether the relist read the objects again, a write of resourceVersion `written` included."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    async def stop(self) -> None: ...


class FightwatchSubject:
    """`fightwatch run`: metadata only, WatchList, delivery off, the native engine, ConfigMaps only."""

    name = FIGHTWATCH

    def __init__(self, workdir: Path, cp: ControlPlane, *, python: str, env: dict[str, str]) -> None:
        config = {
            "watch": {"resources": ["configmaps"], "watch_list": True},
            "delivery": {"events": {"enabled": False}},
        }
        self.watcher = Fightwatch(
            workdir, kubeconfig=cp.kubeconfig, config=config, record=False, env=env, args=("--engine", "native")
        )
        self.watcher.argv[0] = python

    @property
    def pid(self) -> int:
        return self.watcher.pid

    async def start(self) -> None:
        await self.watcher.start()

    async def wait_ready(self) -> None:
        await self.watcher.wait_ready(deadline=READY_DEADLINE)

    async def events(self) -> int:
        text = await self.watcher.scrape()
        return int(sum(float(line.rpartition(" ")[2]) for line in text.splitlines() if _is_events_sample(line)))

    async def ready_again(self, _written: int) -> bool:
        return bool(await lists_done(self.watcher, 2))

    def pause(self) -> None:
        self.watcher.pause()

    def resume(self) -> None:
        self.watcher.resume()

    async def stop(self) -> None:
        await self.watcher.stop(signal.SIGTERM)


def _is_events_sample(line: str) -> bool:
    return line.startswith(("fightwatch_events_total{", "fightwatch_events_total "))


class InformerSubject:
    """The client-go metadata informer of ConfigMaps (scripts/informer, WatchList as client-go ships it), counting
    only; it prints its progress on SIGUSR1."""

    name = INFORMER

    def __init__(self, workdir: Path, cp: ControlPlane, kube: Kube, *, binary: Path) -> None:
        self.workdir, self.cp, self.kube = workdir, cp, kube
        self.argv = [str(binary), "--resources", "v1/configmaps", "--count-only"]
        self.process: cluster_load.Watcher | None = None
        self.marker = ""  # the ConfigMap written once the relist is read, which the handlers see after it

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = cluster_load.start_other(
            cluster_load.Watcher, INFORMER, self.argv, self.cp, self.workdir, marker=MARKER
        )

    async def wait_ready(self) -> None:
        process = self.process
        assert process is not None

        async def synced() -> bool:
            if not process.alive():
                raise RuntimeError(f"the informer exited: {process.log.read_text()[-3000:]}")
            return b"ready" in process.log.read_bytes().splitlines()

        await poll(synced, "the informer's caches synced", READY_DEADLINE)

    async def progress(self) -> tuple[int, list[int]]:
        """Ask for the events so far and each informer's last synced resourceVersion (SIGUSR1), and read them."""
        process = self.process
        assert process is not None
        asked = len(self._progress_lines())
        process.proc.send_signal(signal.SIGUSR1)

        async def answered() -> list[str] | None:
            if not process.alive():
                raise RuntimeError(f"the informer exited: {process.log.read_text()[-3000:]}")
            lines = self._progress_lines()
            return lines if len(lines) > asked else None

        return parse_progress((await poll(answered, "the informer's progress", 30))[-1])

    def _progress_lines(self) -> list[str]:
        assert self.process is not None
        return [line for line in self.process.log.read_text().splitlines() if line.startswith("events ")]

    async def events(self) -> int:
        return (await self.progress())[0]

    async def ready_again(self, written: int) -> bool:
        """Tell whether the reflector read the objects again (its last synced version at `written` or past it), and
        its handlers have been given them: they see a ConfigMap written after that when they are done."""
        assert self.process is not None
        if self.marker:
            return f"seen {self.marker}".encode() in self.process.log.read_bytes()
        _, synced = await self.progress()
        if all(version >= written for version in synced):
            self.marker = f"{MARKER}{time.time_ns()}"
            await self.kube.create(CONFIGMAPS.path("bench-0"), _marker(self.marker), manager="bench-setup")
        return False

    def pause(self) -> None:
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGCONT)

    async def stop(self) -> None:
        if self.process is not None:
            self.process.proc.send_signal(signal.SIGCONT)
            cluster_load.stop([self.process])


def parse_progress(line: str) -> tuple[int, list[int]]:
    """Read the informer's `events N synced RV...` line: the events, and each informer's last synced version (0
    before its first list)."""
    words = line.split(" ")  # (an informer not listed yet prints an empty version: split on each space)
    if len(words) < 3 or words[0] != "events" or not words[1].isdigit() or words[2] != "synced":
        raise ValueError(f"not an informer's progress line: {line!r}")
    return int(words[1]), [int(word) if word.isdigit() else 0 for word in words[3:]]


class ServerFigures:
    """The API server's CPU seconds and memory over one phase at a time, into a turn's figures."""

    def __init__(self, cp: ControlPlane, figures: dict[str, Any]) -> None:
        self.cp, self.figures = cp, figures
        self.cpu = 0.0

    def begin(self) -> None:
        pid = self.cp.pid("kube-apiserver")
        reset_peak(pid)
        self.cpu = cpu_seconds(pid)

    def begin_started(self) -> None:
        """Begin at the process's own start (it was just started): all its CPU and its peak count."""
        self.cpu = 0.0

    def end(self, phase: str) -> None:
        pid = self.cp.pid("kube-apiserver")
        memory = memory_mib(pid)
        self.figures[f"apiserver_{phase}_cpu_s"] = round(cpu_seconds(pid) - self.cpu, 2)
        self.figures[f"apiserver_{phase}_peak_mib"] = round(memory["VmHWM"], 1)
        self.figures[f"apiserver_{phase}_rss_mib"] = round(memory["VmRSS"], 1)


async def turn(cp: ControlPlane, kube: Kube, subject: Subject | None, scale: Scale) -> dict[str, Any]:
    """Measure one watcher (None: the API server with no watcher) through the four phases; return its figures."""
    figures: dict[str, Any] = {"watcher": subject.name if subject else NO_WATCHER}
    server = ServerFigures(cp, figures)
    server.begin()
    try:
        if subject is not None:
            started = time.monotonic()
            await subject.start()
            await subject.wait_ready()
            figures["ready_s"] = round(time.monotonic() - started, 2)
        _sample(subject, figures, "start", cpu=True)
        server.end("start")
        server.begin()
        await asyncio.sleep(IDLE_SECONDS)  # the idle phase's length: a measured interval, not a wait for readiness
        _sample(subject, figures, "idle")
        server.end("idle")
        await _load(kube, subject, scale, figures=figures, server=server)
        await _relist(cp, kube, subject, figures=figures, server=server)
    finally:
        if subject is not None:
            await subject.stop()
    return figures


def _sample(subject: Subject | None, figures: dict[str, Any], phase: str, *, cpu: bool = False) -> None:
    """Put a watcher's memory at the end of `phase` into its figures (and its CPU so far)."""
    if subject is None:
        return
    memory = memory_mib(subject.pid)
    figures[f"{phase}_rss_mib" if phase != "start" else "ready_rss_mib"] = round(memory["VmRSS"], 1)
    if phase != "idle":
        figures[f"{phase}_peak_mib"] = round(memory["VmHWM"], 1)
    if cpu:
        figures[f"{phase}_cpu_s"] = round(cpu_seconds(subject.pid), 2)


async def _load(
    kube: Kube, subject: Subject | None, scale: Scale, *, figures: dict[str, Any], server: ServerFigures
) -> None:
    """Write at the rate until every write reached the watcher; its CPU per event, and its memory."""
    server.begin()
    before, cpu = 0, 0.0
    if subject is not None:
        reset_peak(subject.pid)
        before, cpu = await subject.events(), cpu_seconds(subject.pid)
    began, stamp = time.monotonic(), time.time_ns()
    load = await write_at_rate(
        kube,
        rate=scale.rate,
        duration=scale.duration,
        write_of=lambda k: load_write(k, scale.objects, scale.namespaces, stamp=stamp),
    )
    figures |= {"load_writes": load.writes, "load_errors": load.errors}
    if subject is not None:

        async def drained() -> int | None:
            received = await subject.events() - before
            return received if received >= load.writes else None

        events = await poll(drained, f"{subject.name} to receive every write", DRAIN_DEADLINE)
        seconds = time.monotonic() - began
        used = cpu_seconds(subject.pid) - cpu
        figures |= {
            "load_events": events,
            "load_cpu_ms_per_event": round(1000 * used / max(1, events), 4),
            "load_cores": round(used / seconds, 3),
        }
        _sample(subject, figures, "load")
    server.end("load")


async def _relist(
    cp: ControlPlane, kube: Kube, subject: Subject | None, *, figures: dict[str, Any], server: ServerFigures
) -> None:
    """Expire the watcher's watch while it is stopped; from its resumption to ready again, its figures."""
    if subject is None:
        await expire_watches(cp, kube, f"moved-none-{time.time_ns()}")
        server.begin_started()
        server.end("relist")
        return
    reset_peak(subject.pid)
    cpu = cpu_seconds(subject.pid)
    subject.pause()
    try:
        name = f"moved-{subject.name}-{time.time_ns()}"
        await expire_watches(cp, kube, name)
        # a write only the restarted API server has seen: a watcher that has it read again from that server (the
        # first write may wait in the stopped watcher's socket, from the server before)
        after = await kube.create(CONFIGMAPS.path("bench-0"), _marker(f"{name}-after"), manager="bench-setup")
        written = int(after["metadata"]["resourceVersion"])
    finally:
        subject.resume()
    server.begin_started()
    resumed = time.monotonic()
    await poll(lambda: subject.ready_again(written), f"{subject.name} ready again", READY_DEADLINE)
    figures["relist_s"] = round(time.monotonic() - resumed, 2)
    figures["relist_cpu_s"] = round(cpu_seconds(subject.pid) - cpu, 2)
    _sample(subject, figures, "relist")
    server.end("relist")
