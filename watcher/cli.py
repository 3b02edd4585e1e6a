"""`fightwatch` command line: the arguments and the config, then the command.

`run` starts the live watcher (`watcher.service`), `replay`, `demo` and `audit` the offline analysis
(`watcher.offline`). Each is imported for its command only, so that a process holds the libraries of the command it
runs. Exit statuses: `watcher.exits`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from watcher import __version__
from watcher.config import Config, ConfigError, ShardingSettings, load_config, parse_duration
from watcher.detection.native import CHOICES, native_available
from watcher.exits import EXIT_ERROR, EXIT_FINDINGS
from watcher.sources.envelopes import Envelope


def main(argv: Sequence[str] | None = None, *, prog: str = "fightwatch") -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"fightwatch: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.command == "run":
        return _run(args, config)
    if args.command == "scan":
        from watcher import scan  # noqa: PLC0415 - the live watcher's imports only for a scan

        return scan.run(config, scan.options_of(args))
    from watcher import offline  # noqa: PLC0415 - the readers, only for the offline commands

    return offline.run(args, config)


def _run(args: argparse.Namespace, config: Config) -> int:
    """`fightwatch run`: the config with the command line's overrides, then the live watcher."""
    from watcher import service  # noqa: PLC0415 - the live watcher's imports (aiohttp, clients) only when run

    if args.listen is not None:
        host, port = args.listen
        config = config.model_copy(update={"serve": config.serve.model_copy(update={"address": host, "port": port})})
    if args.log_level is not None:
        config = config.model_copy(update={"log": config.log.model_copy(update={"level": args.log_level})})
    if args.shard is not None or args.total_shards is not None:
        try:
            config = _with_shard(config, args.shard, args.total_shards)
        except ConfigError as exc:
            print(f"fightwatch: {exc}", file=sys.stderr)
            return EXIT_ERROR
    return service.run(config, kubeconfig=args.kubeconfig, context=args.context, record=args.record, engine=args.engine)


def build() -> str:
    """Tell which build this is.

    setup.py compiles the per-event modules with mypyc, and builds the native engine (Rust), when it can:
    `engine: native` where `--engine auto` (the default) runs on it.
    """
    from watcher.detection import engine  # noqa: PLC0415 - already imported; read here for its file only

    compiled = "pure Python" if engine.__file__.endswith(".py") else "compiled with mypyc"
    return f"{compiled}, engine: {'native' if native_available() else 'python'}"


def _parser(prog: str = "fightwatch") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Find Kubernetes controllers fighting over objects, and hot reconcile loops.",
    )
    parser.add_argument("--version", action="version", version=f"fightwatch {__version__} ({build()})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for sub in _subcommands():
        sub.arguments(commands.add_parser(sub.name, help=sub.summary, description=sub.description))
    return parser


class _Subcommand(NamedTuple):
    """A subcommand: its name, its line in `--help`, its description and the function adding its arguments."""

    name: str
    summary: str
    description: str | None
    arguments: Callable[[argparse.ArgumentParser], None]


def _subcommands() -> tuple[_Subcommand, ...]:
    """Return each subcommand, in the order `--help` lists them."""
    return (
        _Subcommand(
            "replay",
            "analyse recorded watch streams",
            "Analyse recorded watch streams: the output of `kubectl get KIND -A --watch --output-watch-events -o "
            "json --show-managed-fields`, or the same events as JSON Lines (optionally with observedAt). Several "
            "files are merged by event time; `-` reads standard input; .gz files are decompressed.",
            _replay_arguments,
        ),
        _Subcommand(
            "audit",
            "analyse kube-apiserver audit logs: conflict storms, stuck appliers, no-op writes",
            "Analyse kube-apiserver audit logs (--audit-log-path JSON Lines, or EventList documents; any audit "
            "level, Metadata included), also as managed clusters export them (EKS: CloudWatch Logs; GKE: Cloud "
            "Logging; AKS: Azure Monitor; see --audit-format), for what the watch cannot show: objects whose writes "
            "keep failing with 409 Conflict (conflict_storm), server-side applies rejected again and again "
            "(apply_conflict), and clients rewriting objects with writes that change nothing (noop_writes), naming "
            "each client by user, User-Agent and field manager. Several files (rotated parts) are merged by time; "
            "`-` reads standard input; .gz files are decompressed. Request and response bodies are read only for "
            "object metadata and a 409's message.",
            _audit_arguments,
        ),
        _Subcommand(
            "scan",
            "watch a cluster for a while, read-only, and report (also: kubectl fightwatch)",
            "Watch the cluster of the current kubeconfig context for a while (--for, default 5m, or until Ctrl-C) "
            "and report controllers fighting over objects and hot reconcile loops, as replay does. Read-only: it "
            "lists and watches what these credentials may (it asks the API server first, and says what it may not "
            "watch), and writes nothing in the cluster: no Event, no Lease, no listening port. While it runs, "
            "standard error shows a status line and each finding as it opens; standard output gets the result.",
            _scan_arguments,
        ),
        _Subcommand(
            "demo",
            "analyse the bundled capture of real controller fights",
            None,
            _demo_arguments,
        ),
        _Subcommand(
            "run",
            "watch a cluster and serve findings",
            "Watch every resource of a cluster (or those the config selects) and report controllers that fight over "
            "objects and hot reconcile loops: in the log, and at /api/v1/findings and /metrics over HTTPS for "
            "callers the API server authenticates and authorizes (serve.*). Credentials: --kubeconfig, else "
            "$KUBECONFIG, else the pod's service account, else ~/.kube/config. Stops on SIGTERM or SIGINT.",
            _run_arguments,
        ),
    )


def _replay_arguments(replay: argparse.ArgumentParser) -> None:
    """Add the arguments of `fightwatch replay FILE...`: recorded watch streams, with audit logs of that time."""
    replay.add_argument("files", nargs="+", metavar="FILE")
    replay.add_argument(
        "--audit",
        nargs="+",
        metavar="LOG",
        help="kube-apiserver audit logs of the same time, joined with the captures: the users behind managers, "
        "conflicts, stuck appliers and writes that changed nothing (see `fightwatch audit`)",
    )
    audit_format_option(replay)
    _output_options(replay)


def _audit_arguments(audit: argparse.ArgumentParser) -> None:
    """Add the arguments of `fightwatch audit LOG...`: kube-apiserver audit logs, as files or cloud exports."""
    audit.add_argument("files", nargs="+", metavar="LOG")
    audit.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="read one LOG (a file, or - for a pipe) as it is written, as `tail -F` does: print each finding as it "
        "opens, changes and resolves, as `run` logs them; on Ctrl-C or the end of the pipe, the summary",
    )
    audit_format_option(audit)
    _output_options(audit, engine=False)


