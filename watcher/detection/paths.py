"""Readable field paths: the one place where a path inside an object is rendered as text.

Both ownership (decoded from managedFields `fieldsV1`) and values (read from the object itself) name their
leaves with these functions, so the same field always has the same name:

    spec.replicas
    metadata.labels.owner
    metadata.annotations[example.com/last-reconciled]
    spec.template.spec.containers[name=app].image
    webhooks[name=validate.example.com].clientConfig.caBundle
    metadata.finalizers[example.com/cleanup]          (set member)
    spec.args[0]                                        (list index)
"""

from __future__ import annotations

import re
import sys
from typing import Any

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field(parent: str, name: str) -> str:
    """A struct field or map key: `.name` when it reads as an identifier, else `[name]`."""
    if _PLAIN_NAME.match(name):
        return sys.intern(f"{parent}.{name}" if parent else name)
    return sys.intern(f"{parent}[{name}]")


def keyed_item(parent: str, keys: dict[str, Any]) -> str:
    """A list item identified by its merge keys, e.g. `containers[name=app]`."""
    rendered = ",".join(f"{k}={_scalar(v)}" for k, v in keys.items())
    return sys.intern(f"{parent}[{rendered}]")


def set_member(parent: str, value: Any) -> str:
    """A member of a set-like list (e.g. finalizers)."""
    return sys.intern(f"{parent}[{_scalar(value)}]")


def index(parent: str, position: int | str) -> str:
    return sys.intern(f"{parent}[{position}]")
