"""`fightwatch scan`'s pure parts: the terminal's status line and plain lines, the command line (`--for`, the kubectl
plugin's arguments), and which targets access reviews leave (the answers given as the API server gives them). The
scan against a real API server, through the real kubectl: tests/integration/test_scan.py."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from tests.unit.kube_api import NoServer
from watcher.cli import _duration, _parser, plugin_argv
from watcher.config import WatchSettings
from watcher.rendering.terminal import CLEAR_LINE, Console, duration, status_line
from watcher.scan import not_watched
from watcher.sources.discovery import ApiResource, Target
from watcher.sources.permissions import Denied, Permissions

CONFIGMAPS = ApiResource("", "v1", "configmaps", "ConfigMap", namespaced=True)
NODES = ApiResource("", "v1", "nodes", "Node", namespaced=False)
DEPLOYMENTS = ApiResource("apps", "v1", "deployments", "Deployment", namespaced=True)
SECRETS = ApiResource("", "v1", "secrets", "Secret", namespaced=True)


# ------------------------------------------------------------------------------------------- the terminal


def test_off_a_terminal_lines_are_plain_and_the_status_comes_every_so_often() -> None:
    out = io.StringIO()
    console = Console(out, live=False, plain_every=30.0)
    console.status("first", now=0.0)
    console.status("too soon", now=10.0)
    console.print("found fight  ConfigMap a/b")
    console.status("later", now=31.0)
    console.write("a log line\nand half")
    console.close()
    assert out.getvalue() == "first\nfound fight  ConfigMap a/b\nlater\na log line\nand half\n"
    assert "\x1b" not in out.getvalue()


def test_on_a_terminal_the_status_line_is_redrawn_under_the_printed_lines() -> None:
    out = io.StringIO()
    console = Console(out, live=True)
    console.status("9s left")
    console.status("8s left")
    console.print("found hot loop")
    console.close()
    assert out.getvalue() == (
        f"{CLEAR_LINE}9s left{CLEAR_LINE}8s left"  # redrawn in place
        f"{CLEAR_LINE}found hot loop\n{CLEAR_LINE}8s left"  # a line above it, then the status again
        f"{CLEAR_LINE}"  # erased at the end
    )


def test_the_status_line_says_time_left_resources_rate_objects_and_findings() -> None:
    line = status_line(left=125, resources=3, events_per_second=212.4, objects=2031, findings=[])
    assert line == "2m05s left · 3 resources · 212 events/s · 2,031 objects · nothing found yet"
    assert status_line(left=None, resources=1, events_per_second=0, objects=0, findings=[]).startswith(
        "until Ctrl-C · 1 resource ·"
    )


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.4, "59s"), (60, "1m00s"), (3725, "1h02m")])
def test_durations_read_as_kubectl_prints_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


# ------------------------------------------------------------------------------------------ the command line


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("45", 45.0)])
def test_for_takes_go_durations_and_seconds(text: str, seconds: float) -> None:
    assert _duration(text) == seconds


def test_for_zero_is_until_ctrl_c_and_nonsense_is_refused() -> None:
    assert _duration("0") is None
    assert _duration("0s") is None
    for bad in ("-5", "five minutes", "5x"):
        with pytest.raises(Exception, match="duration"):
            _duration(bad)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ["scan"]),
        (["-n", "shop", "--for", "1m"], ["scan", "-n", "shop", "--for", "1m"]),
        (["scan", "-A"], ["scan", "-A"]),
        (["replay", "x.jsonl"], ["replay", "x.jsonl"]),
        (["--version"], ["--version"]),
        (["--help"], ["scan", "--help"]),
    ],
)
def test_kubectl_fightwatch_is_a_scan_unless_a_command_is_named(argv: list[str], expected: list[str]) -> None:
    assert plugin_argv(argv) == expected


def test_scan_takes_kubectls_flags() -> None:
    args = _parser().parse_args(
        ["scan", "--context", "prod", "-n", "shop", "--resources", "deploy,cm", "--resources", "hpa",
         "-l", "app=web", "--for", "2m", "-o", "yaml"]
    )  # fmt: skip
    from watcher.scan import options_of  # noqa: PLC0415

    options = options_of(args)
    assert (options.context, options.namespace, options.selector) == ("prod", "shop", "app=web")
    assert options.resources == ("deploy", "cm", "hpa")
    assert (options.seconds, options.output) == (120.0, "yaml")
    with pytest.raises(SystemExit):
        _parser().parse_args(["scan", "-n", "shop", "-A"])  # one or the other


# ------------------------------------------------------------------------------------------ access reviews


class Reviews(NoServer):
    """Answers SelfSubjectAccessReviews from a set of (verb, group, resource, namespace) it allows (namespace None:
    cluster-wide), as the API server's authorizer answers them; counts the reviews."""

    def __init__(self, allowed: set[tuple[str, str, str, str | None]], *, failing: bool = False) -> None:
        super().__init__()
        self.allowed = allowed
        self.failing = failing
        self.asked: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        assert path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        attributes = body["spec"]["resourceAttributes"]
        self.asked.append(attributes)
        if self.failing:
            raise OSError("connection refused")
        key = (attributes["verb"], attributes["group"], attributes["resource"], attributes.get("namespace"))
        everywhere = (*key[:3], None)
        allowed = key in self.allowed or everywhere in self.allowed
        return {"status": {"allowed": allowed} | ({} if allowed else {"reason": ""})}


