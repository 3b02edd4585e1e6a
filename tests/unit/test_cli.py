"""`fightwatch replay` and `fightwatch demo` as a user runs them: output, exit status, errors."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.expectations import REAL_FIGHTS
from tests.unit.captures import IMPLEMENTATIONS, capture
from watcher.cli import _listen, _with_shard, main
from watcher.config import Config
from watcher.detection.native import native_available


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", *args], input=stdin, capture_output=True, check=False, timeout=120
    )


def test_replay_prints_a_table_with_writers_fields_and_hint() -> None:
    result = run("replay", str(capture("fight-apply-vs-update-replicas")))
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "Deployment.apps fight-apply-vs-update-replicas/web" in out
    assert "argocd-controller (Apply)" in out
    assert "custom-autoscaler (Update)" in out
    assert "spec.replicas" in out
    assert "Hint: " in out
    assert "1 fight, 0 hot loops (1 active)." in out


def test_json_output_is_one_object_per_finding_with_the_documented_fields() -> None:
    result = run("replay", "--output", "json", str(capture("fight-scale-vs-apply")))
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    finding = orjson.loads(line)
    assert set(finding) >= {
        "type",
        "state",
        "object",
        "writers",
        "fields",
        "handovers",
        "writes",
        "first_seen",
        "detected_at",
        "last_seen",
        "summary",
        "hint",
    }
    assert finding["type"] == "fight"
    assert finding["state"] == "active"
    assert finding["object"] | {"uid": None} == {
        "apiGroup": "apps",
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "resource": None,  # (known from discovery live, from audit events when joined)
        "subresource": None,
        "namespace": "fight-scale-vs-apply",
        "name": "api",
        "uid": None,
    }
    writers = {w["display"]: w for w in finding["writers"]}
    assert set(writers) == {"kubectl (Update, scale)", "kubectl-client-side-apply (Update)"}
    scale = writers["kubectl (Update, scale)"]
    assert (scale["manager"], scale["operation"], scale["subresource"]) == ("kubectl", "Update", "scale")
    assert (scale["fields"], scale["note"], scale["reacts"], scale["users"]) == (["spec.replicas"], None, False, [])
    assert finding["fields"] == ["spec.replicas"]
    assert finding["first_seen"].endswith("Z")


def test_stdin_and_fail_on_findings() -> None:
    data = capture("fight-data").read_bytes()
    assert run("replay", "-", stdin=data).returncode == 0
    assert run("replay", "--fail-on-findings", "-", stdin=data).returncode == 3
    assert run("replay", "--fail-on-findings", str(capture("benign-one-correction"))).returncode == 0


def test_malformed_event_prints_what_came_before_then_fails(tmp_path: Path) -> None:
    lines = capture("fight-update-vs-update-label").read_bytes().splitlines()
    path = tmp_path / "broken.jsonl"
    path.write_bytes(b"\n".join([*lines, b'{"type": "MODIFIED", "object": ', *lines[:1]]))
    result = run("replay", "--output", "json", str(path))
    assert result.returncode == 2
    assert f"{path}:{len(lines) + 1}: invalid JSON" in result.stderr.decode()
    assert orjson.loads(result.stdout.splitlines()[0])["fields"] == ["metadata.labels.owner"]
    assert f"the findings above cover the {len(lines):,} events read before this point; use --skip-invalid" in (
        result.stderr.decode()
    )
    skipped = run("replay", "--skip-invalid", str(path))
    assert skipped.returncode == 0
    assert "1 invalid events skipped" in skipped.stdout.decode()


def _truncated_after_the_fight(tmp_path: Path) -> tuple[Path, int]:
    """A gzip capture of a fight, then the same events again (duplicates: no change) in a member that breaks off;
    and how many lines the fight's own member holds."""
    data = capture("fight-update-vs-update-label").read_bytes()
    again = gzip.compress(data, mtime=0)
    path = tmp_path / "truncated.gz"
    path.write_bytes(gzip.compress(data, mtime=0) + again[: len(again) // 2])
    return path, len(data.splitlines())


@pytest.mark.parametrize("skip_invalid", [False, True])
def test_a_truncated_gzip_capture_prints_the_findings_of_what_was_read_then_fails(
    tmp_path: Path, skip_invalid: bool
) -> None:
    path, lines = _truncated_after_the_fight(tmp_path)
    result = run("replay", "--output", "json", *(["--skip-invalid"] if skip_invalid else []), str(path))
    assert result.returncode == 2
    assert result.stdout
    found = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [(f["type"], f["fields"]) for f in found] == [("fight", ["metadata.labels.owner"])]
    err = result.stderr.decode()
    broke = f"fightwatch: {path}: the compressed stream ends early (truncated file?); read up to line "
    assert broke in err
    read = int(err.split(broke, 1)[1].split()[0].replace(",", ""))
    assert read >= lines  # every line of the sound member, and what came of the broken one
    assert f"the findings above cover the {read:,} events read before this point" in err
    assert "--skip-invalid" not in err  # (no skipping gets past a file that breaks off)


def test_a_truncated_gzip_capture_prints_its_table_then_fails(tmp_path: Path) -> None:
    path, _ = _truncated_after_the_fight(tmp_path)
    result = run("replay", str(path))
    assert result.returncode == 2
    out = result.stdout.decode()
    assert "1 fight, 0 hot loops (1 active)." in out
    assert "team-a-operator (Update)" in out
    assert f"{path}: the compressed stream ends early (truncated file?)" in result.stderr.decode()


def test_a_corrupt_gzip_capture_is_an_error_naming_the_file(tmp_path: Path) -> None:
    data = capture("fight-update-vs-update-label").read_bytes()
    path = tmp_path / "corrupt.gz"
    path.write_bytes(gzip.compress(data, mtime=0) + gzip.compress(data, mtime=0)[:10] + b"\x07" + bytes(16))
    result = run("replay", "--output", "json", str(path))
    assert result.returncode == 2
    assert [orjson.loads(line)["fields"] for line in result.stdout.splitlines()] == [["metadata.labels.owner"]]
    err = result.stderr.decode()
    assert f"fightwatch: {path}: the compressed stream is corrupt (" in err
    assert f"; read up to line {len(data.splitlines())}" in err


@pytest.mark.parametrize(
    ("content", "args", "what"),
    [
        (b"", (), "(0 lines)"),
        (b"\n\n", (), "(2 lines)"),
        (gzip.compress(b"", mtime=0), (), "(0 lines)"),
        (b"{oops\n[]\n", ("--skip-invalid",), "(2 lines, all invalid)"),
    ],
)
def test_a_capture_without_events_warns_that_nothing_was_read(
    tmp_path: Path, content: bytes, args: tuple[str, ...], what: str
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    result = run("replay", *args, str(path))
    assert result.returncode == 0, result.stderr
    assert "No controller fights or hot loops found." in result.stdout.decode()
    err = result.stderr.decode()
    assert f"fightwatch: warning: no events were read from {path} {what}: nothing was analysed" in err


def test_a_capture_with_events_does_not_warn() -> None:
    result = run("replay", str(capture("benign-one-correction")))
    assert result.returncode == 0
    assert "no events were read" not in result.stderr.decode()


def test_version_names_the_build_and_the_engine() -> None:
    result = run("--version")
    assert result.returncode == 0
    out = result.stdout.decode()
    assert out.startswith("fightwatch ")
    assert f"engine: {'native' if native_available() else 'python'}" in out


@pytest.mark.parametrize("engine", IMPLEMENTATIONS)
def test_replay_runs_on_the_engine_asked_for(engine: str) -> None:
    result = run("replay", "--engine", engine, str(capture("fight-apply-vs-update-replicas")))
    assert result.returncode == 0, result.stderr
    assert "1 fight, 0 hot loops (1 active)." in result.stdout.decode()


def test_broken_config_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "fw.yaml"
    config.write_text("detection:\n  hot_loop:\n    min_writes_per_minut: 10\n")
    result = run("replay", "--config", str(config), str(capture("fight-data")))
    assert result.returncode == 2
    err = result.stderr.decode()
    assert str(config) in err
    assert "detection.hot_loop.min_writes_per_minut: unknown key (did you mean 'min_writes_per_minute'?)" in err


def test_config_thresholds_change_the_outcome(tmp_path: Path) -> None:
    config = tmp_path / "fw.yaml"
    config.write_text("detection:\n  fight:\n    min_handovers: 6\n")
    result = run("replay", "--config", str(config), str(capture("fight-data")))
    assert "No controller fights or hot loops found." in result.stdout.decode()


def test_ignore_rules_drop_a_manager(tmp_path: Path) -> None:
    config = tmp_path / "fw.yaml"
    config.write_text("detection:\n  ignore:\n    - manager: gitops-*\n")
    result = run("replay", "--config", str(config), str(capture("fight-data")))
    assert "No controller fights or hot loops found." in result.stdout.decode()


def test_the_demo_tells_the_real_fights_and_nothing_of_the_benign_patterns(capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled demo is the real-fight recording (tests/fixtures/real, one run), replayed with its audit log: each
    real fight is found, no benign pattern is flagged (but the stuck Helm 4 applier, a real apply conflict), the
    ReplicaSet scaled by a script is one incident headed by the script, and Helm is named where its writes leave no
    managedFields entry."""
    assert main(["demo", "--output", "json"]) == 0
    found = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for f in found:
        ns = f["object"]["namespace"] or f["object"]["name"].rsplit("-validate", 1)[0]
        by_namespace.setdefault(ns, []).append(f)
    assert set(by_namespace) == set(REAL_FIGHTS) | {"helm4-apply-conflict"}
    for scenario, expected in REAL_FIGHTS.items():
        fights = [f for f in by_namespace[scenario] if f["type"] == "fight"]
        assert len(fights) == expected.findings, scenario
        for fight in fights:
            assert {(w["manager"], w["operation"] or "", w["subresource"] or "") for w in fight["writers"]} == set(
                expected.audited
            ), scenario
    assert [f["type"] for f in by_namespace["helm4-apply-conflict"]] == ["apply_conflict"]
    scaled = by_namespace["replicaset-scale"]
    (root,) = [f for f in scaled if f["related"] is None]
    assert (root["type"], root["writers"][0]["display"]) == ("fight", "kubectl (Update, scale)")
    assert {f["incident"] for f in scaled} == {root["incident"]}


def test_no_command_prints_help_and_fails() -> None:
    result = run()
    assert result.returncode == 2
    assert b"replay" in result.stdout


def test_a_capture_without_managed_fields_warns_how_to_record_it() -> None:
    stripped = []
    for line in capture("fight-data").read_bytes().splitlines():
        event = orjson.loads(line)
        del event["object"]["metadata"]["managedFields"]
        del event["observedAt"]
        stripped.append(orjson.dumps(event))
    result = run("replay", "-", stdin=b"\n".join(stripped))
    out = result.stdout.decode()
    assert result.returncode == 0
    assert "this capture was made without them" in out
    assert "--show-managed-fields" in out
    assert "1 fight" in out  # the value flips are still visible


def test_events_a_watch_delivered_without_managed_fields_are_not_blamed_on_kubectl() -> None:
    """Events with their receive time (fightwatch's own recording, a live watch) came from the API server as they are:
    the warning says what makes an API server send objects without managedFields, and names their kinds."""
    lines = capture("fight-data").read_bytes().splitlines()
    stripped = []
    for n, line in enumerate(lines):
        event = orjson.loads(line)
        if n == len(lines) - 1:
            del event["object"]["metadata"]["managedFields"]
        stripped.append(orjson.dumps(event))
    out = run("replay", "-", stdin=b"\n".join(stripped)).stdout.decode()
    assert f"1 of {len(lines)} events carried no managedFields (ConfigMap 1)" in out
    assert "They came straight from a watch" in out
    assert "--show-managed-fields" not in out


def test_malformed_managed_fields_name_the_file_and_line(tmp_path: Path) -> None:
    lines = capture("fight-data").read_bytes().splitlines()
    event = orjson.loads(lines[-1])
    event["object"]["metadata"]["managedFields"][0]["fieldsV1"] = {"x:spec": {}}
    path = tmp_path / "bad-fields.jsonl"
    path.write_bytes(b"\n".join([*lines[:-1], orjson.dumps(event)]))
    result = run("replay", str(path))
    assert result.returncode == 2
    assert f"{path}:{len(lines)}: unexpected fieldsV1 key 'x:spec'" in result.stderr.decode()


def test_a_missing_capture_is_one_clear_error(tmp_path: Path) -> None:
    result = run("replay", str(tmp_path / "absent.json"))
    assert result.returncode == 2
    assert result.stdout == b""
    assert (
        result.stderr.decode().strip()
        == f"fightwatch: {tmp_path / 'absent.json'}: cannot open: No such file or directory"
    )


def test_labels_that_are_not_strings_name_the_file_and_line(tmp_path: Path) -> None:
    lines = capture("fight-update-vs-update-label").read_bytes().splitlines()
    event = orjson.loads(lines[3])
    event["object"]["metadata"]["labels"] = {"owner": {"not": "a string"}}
    path = tmp_path / "bad-labels.jsonl"
    path.write_bytes(b"\n".join([*lines[:3], orjson.dumps(event), *lines[4:]]))
    result = run("replay", str(path))
    assert result.returncode == 2
    assert f"{path}:4: metadata.labels and metadata.annotations must map strings to strings" in result.stderr.decode()


def test_run_without_a_usable_kubeconfig_says_where_it_looked(tmp_path: Path) -> None:
    absent = tmp_path / "absent-kubeconfig"
    result = run("run", "--kubeconfig", str(absent))
    assert result.returncode == 2
    assert str(absent) in result.stderr.decode()
    assert "no such file" in result.stderr.decode()


def test_run_with_a_broken_kubeconfig_names_it(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    result = run("run", "--kubeconfig", str(broken))
    assert result.returncode == 2
    assert f"kubeconfig {broken}: cannot use it" in result.stderr.decode()


def test_run_with_a_broken_config_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "fw.yaml"
    config.write_text("watch:\n  discovery_intervall: 5s\n")
    result = run("run", "--config", str(config), "--kubeconfig", str(tmp_path / "absent"))
    assert result.returncode == 2
    assert "watch.discovery_intervall: unknown key (did you mean 'discovery_interval'?)" in result.stderr.decode()


EVERY_ADDRESS = "0.0.0.0"  # noqa: S104 - what `--listen=:PORT` means


@pytest.mark.parametrize(
    ("text", "expected"),
    [(":8080", (EVERY_ADDRESS, 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9090", ("::1", 9090))],
)
def test_listen_takes_host_and_port_as_the_chart_passes_them(text: str, expected: tuple[str, int]) -> None:
    assert _listen(text) == expected


def test_a_bad_listen_address_is_a_usage_error() -> None:
    result = run("run", "--listen", "8080")
    assert result.returncode == 2
    assert "'8080' is not [HOST]:PORT" in result.stderr.decode()


@pytest.mark.parametrize(
    ("shard", "total", "expected"),
    [("1", 2, 1), ("0", None, 0), ("fw-fightwatch-0", 2, 0), ("fw-fightwatch-3", 2, 1), ("fw-fightwatch-4", 3, 1)],
)
def test_the_shard_is_a_number_or_a_statefulset_pod_name(shard: str, total: int | None, expected: int) -> None:
    """The chart passes `--shard=$(POD_NAME)`: pod ordinal modulo the shards, so `shards x replicas` pods give each
    shard its replicas (pods 0 and 2 are shard 0, pods 1 and 3 shard 1)."""
    config = _with_shard(Config(), shard, total)
    assert config.sharding.shard == expected
    assert config.sharding.total_shards == (total or 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--shard", "2", "--total-shards", "2"), "shard 2 is not below total_shards (2)"),
        (("--shard", "web"), "not a number nor a pod name"),
    ],
)
def test_a_bad_shard_is_a_usage_error(args: tuple[str, ...], message: str) -> None:
    result = run("run", *args)
    assert result.returncode == 2
    assert message in result.stderr.decode()


def _unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A valid kubeconfig whose server is never contacted by the start-up checks these tests make fail."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: not-a-real-token}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return kubeconfig


def test_run_with_a_delivery_credential_it_cannot_read_names_the_key_not_the_value(tmp_path: Path) -> None:
    """Checked at start-up, before anything is watched: the API server in the kubeconfig is never contacted."""
    kubeconfig = _unreachable_kubeconfig(tmp_path)
    config = tmp_path / "fw.yaml"
    config.write_text(
        "delivery:\n"
        "  webhooks:\n"
        "    - {name: chat, url: {env: FIGHTWATCH_TEST_UNSET_URL}}\n"
        f"    - {{name: pager, url: {{file: {tmp_path / 'absent-url'}}}}}\n"
    )
    result = run("run", "--config", str(config), "--kubeconfig", str(kubeconfig))
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "cannot deliver" in err
    assert "delivery.webhooks.0.url: $FIGHTWATCH_TEST_UNSET_URL is empty or unset" in err
    assert "not-a-real-token" not in err


def test_run_with_two_delivery_sinks_of_one_name_is_a_start_up_error(tmp_path: Path) -> None:
    kubeconfig = _unreachable_kubeconfig(tmp_path)
    config = tmp_path / "fw.yaml"
    config.write_text("delivery:\n  alertmanager:\n    urls: [http://am:9093, http://am:9093]\n")
    result = run("run", "--config", str(config), "--kubeconfig", str(kubeconfig))
    assert result.returncode == 2
    assert "cannot deliver" in result.stderr.decode()
    assert "two delivery sinks have the same name" in result.stderr.decode()


def test_a_capture_from_before_1_22_says_what_its_server_cannot_show() -> None:
    """v1.20's scale writes leave no managedFields entry: the replay says why writers stay unnamed; a capture from a
    current server, whose entries name their subresources, needs no such note."""
    old = run("replay", str(capture("fight-scale-vs-apply", release="v1.20")))
    assert old.returncode == 0
    assert "on an API server before 1.22 a write through the scale subresource leaves no entry" in old.stdout.decode()
    current = run("replay", str(capture("fight-scale-vs-apply")))
    assert current.returncode == 0
    assert "before 1.22" not in current.stdout.decode()
    assert "(0 unattributed)" in current.stdout.decode()
