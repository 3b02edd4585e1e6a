"""Credentials of the delivery sinks (webhook URLs, headers, bearer tokens), read from files or the environment.

They are never on the command line or in the config file itself, so they do not end up in `ps`, shell history
or a ConfigMap; and errors about them name the file or variable, never the value.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from watcher.config import Secret


class CredentialError(ValueError):
    """A credential that cannot be read; the message names its source and config key, not its value."""


def read_secret(secret: Secret, *, key: str) -> str:
    """Return the value of `secret`, stripped; `key` is the config key it came from (for errors)."""
    if secret.file is not None:
        try:
            value = secret.file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CredentialError(f"{key}: cannot read {secret.file}: {exc.strerror or exc}") from None
        source = str(secret.file)
    else:
        name = secret.env or ""
        value = os.environ.get(name, "").strip()
        source = f"${name}"
    if not value:
        raise CredentialError(f"{key}: {source} is empty or unset")
    return value


def read_headers(secret: Secret | None, *, key: str) -> dict[str, str]:
    """Read a YAML (or JSON) mapping of HTTP header names to values.

    E.g. `Authorization: Bearer ...`.
    """
    if secret is None:
        return {}
    text = read_secret(secret, key=key)
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        raise CredentialError(f"{key}: not a YAML/JSON mapping of header names to values") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str | int) for k, v in data.items()):
        raise CredentialError(f"{key}: not a YAML/JSON mapping of header names to string values")
    return {k: str(v) for k, v in data.items()}