def _scan_arguments(scan: argparse.ArgumentParser) -> None:
    """Add the arguments of `fightwatch scan` (`kubectl fightwatch`): a read-only, time-boxed watch of a cluster."""
    scan.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    scan.add_argument("--context", help="kubeconfig context (default: the current context)")
    scope = scan.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", help="only the objects of this namespace (no cluster-scoped ones: nodes, CRDs, ...)"
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace (the default)")
    scan.add_argument(
        "--resources",
        action="append",
        metavar="KINDS",
        help="only these resource types, as kubectl names them, comma-separated: deploy,cm,widgets.example.com "
        "(default: every type but events, leases, endpoints, endpointslices and pods)",
    )
    scan.add_argument("-l", "--selector", help="only objects with these labels (app=web,tier!=db)")
    scan.add_argument(
        "--for",
        dest="duration",
        type=_duration,
        default=300.0,
        metavar="DURATION",
        help="how long to watch: 90s, 5m (default), 1h; 0: until Ctrl-C",
    )
    scan.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="also write every watch event to FILE (JSON Lines): `fightwatch replay FILE` finds the same",
    )
    audit_source = scan.add_mutually_exclusive_group()
    audit_source.add_argument(
        "--audit-follow",
        metavar="LOG",
        help="join audit events read as they are written to LOG (a file, or - for a pipe: the managed clusters' "
        "recipes in docs/audit.md): the users behind managers, conflicts, no-op writes",
    )
    audit_source.add_argument(
        "--audit", nargs="+", metavar="LOG", help="join the audit events of these logs (read at start)"
    )
    audit_format_option(scan)
    _output_options(scan)


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    """Add the arguments of `fightwatch demo`: the bundled capture of real controller fights."""
    _output_options(demo)


def _run_arguments(run: argparse.ArgumentParser) -> None:
    """Add the arguments of `fightwatch run`: the live watcher."""
    run.add_argument("--config", type=Path, help="YAML config file (what to watch, thresholds, serving, logs)")
    engine_option(run)
    run.add_argument(
        "--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    run.add_argument("--context", help="kubeconfig context (default: the current context)")
    run.add_argument(
        "--listen",
        type=_listen,
        metavar="[HOST]:PORT",
        help="serve the endpoints on HOST:PORT (overrides serve.address and serve.port; no HOST: every address)",
    )
    run.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="overrides log.level of the config"
    )
    run.add_argument(
        "--shard",
        metavar="INDEX|POD_NAME",
        help="watch only this shard's share of the resources (overrides sharding.shard): a number, or a StatefulSet "
        "pod name whose ordinal modulo --total-shards is the shard",
    )
    run.add_argument(
        "--total-shards", type=int, metavar="N", help="how many shards there are (overrides sharding.total_shards)"
    )
    run.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="append every received event to FILE as JSON Lines (replayable; rotated by size, see record.*)",
    )


