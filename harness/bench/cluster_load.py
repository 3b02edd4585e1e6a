"""What the two benchmarks under write load share (scripts/bench_live.py, scripts/load_test.py).

A control plane to write to, the objects created and the writes made at a fixed rate (`Load`), the watcher
processes started, told ready and stopped (`Watcher`), the load's figures, the work directory and the results file.
Each benchmark keeps its own package for what is its own: `live`, `load_test`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
import yaml

from harness.bench.endpoints import is_ready, listening, log_lines
from harness.bench.polling import poll
from harness.control_plane import ControlPlane, start_control_plane
from harness.kube import JSON, Kube, new_api_client

IN_FLIGHT = 48  # concurrent requests of the writer

T = TypeVar("T")


def of_args(cls: type[T], args: argparse.Namespace) -> T:
    """Make a dataclass of the script's options of the same names."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


@contextlib.contextmanager
def workdir_of(given: Path | None, prefix: str) -> Iterator[Path]:
    """Yield `given`, or a temp dir that is removed after a run that ends well (kept to look into otherwise)."""
    path = given or Path(tempfile.mkdtemp(prefix=prefix))
    yield path
    if given is None:
        shutil.rmtree(path, ignore_errors=True)


def write_results(out: Path, results: dict[str, Any]) -> None:
    """Write the results as indented JSON, and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"written to {out}")


@contextlib.asynccontextmanager
async def control_plane(workdir: Path) -> AsyncIterator[tuple[ControlPlane, Kube]]:
    """Start a control plane in `workdir`/control-plane with a client of `IN_FLIGHT` connections; stop both after."""
    cp = start_control_plane(workdir / "control-plane")
    client = await new_api_client(cp.kubeconfig, pool_size=IN_FLIGHT)
    try:
        yield cp, Kube(client)
    finally:
        await client.close()
        cp.stop()


async def create_all(
    kube: Kube, namespaces: Iterable[str], objects: Iterable[tuple[str, JSON]], *, manager: str
) -> None:
    """Create the namespaces, then the objects (collection path, body), `IN_FLIGHT` at a time.

    The objects are taken from `objects` as they are sent (a generator of 100,000 is never held whole).
    """
    pending = iter(objects)

    async def sender() -> None:
        for collection, body in pending:
            await kube.create(collection, body, manager=manager)

    for namespace in namespaces:
        await kube.ensure_namespace(namespace)
    await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))


@dataclass(frozen=True)
class Write:
    """A merge patch of the load, by one field manager; `injected`: one of a fight's or a hot loop's."""

    path: str
    patch: JSON
    manager: str
    injected: bool = False


@dataclass
class Load:
    """The writes one run of the load made."""

    accepted: dict[str, float] = field(default_factory=dict)  # resourceVersion -> when the writer had the answer
    writes: int = 0
    injected_writes: int = 0
    by_manager: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    started: float = 0.0  # time.time() as the load began
    seconds: float = 0.0


def _no_tick(_at: float) -> None:
    pass


async def write_at_rate(
    kube: Kube,
    *,
    rate: float,
    duration: float,
    write_of: Callable[[int], Write],
    on_tick: Callable[[float], None] = _no_tick,
) -> Load:
    """Make `rate` writes a second for `duration` seconds, `IN_FLIGHT` at the most at a time; return what they did.

    The k-th write is `write_of(k)`; `on_tick(seconds into the load)` is called before each.
    """
    load = Load(started=time.time())
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def send(write: Write) -> None:
        try:
            answer = await kube.merge_patch(write.path, write.patch, manager=write.manager)
        except Exception:  # counted; the load goes on
            load.errors += 1
        else:
            load.accepted[answer["metadata"]["resourceVersion"]] = time.time()
            load.writes += 1
            load.injected_writes += write.injected
            load.by_manager[write.manager] += 1
        finally:
            limit.release()

    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks: set[asyncio.Task[None]] = set()
    for k in range(int(rate * duration)):
        at = k / rate
        await asyncio.sleep(max(0.0, start + at - loop.time()))
        on_tick(at)
        await limit.acquire()
        task = asyncio.create_task(send(write_of(k)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    load.seconds = loop.time() - start
    return load


def load_figures(load: Load, *, rate: float, injected_as: str, by_manager: bool = False) -> dict[str, Any]:
    """Make the load's figures as the results give them; the injected writes under the name `injected_as`."""
    figures: dict[str, Any] = {
        "target_writes_per_second": rate,
        "writes": load.writes,
        injected_as: load.injected_writes,
    }
    if by_manager:
        figures["writes_by_manager"] = dict(sorted(load.by_manager.items()))
    return figures | {
        "errors": load.errors,
        "seconds": round(load.seconds, 1),
        "writes_per_second": round(load.writes / load.seconds, 1),
    }