def _choose(reviews: Reviews, resources: list[ApiResource], **kwargs: Any) -> tuple[list[Target], list[Denied]]:
    permissions = Permissions(reviews, WatchSettings(exclude_resources=()), **kwargs)
    targets = asyncio.run(permissions.choose(resources))
    return targets, permissions.take_denied()


def _both(group: str, resource: str, namespace: str | None) -> set[tuple[str, str, str, str | None]]:
    return {("list", group, resource, namespace), ("watch", group, resource, namespace)}


def test_everything_allowed_takes_one_review_per_verb() -> None:
    reviews = Reviews(_both("*", "*", None))
    targets, denied = _choose(reviews, [CONFIGMAPS, NODES, DEPLOYMENTS])
    assert [t.resource.name for t in targets] == ["configmaps", "nodes", "deployments.apps"]
    assert all(t.namespace is None for t in targets)
    assert denied == []
    assert len(reviews.asked) == 2


def test_a_tenant_watches_its_namespace_and_is_told_what_it_may_not_watch() -> None:
    reviews = Reviews(_both("", "configmaps", "team-a") | _both("apps", "deployments", "team-a"))
    targets, denied = _choose(reviews, [CONFIGMAPS, NODES, DEPLOYMENTS, SECRETS], fallback_namespaces=("team-a",))
    assert {(t.resource.name, t.namespace) for t in targets} == {
        ("configmaps", "team-a"),
        ("deployments.apps", "team-a"),
    }
    assert {(d.resource.name, d.namespace) for d in denied} == {("nodes", None), ("secrets", None)}
    message = not_watched(denied, targets, user="tenant")
    assert "user tenant may not list and watch 2 resource types" in message
    assert "nodes, secrets." in message
    assert "Watched in namespace team-a only (not cluster-wide): 2 resource types." in message


def test_list_without_watch_is_not_enough() -> None:
    reviews = Reviews({("list", "", "configmaps", None)})
    targets, denied = _choose(reviews, [CONFIGMAPS])
    assert targets == []
    assert [d.resource.name for d in denied] == ["configmaps"]


def test_reviews_that_cannot_be_asked_leave_it_to_the_watch() -> None:
    targets, denied = _choose(Reviews(set(), failing=True), [CONFIGMAPS, NODES])
    assert [t.resource.name for t in targets] == ["configmaps", "nodes"]
    assert denied == []


def test_answers_are_kept_and_each_refusal_is_told_once() -> None:
    reviews = Reviews(_both("", "configmaps", None))
    permissions = Permissions(reviews, WatchSettings(exclude_resources=()))
    asyncio.run(permissions.choose([CONFIGMAPS, NODES]))
    first = permissions.take_denied()
    asked = len(reviews.asked)
    asyncio.run(permissions.choose([CONFIGMAPS, NODES, DEPLOYMENTS]))  # the next pass: a new resource type
    assert [d.resource.name for d in first] == ["nodes"]
    assert [d.resource.name for d in permissions.take_denied()] == ["deployments.apps"]
    assert len(reviews.asked) == asked + 2  # only the new one was asked about (list and watch)
