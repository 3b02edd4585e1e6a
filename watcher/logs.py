"""Logs for people and log pipelines: structlog, JSON lines in production and readable lines on a terminal.

Every finding that opens, updates or resolves gets one line with its writers, fields and hint, so the log alone
tells the story. Libraries' stdlib logging goes through the same renderer. No credential ever reaches a log:
connections are logged by where their credentials came from, never by what they are.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import orjson
import structlog

from watcher.config import LogSettings
from watcher.model import ChangeKind, FindingChange, format_time

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

log = structlog.get_logger("fightwatch.findings")


def _dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(settings: LogSettings, *, stream: TextIO | None = None) -> None:
    """Set up structlog (and stdlib logging) once, before anything logs."""
    stream = stream or sys.stderr
    console = settings.format == "console" or (settings.format == "auto" and stream.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if console:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    else:
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer(serializer=_dumps)
    level = _LEVELS[settings.level]
    structlog.configure(
        processors=[*shared, structlog.processors.StackInfoRenderer(), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.WARNING))  # libraries say little worth reading at info


def log_change(change: FindingChange) -> None:
    """One line per finding opened, updated or resolved."""
    f = change.finding
    fields: dict[str, Any] = {
        "id": f.id,
        "type": f.type.value,
        "object": f.object.display(),
        "namespace": f.object.namespace,
        "kind": f.object.kind,
        "name": f.object.name,
        "writers": [f"{c.writer.display()} x{c.writes}" for c in f.writers],
        "fields": list(f.fields),
        "handovers": f.handovers,
        "writes_per_minute": f.writes_per_minute,
        "first_seen": format_time(f.first_seen),
        "summary": f.summary,
        "hint": f.hint,
    }
    if f.resolved_at is not None:
        fields["resolved_at"] = format_time(f.resolved_at)
    event = f"finding {change.kind.value}"
    if change.kind is ChangeKind.OPENED:
        log.warning(event, **fields)
    else:
        log.info(event, **fields)