@dataclass
class Watcher:
    """A watcher process: `fightwatch run` (it records, and serves its endpoints) or another one.

    Another one prints `ready` and `seen NAME` (of an object whose name starts with the marker), and writes what it
    received to its --out on SIGTERM.
    """

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    recording: Path | None = None  # fightwatch's --record
    out: Path | None = None  # another's --out
    url: str = ""  # fightwatch's endpoints, once it listens

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_lines(self, event: str | None = None) -> list[dict[str, Any]]:
        return log_lines(self.log, event)


W = TypeVar("W", bound=Watcher)


def start_fightwatch(
    kind: type[W],
    name: str,
    cp: ControlPlane,
    workdir: Path,
    *,
    python: str,
    config: dict[str, Any],
    args: Sequence[str] = (),
    cwd: Path,
    env: dict[str, str] | None = None,
    launcher: Sequence[str] = ("-m", "watcher"),
) -> W:
    """Start `fightwatch run` with `config` (and --record, JSON logs, plain HTTP) and `args`, logging to the workdir.

    `launcher`: what runs the `fightwatch` command in the interpreter (interpreter options first, if any). With
    $BENCH_PROFILE set, under cProfile (NAME.prof in the workdir).
    """
    # plain HTTP: the benchmark polls its own endpoints, and TLS and access reviews are not what it measures
    serve = {"address": "127.0.0.1", "port": 0, "insecure_http": True}
    config_path = workdir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump({"serve": serve, "log": {"format": "json"}, **config}))
    log, recording = workdir / f"{name}.log", workdir / f"{name}.jsonl"
    profile = ["-m", "cProfile", "-o", str(workdir / f"{name}.prof")] if os.environ.get("BENCH_PROFILE") else []
    argv = [python, *profile, *launcher, "run", "--kubeconfig", str(cp.kubeconfig), "--config", str(config_path)]
    argv += ["--record", str(recording), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, cwd=cwd, env=env)
    return kind(name, proc, log, recording)


def start_other(kind: type[W], name: str, argv: Sequence[str], cp: ControlPlane, workdir: Path, *, marker: str) -> W:
    """Start another watcher (`argv`, given --kubeconfig, --out NAME.json and --marker), logging to the workdir."""
    log, out = workdir / f"{name}.log", workdir / f"{name}.json"
    argv = [*argv, "--kubeconfig", str(cp.kubeconfig), "--out", str(out), "--marker", marker]
    with log.open("wb") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=workdir)
    return kind(name, proc, log, out=out)


async def ready(session: aiohttp.ClientSession, watcher: Watcher) -> bool:
    """Tell whether a watcher is ready; RuntimeError, with its log's end, if it exited."""
    if not watcher.alive():
        raise RuntimeError(f"{watcher.name} exited: {watcher.log.read_text()[-3000:]}")
    if watcher.recording is None:
        return b"ready" in watcher.log.read_bytes().splitlines()
    watcher.url = watcher.url or listening(watcher.log)
    return bool(watcher.url) and await is_ready(session, watcher.url)


async def wait_ready(session: aiohttp.ClientSession, watchers: Iterable[Watcher], deadline: float) -> None:
    """Wait until each watcher is ready, in turn; TimeoutError after `deadline` seconds for one."""
    for watcher in watchers:
        await poll(functools.partial(ready, session, watcher), f"{watcher.name} ready", deadline)


def stop(watchers: Iterable[Watcher]) -> None:
    """Stop every live watcher (SIGTERM) and wait for each."""
    watchers = list(watchers)
    for watcher in watchers:
        if watcher.alive():
            watcher.proc.send_signal(signal.SIGTERM)
    for watcher in watchers:
        watcher.proc.wait(60)
