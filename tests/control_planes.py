"""The fixtures' way to run a control plane (etcd + kube-apiserver): the session's (tests/conftest.py), and those of the
test modules that need one of their own (users with tokens of their own, an audit policy, API server flags, an
outage)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from harness.control_plane import ControlPlane, start_control_plane


def running_control_plane(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    *,
    users: Sequence[str] = (),
    audit_policy: Mapping[str, Any] | None = None,
    apiserver_flags: Sequence[str] = (),
    controller_manager: bool = False,
) -> Iterator[ControlPlane]:
    """A control plane started in a new temporary folder called `name` (its logs stay there), with
    kube-controller-manager too if `controller_manager`, stopped when the fixture that yields from this ends; the other
    arguments are `start_control_plane`'s."""
    workdir = tmp_path_factory.mktemp(name)
    with start_control_plane(workdir, users=users, audit_policy=audit_policy, apiserver_flags=apiserver_flags) as cp:
        if controller_manager:
            cp.start_controller_manager()
        yield cp