def _output_options(sub: argparse.ArgumentParser, *, engine: bool = True) -> None:
    """Add the options of every command that prints findings: the config, the output, the report, the engine."""
    sub.add_argument("--config", type=Path, help="YAML config file (thresholds, ignore rules)")
    sub.add_argument(
        "--output",
        "-o",
        choices=OUTPUTS,
        default="table",
        help="table (default): for people, cut to the terminal's width ($COLUMNS, else the terminal's; whole "
        "when piped); wide: the table with every cell whole; json: one finding per line; yaml: the same objects, "
        "one YAML document each",
    )
    sub.add_argument(
        "--fail-on-findings",
        action="store_true",
        help=f"exit with status {EXIT_FINDINGS} when anything was found (for CI)",
    )
    sub.add_argument(
        "--incidents",
        action="store_true",
        help="with --output json or yaml: one object per incident (findings of one pattern on many objects) "
        "instead of per finding",
    )
    sub.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the findings, with a timeline of each, as one self-contained HTML file (opens offline)",
    )
    if engine:
        engine_option(sub)
    sub.add_argument(
        "--skip-invalid",
        action="store_true",
        help="count and skip malformed events instead of stopping at the first",
    )


OUTPUTS = ("table", "wide", "json", "yaml")
COMMANDS = ("scan", "replay", "audit", "demo", "run")


def audit_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--audit-format",
        type=Envelope,
        choices=list(Envelope),
        metavar="{" + ",".join(Envelope) + "}",
        help="the envelope of every audit log: raw (the API server's log or webhook), eks (CloudWatch Logs: "
        "filter-log-events, get-log-events, tail, subscriptions), gke (Cloud Logging LogEntries: gcloud logging read, "
        "sinks, Pub/Sub), aks (Azure Monitor: Event Hubs, storage accounts, Log Analytics). Default: told by each "
        "file's first record",
    )


def engine_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=CHOICES,
        default="auto",
        help="auto (default): the native engine where it is built, else python; native: events parsed and "
        "attributed natively (Rust); python: by the Python reference it is tested against. Findings are the same",
    )


def _with_shard(config: Config, shard: str | None, total: int | None) -> Config:
    """Apply --shard/--total-shards to the config.

    The shard is a number, or a StatefulSet pod name (`fw-fightwatch-3`) whose ordinal modulo the number of shards is
    the shard (so `shards x replicas` pods make replicas per shard).
    """
    sharding = config.sharding.model_dump()
    if total is not None:
        sharding["total_shards"] = total
    if shard is not None:
        ordinal = re.fullmatch(r"(?:.*-)?(\d+)", shard)
        if ordinal is None:
            raise ConfigError(f"--shard {shard!r}: not a number nor a pod name ending in -<ordinal>")
        index = int(ordinal.group(1))
        sharding["shard"] = index if shard.isdigit() else index % sharding["total_shards"]
    try:
        return config.model_copy(update={"sharding": ShardingSettings.model_validate(sharding)})
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors())
        raise ConfigError(f"--shard/--total-shards: {problems}") from None


def _listen(text: str) -> tuple[str, int]:
    """`[HOST]:PORT` -> (host, port); an empty host is every address. IPv6 hosts in brackets: `[::1]:8080`."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not [HOST]:PORT (e.g. :8080 or 127.0.0.1:8080)")
    return host.removeprefix("[").removesuffix("]") or "0.0.0.0", int(port)  # noqa: S104 - asked for: every address


def _duration(text: str) -> float | None:
    """`--for`: a Go-style duration or seconds; 0 is until Ctrl-C (None)."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration cannot be negative (0: until Ctrl-C)")
    return seconds or None


def run() -> None:
    sys.exit(main())


def kubectl_plugin() -> None:
    """`kubectl-fightwatch`, run by kubectl as `kubectl fightwatch ...`: a scan unless a command is named."""
    sys.exit(main(plugin_argv(sys.argv[1:]), prog="kubectl fightwatch"))


def plugin_argv(argv: Sequence[str]) -> list[str]:
    """`kubectl fightwatch [ARGS]`: `scan` unless ARGS start with a command (or --version)."""
    if argv and (argv[0] in COMMANDS or argv[0] == "--version"):
        return list(argv)
    return ["scan", *argv]
