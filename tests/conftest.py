"""Suite-wide fixtures: a real etcd + kube-apiserver, started once, only when a test needs it.

Tests that use ``control_plane`` (directly or through ``api_client``/``kube``/``controller_manager``) are
marked ``integration`` automatically, so ``pytest -m "not integration"`` runs without starting anything.
"""

from __future__ import annotations

import gc
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient

import watcher
from harness.control_plane import ControlPlane
from harness.kube import Kube, new_api_client
from tests.control_planes import running_control_plane

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Test what ships: the modules setup.py compiles with mypyc, and the native engine it builds from native/
    (Rust), built from the sources as they are now.

    An editable install keeps its compiled modules beside their sources, and Python imports the compiled one:
    after an edit the tests would run the old code. So a compiled module older than its source stops the run
    (`make` rebuilds them), and so does a package built without them, unless FIGHTWATCH_PURE_PYTHON asks for
    pure Python (then no compiled module may be there). test_native.py fails when the native engine is missing.
    """
    package = Path(watcher.__file__).parent
    native = sorted(package.glob("_native.*.so"))
    built = sorted(so for so in package.rglob("*.so") if so not in native)
    if os.environ.get("FIGHTWATCH_PURE_PYTHON", "") not in {"", "0"}:
        if built or native:
            pytest.exit(f"FIGHTWATCH_PURE_PYTHON is set, but compiled modules are there: {_names(built + native)}", 2)
        return
    sources = [*REPO.glob("native/src/*.rs"), REPO / "native" / "Cargo.toml"]
    newest = max(source.stat().st_mtime for source in sources)
    if any(so.stat().st_mtime < newest for so in native):
        pytest.exit("native/ changed after the native engine was built: run `make` to rebuild it", 2)
    if not built:
        pytest.exit(
            "watcher was built without its compiled modules (setup.py needs a C compiler and Python's headers): "
            "`make clean-build` then `make` builds them; or set FIGHTWATCH_PURE_PYTHON=1 to test pure Python",
            2,
        )
    stale = [so for so in built if so.stat().st_mtime < so.with_name(so.name.split(".")[0] + ".py").stat().st_mtime]
    if stale:
        pytest.exit(f"sources changed after they were compiled: {_names(stale)}: run `make` to rebuild them", 2)


def _names(paths: list[Path]) -> str:
    return ", ".join(path.name.split(".")[0] for path in paths)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's width is each test's to choose (`COLUMNS=80`), not the environment's: GNU readline exports
    COLUMNS when it is imported (as a plugin of pytest's does), into the C environment os.environ does not show,
    and every command started would cut its table to it."""
    monkeypatch.delenv("COLUMNS", raising=False)
    os.unsetenv("COLUMNS")


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The native engine's state (`watcher._native.Front`, a PyO3 class bound to the thread that made it) must be
    dropped on that thread. A test that builds a `Service` or a `Scan` leaves it in reference cycles (bound methods
    given to its parts), which the collector may reach on a worker thread: aiohttp reads ~/.netrc in one, and the
    integration tests' clients make many. So the cycles are collected here, on the main thread, after each test that
    runs such clients and before the first of them (in `run` and `scan` the engine lives until the process exits)."""
    if _threaded(item) or (nextitem is not None and _threaded(nextitem)):
        gc.collect()


def _threaded(item: pytest.Item) -> bool:
    return not item.nodeid.startswith("tests/unit/")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for the whole session; logs stay in its workdir (pytest's tmp dir)."""
    yield from running_control_plane(tmp_path_factory, "control-plane")


@pytest.fixture(scope="session")
def controller_manager(control_plane: ControlPlane) -> ControlPlane:
    """The session's control plane, with kube-controller-manager running too."""
    control_plane.start_controller_manager()
    return control_plane


@pytest.fixture(scope="session")
async def api_client(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    """A kubernetes-asyncio ApiClient for the admin (token + CA from the kubeconfig, TLS verified)."""
    client = await new_api_client(control_plane.kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(scope="session")
def kube(api_client: ApiClient) -> Kube:
    """Raw-JSON helper over ``api_client``."""
    return Kube(api_client)


@pytest.fixture(scope="session")
def helm() -> str:
    """A real helm v3 (scripts/helm.sh builds it from Go modules and caches it): its path."""
    done = subprocess.run([str(REPO / "scripts" / "helm.sh")], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"no helm binary: {done.stderr}")
    return done.stdout.strip()
