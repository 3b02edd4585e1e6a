"""`fightwatch` command line: composition root for the offline analysis (`replay`, `demo`); `run` starts the
live watcher (`watcher.service`).

Exit status: 0 the analysis ran (or the watcher stopped on a signal); 2 usage, config or input error (what was
analysed before it is still printed), or the watcher could not start; 3 with `--fail-on-findings` when a fight
or hot loop was found.
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from watcher import __version__
from watcher.config import Config, ConfigError, ShardingSettings, load_config
from watcher.detection.engine import Engine
from watcher.detection.native import CHOICES, native_available
from watcher.model import FindingType, format_time
from watcher.sinks.report import write_json, write_table
from watcher.sources.capture import CaptureError, ReadStats, read_captures

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_FINDINGS = 3
DEMO_CAPTURE = "demo-capture.jsonl.gz"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
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
    return _offline(args, config)


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


def _offline(args: argparse.Namespace, config: Config) -> int:
    """`fightwatch replay` and `fightwatch demo`."""
    try:
        engine = Engine(config.detection, attribution=args.engine)
    except ImportError:
        print(f"fightwatch: --engine native: {NOT_BUILT}", file=sys.stderr)
        return EXIT_ERROR
    with ExitStack() as stack:
        if args.command == "demo":
            files = [str(stack.enter_context(resources.as_file(resources.files("watcher") / "data" / DEMO_CAPTURE)))]
            print(
                f"Replaying the bundled demo capture ({Path(files[0]).name}), recorded from a real "
                "kube-apiserver v1.20 while real clients fought.\n",
                file=sys.stderr,
            )
        else:
            files = args.files
        return _replay(files, engine=engine, args=args)
    return EXIT_OK  # pragma: no cover - ExitStack does not swallow exceptions


def _replay(files: list[str], *, engine: Engine, args: argparse.Namespace) -> int:
    tune_gc()
    stats = ReadStats()
    span: list[float] = []  # the times of the first and the last event analysed
    error = None
    try:
        _analyse(files, engine, stats, span, skip_invalid=args.skip_invalid)
    except CaptureError as exc:
        if stats.events == 0 and not stats.skipped_invalid:  # nothing analysed: the error is all there is to say
            print(f"fightwatch: {exc}", file=sys.stderr)
            return EXIT_ERROR
        error = exc
    first, last = (span[0], span[-1]) if span else (None, None)
    findings = engine.active() + engine.resolved()
    if args.output == "json":
        write_json(findings, sys.stdout.buffer)
        sys.stdout.flush()
    else:
        write_table(findings, sys.stdout, totals=_totals(engine, stats, first, last))
    for problem in stats.problems:
        print(f"fightwatch: skipped {problem}", file=sys.stderr)
    if stats.events == 0 and error is None:
        print(
            f"fightwatch: warning: no events were read from {', '.join(files)} "
            f"({stats.lines:,} lines{', all invalid' if stats.skipped_invalid else ''}): nothing was analysed",
            file=sys.stderr,
        )
    if error is not None:
        print(f"fightwatch: {error}", file=sys.stderr)
        # (a file that broke off, with no line, is past what skipping can help)
        advice = "; use --skip-invalid to skip bad events" if error.line is not None else ""
        print(
            f"fightwatch: the findings above cover the {stats.events:,} events read before this point{advice}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if args.fail_on_findings and findings:
        return EXIT_FINDINGS
    return EXIT_OK


def _analyse(files: list[str], engine: Engine, stats: ReadStats, span: list[float], *, skip_invalid: bool) -> None:
    """Feed the captures' events to the engine, keeping in `span` the times of the first and the last analysed. A
    `CaptureError` ends it: a bad event (unless skipped), or a file that broke off."""
    events = read_captures(files, engine.decode, stats=stats, skip_invalid=skip_invalid)
    try:
        for event in events:
            try:
                engine.process(event)
            except ValueError as exc:  # values the engine cannot read, found while analysing
                if not skip_invalid:
                    raise CaptureError(stats.source, stats.line, str(exc)) from None
                stats.note(f"{stats.source}:{stats.line}: {exc}")
                continue
            if span:
                span[1] = engine.now
            else:
                span += (engine.now, engine.now)
    finally:
        events.close()


def tune_gc() -> None:
    """Streaming allocates many short-lived dicts and keeps few: collect the young generation less often.

    The engine's state holds no reference cycles worth chasing every few hundred allocations; with the default
    thresholds the collector spends a tenth of a replay re-scanning it.
    """
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _totals(engine: Engine, stats: ReadStats, first: float | None, last: float | None) -> str:
    findings = engine.active() + engine.resolved()
    fights = sum(f.type is FindingType.FIGHT for f in findings)
    hot = len(findings) - fights
    s = engine.stats
    timed = first is not None and last is not None and s.untimed_events < s.events
    span = f" from {format_time(first)} to {format_time(last)}" if timed and first and last else ""
    lines = [
        f"{fights} fight{'s' * (fights != 1)}, {hot} hot loop{'s' * (hot != 1)} ({len(engine.active())} active).",
        f"{stats.events:,} events{span}: {s.writes:,} writes to {engine.tracked_objects:,} objects "
        f"({s.unattributed_writes:,} unattributed), {s.ignored_events:,} ignored, "
        f"{s.duplicate_events:,} duplicates.",
    ]
    if stats.skipped_invalid:
        lines.append(f"{stats.skipped_invalid:,} invalid events skipped.")
    if s.without_managed_fields:
        lines.append(
            f"Warning: {s.without_managed_fields:,} events carried no managedFields, so their writers cannot be "
            "named; kubectl hides them unless you capture with `--show-managed-fields`."
        )
    if s.untimed_events:
        lines.append(
            f"Warning: {s.untimed_events:,} events had neither observedAt nor a managedFields time; hot loops "
            "cannot be measured on them."
        )
    return "\n".join(lines)


NOT_BUILT = "the native engine is not built in this installation (see `fightwatch --version`)"


def build() -> str:
    """Which build this is: setup.py compiles the per-event modules with mypyc, and builds the native engine
    (Rust), when it can: `engine: native` where `--engine auto` (the default) runs on it."""
    from watcher.detection import engine  # noqa: PLC0415 - already imported; read here for its file only

    compiled = "pure Python" if engine.__file__.endswith(".py") else "compiled with mypyc"
    return f"{compiled}, engine: {'native' if native_available() else 'python'}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fightwatch",
        description="Find Kubernetes controllers fighting over objects, and hot reconcile loops.",
    )
    parser.add_argument("--version", action="version", version=f"fightwatch {__version__} ({build()})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--config", type=Path, help="YAML config file (thresholds, ignore rules)")
        sub.add_argument(
            "--output",
            "-o",
            choices=("table", "json"),
            default="table",
            help="table for people (default), json: one finding per line",
        )
        sub.add_argument(
            "--fail-on-findings",
            action="store_true",
            help=f"exit with status {EXIT_FINDINGS} when anything was found (for CI)",
        )
        engine_option(sub)
        sub.add_argument(
            "--skip-invalid",
            action="store_true",
            help="count and skip malformed events instead of stopping at the first",
        )

    replay = commands.add_parser(
        "replay",
        help="analyse recorded watch streams",
        description="Analyse recorded watch streams: the output of `kubectl get KIND -A --watch "
        "--output-watch-events -o json --show-managed-fields`, or the same events as JSON Lines (optionally "
        "with observedAt). "
        "Several files are merged by event time; `-` reads standard input; .gz files are decompressed.",
    )
    replay.add_argument("files", nargs="+", metavar="FILE")
    common(replay)
    demo = commands.add_parser("demo", help="analyse the bundled capture of real controller fights")
    common(demo)
    run = commands.add_parser(
        "run",
        help="watch a cluster and serve findings",
        description="Watch every resource of a cluster (or those the config selects) and report controllers that "
        "fight over objects and hot reconcile loops: in the log, at /api/v1/findings and /metrics. Credentials: "
        "--kubeconfig, else $KUBECONFIG, else the pod's service account, else ~/.kube/config. Stops on "
        "SIGTERM or SIGINT.",
    )
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
    return parser


def engine_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=CHOICES,
        default="auto",
        help="auto (default): the native engine where it is built, else python; native: events parsed and "
        "attributed natively (Rust); python: by the Python reference it is tested against. Findings are the same",
    )


def _with_shard(config: Config, shard: str | None, total: int | None) -> Config:
    """The config with --shard/--total-shards applied: a number, or a StatefulSet pod name (`fw-fightwatch-3`)
    whose ordinal modulo the number of shards is the shard (so `shards x replicas` pods make replicas per shard)."""
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


def run() -> None:
    sys.exit(main())
