"""Config: defaults in one schema, durations, and errors that name the file, the key and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from watcher.config import Config, ConfigError, load_config, parse_config


def test_defaults_match_the_documented_thresholds() -> None:
    detection = Config().detection
    assert detection.fight.window == 3600
    assert detection.fight.min_handovers == 3
    assert detection.hot_loop.min_writes_per_minute == 30
    assert detection.hot_loop.min_writes == 20
    assert detection.hot_loop.time_constant == 60
    assert detection.resolve.after == 900
    assert detection.resolve.flip_periods == 3
    kinds = {(r.group, r.kind) for r in detection.ignore_rules if r.whole_objects}
    assert kinds == {
        ("coordination.k8s.io", "Lease"),
        ("", "Event"),
        ("events.k8s.io", "Event"),
        ("", "Endpoints"),
        ("discovery.k8s.io", "EndpointSlice"),
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45s", 45), ("15m", 900), ("1h30m", 5400), ("250ms", 0.25), (90, 90), ("2h", 7200)],
)
def test_durations_take_go_style_text_or_seconds(text: object, seconds: float) -> None:
    config = parse_config({"detection": {"fight": {"window": text}}}, source="test")
    assert config.detection.fight.window == seconds


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"detection": {"fight": {"windw": "1h"}}}, "detection.fight.windw: unknown key (did you mean 'window'?)"),
        ({"detecton": {}}, "detecton: unknown key (did you mean 'detection'?)"),
        ({"detection": {"ignore": [{"kind": "Pod", "mgr": "x"}]}}, "detection.ignore.0.mgr: unknown key"),
        ({"detection": {"fight": {"window": "soon"}}}, "detection.fight.window: Value error, 'soon' is not a duration"),
        ({"detection": {"fight": {"window": "-5s"}}}, "detection.fight.window"),
        ({"detection": {"fight": {"min_handovers": 1}}}, "detection.fight.min_handovers: Input should be greater"),
        ({"detection": {"hot_loop": {"min_writes": "many"}}}, "detection.hot_loop.min_writes: Input should be"),
        (["a", "list"], "the config must be a mapping of keys, got list"),
    ],
)
def test_errors_name_the_key_and_the_problem(data: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, source="fw.yaml")
    assert str(caught.value).startswith("fw.yaml:")
    assert expected in str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"detection": {"fight": {"windw": 1}, "hot_loop": {"min_writes": 0}}}, source="x")
    message = str(caught.value)
    assert "detection.fight.windw" in message
    assert "detection.hot_loop.min_writes" in message


def test_broken_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("detection:\n  fight:\n    window: [1h\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml:\d+:\d+: not valid YAML"):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent\.yaml: cannot read config"):
        load_config(tmp_path / "absent.yaml")


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing set\n")
    assert load_config(path) == Config()


def test_user_ignore_rules_add_to_the_defaults_unless_switched_off() -> None:
    rule = {"namespace": "kube-*", "manager": "kube-controller-manager"}
    config = parse_config({"detection": {"ignore": [rule]}}, source="x")
    assert len(config.detection.ignore_rules) == 7
    config = parse_config({"detection": {"ignore": [rule], "default_ignores": False}}, source="x")
    assert [r.manager for r in config.detection.ignore_rules] == ["kube-controller-manager"]


def test_watch_defaults_are_documented_ones() -> None:
    config = Config()
    watch = config.watch
    assert watch.resources == ()
    assert watch.exclude_resources == ("events", "leases", "endpoints", "endpointslices", "pods")
    assert watch.discovery_interval == 60
    assert (watch.backoff_initial, watch.backoff_max, watch.slow_retry) == (0.5, 30, 300)
    assert watch.watch_timeout == 300
    assert config.serve.port == 8080
    assert (config.log.level, config.log.format) == ("info", "auto")
    assert (config.record.max_bytes, config.record.keep) == (256 * 2**20, 5)


@pytest.mark.parametrize(("text", "size"), [("64Mi", 64 * 2**20), ("1G", 10**9), ("1.5KiB", 1536), (4096, 4096)])
def test_sizes_take_units_or_bytes(text: object, size: int) -> None:
    assert parse_config({"record": {"max_bytes": text}}, source="x").record.max_bytes == size


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"watch": {"per_resource": {"secrets": {"full_objects": True}}}},
            "watch.per_resource: Value error, secrets.full_objects: Secrets are only ever watched as metadata",
        ),
        (
            {"watch": {"per_resource": {"deployments.apps": {"full_object": True}}}},
            "watch.per_resource.deployments.apps.full_object: unknown key (did you mean 'full_objects'?)",
        ),
        ({"watch": {"resources": ["apps/deployments"]}}, "watch.resources.0: Value error, 'apps/deployments' is not"),
        ({"watch": {"bakoff_max": "3s"}}, "watch.bakoff_max: unknown key (did you mean 'backoff_max'?)"),
        ({"record": {"max_bytes": "lots"}}, "record.max_bytes: Value error, 'lots' is not a size"),
        ({"log": {"level": "loud"}}, "log.level: Input should be 'debug', 'info', 'warning' or 'error'"),
        ({"serve": {"port": 70000}}, "serve.port: Input should be less than or equal to 65535"),
    ],
)
def test_watcher_settings_errors_name_the_key(data: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, source="fw.yaml")
    assert expected in str(caught.value)


def test_leader_election_defaults_are_controller_runtime_s_and_bad_timings_name_the_rule() -> None:
    election = Config().leader_election
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (15, 10, 2)
    assert not election.enabled
    for timings, message in [
        ({"lease_duration": "12s", "renew_deadline": "10s"}, "longer than renew_deadline \\+ retry_period"),
        ({"renew_deadline": "2s"}, "renew_deadline must be longer than 1.2 x retry_period"),
        ({"lease_duration": "15.5s"}, "whole seconds"),
        ({"retry_period": "500ms", "renew_deadline": "1s", "lease_duration": "2s"}, "at least 1s"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config({"leader_election": timings}, source="test")


def test_bounded_memory_defaults() -> None:
    detection = Config().detection
    assert detection.idle_after is None
    assert detection.idle_seconds == detection.fight.window
    assert detection.max_objects == 100_000
    assert parse_config({"detection": {"max_objects": None}}, source="test").detection.max_objects is None


def test_serving_is_secure_by_default() -> None:
    serve = Config().serve
    assert not serve.insecure_http
    assert serve.tls.cert_file is None  # (a self-signed certificate)
    assert serve.tls.min_version == "1.2"
    assert (serve.auth.allowed_ttl, serve.auth.denied_ttl, serve.auth.cache_size) == (300, 30, 10_000)


@pytest.mark.parametrize(
    ("serve", "expected"),
    [
        ({"tls": {"cert_file": "/tls/tls.crt"}}, "serve.tls: Value error, give both cert_file and key_file"),
        (
            {"insecure_http": True, "tls": {"cert_file": "/a", "key_file": "/b"}},
            "serve: Value error, insecure_http serves plain HTTP: it takes no tls settings",
        ),
        ({"tls": {"min_version": "1.1"}}, "serve.tls.min_version: Input should be '1.2' or '1.3'"),
        ({"auth": {"denied_ttl": "soon"}}, "serve.auth.denied_ttl: Value error, 'soon' is not a duration"),
        ({"auth": {"token_audiences": []}}, "serve.auth.token_audiences: unknown key (did you mean 'audiences'?)"),
    ],
)
def test_serving_errors_name_the_key(serve: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"serve": serve}, source="fw.yaml")
    assert expected in str(raised.value)


def test_the_readme_s_configuration_block_shows_the_defaults() -> None:
    """The README shows the main keys "with their defaults": read as a config, the block is the default config."""
    import yaml  # noqa: PLC0415 - this test only

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load(block)
    assert set(data) >= {"detection", "watch", "serve", "delivery"}
    assert parse_config(data, source="README.md").model_dump() == Config().model_dump()
