"""What `fightwatch run` imports: kubernetes-asyncio without its generated modules, and no library a configuration
does not use (Jinja2 until a page is rendered, cryptography until a certificate is read or made, the audit
readers while the audit webhook is off). And what the live benchmark's floor watcher imports: the transport alone,
or with fightwatch's other required libraries. Each check runs in a fresh interpreter, since this one has imported
everything the other tests use."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from watcher.sources.lazy_imports import all_names, find_name, lazy_shape

GENERATED = ("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api.")  # the generated modules' prefixes
FLOOR_WATCHER = Path(__file__).resolve().parents[2] / "scripts" / "bench_floor_watch.py"
LIBRARIES = {"pydantic", "prometheus_client", "structlog"}  # (PyYAML comes with kubernetes-asyncio's kubeconfig loader)


def imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_service_imports_no_generated_model_and_no_unused_library() -> None:
    modules = imported_after("import watcher.cli, watcher.service")
    generated = {m for m in modules if m.startswith(GENERATED)}
    assert not generated
    assert "kubernetes_asyncio.leaderelection" not in modules  # (imported where leader election is on)
    unused = {m.split(".")[0] for m in modules} & {"jinja2", "cryptography", "ijson"}
    assert not unused
    assert "watcher.sources.audit_webhook" not in modules
    assert "watcher.rendering.page" not in modules  # (nor its timelines: imported when a page is first served)
    assert "kubernetes_asyncio.client.api_client" in modules  # (what it does use)


def test_the_offline_commands_import_no_client_server_metrics_or_logging_library() -> None:
    """`replay`, `demo` and `audit` read files: the pipeline they share with `run` brings none of run's libraries."""
    modules = imported_after("import watcher.cli, watcher.offline, watcher.pipeline")
    live = {m.split(".")[0] for m in modules} & {"aiohttp", "kubernetes_asyncio", "prometheus_client", "structlog"}
    assert not live
    assert "watcher.pipeline" in modules  # (what they do use)


def test_names_load_on_first_use_as_the_package_defines_them() -> None:
    modules = imported_after(
        """
        import watcher.sources
        from kubernetes_asyncio import client
        from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock
        assert client.V1Lease.__module__ == "kubernetes_asyncio.client.models.v1_lease"
        assert client.models.V1LeaseSpec is client.V1LeaseSpec
        assert client.CoordinationV1Api.__name__ == "CoordinationV1Api"
        assert "V1Pod" in dir(client) and "V1Pod" in client.__all__
        import kubernetes_asyncio
        assert kubernetes_asyncio.__version__ == client.__version__
        """
    )
    models = {m for m in modules if m.startswith("kubernetes_asyncio.client.models.")}
    assert models == {"kubernetes_asyncio.client.models.v1_lease", "kubernetes_asyncio.client.models.v1_lease_spec"}


def test_an_unknown_name_is_an_attribute_error() -> None:
    imported_after(
        """
        import watcher.sources
        from kubernetes_asyncio import client
        try:
            client.NoSuchModel
        except AttributeError as exc:
            assert "NoSuchModel" in str(exc)
        else:
            raise SystemExit("no AttributeError")
        """
    )


def test_the_floor_watcher_imports_the_transport_and_nothing_else() -> None:
    modules = imported_after(f"import runpy; runpy.run_path({str(FLOOR_WATCHER)!r})")
    assert not {m for m in modules if m.startswith(GENERATED)}
    assert {m for m in modules if m.split(".")[0] == "watcher"} == {
        "watcher",
        "watcher.sources",
        "watcher.sources.lazy_imports",  # (the import hook, the standard library only)
    }
    assert not LIBRARIES & {m.split(".")[0] for m in modules}
    assert {"uvloop", "orjson", "kubernetes_asyncio.client.api_client", "kubernetes_asyncio.config"} <= modules


def test_the_floor_watcher_with_libraries_imports_and_uses_them() -> None:
    modules = imported_after(f"import runpy; runpy.run_path({str(FLOOR_WATCHER)!r})['use_libraries']()")
    assert LIBRARIES | {"yaml"} <= {m.split(".")[0] for m in modules}


@pytest.mark.parametrize(
    ("source", "lazy"),
    [
        (
            '# coding: utf-8\n"""Doc."""\nfrom __future__ import annotations\n__version__ = "1"\n'
            'from a.b import C  # noqa\nimport a.d as d\nfrom a.e import F as G\n__all__ = [\n    "C",\n    "d",\n]\n',
            True,
        ),
        ("from a import *\n", False),
        ("import a\n", False),  # binds `a` itself: not a name this package defines
        ("x = compute()\n", False),
        ("if True:\n    from a import b\n", False),
        ("from a import (\n    b,\n)\n", False),
    ],
)
def test_only_an_init_of_imports_and_constants_loads_lazily(source: str, lazy: bool) -> None:
    constants = lazy_shape(source)
    assert (constants is not None) == lazy
    if constants is not None:
        assert constants == {"__version__": "1"}
        assert find_name(source, "C") == ("a.b", "C")
        assert find_name(source, "d") == ("a.d", None)
        assert find_name(source, "G") == ("a.e", "F")
        assert find_name(source, "F") is None
        assert find_name(source, "b") is None
        assert all_names(source) == ["C", "d"]
