"""The real kubectl of the control plane's release, run as users run it: a process per command, its own field
managers (`kubectl-client-side-apply`, `kubectl-rollout`, `kubectl-edit`, ...) and User-Agent.

    kubectl = Kubectl(cp.kubectl, cp.kubeconfig)
    await kubectl("apply", "-f", manifest_path)
    await kubectl("edit", "deployment/web", "-n", "ns", editor="sed -i s/1.19.0/1.19.1/")
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 60.0  # seconds for one command


class KubectlError(RuntimeError):
    """A kubectl command that failed: its arguments, exit status and what it printed."""


@dataclass(frozen=True)
class Kubectl:
    binary: Path
    kubeconfig: Path

    async def __call__(self, *args: str, editor: str | None = None, stdin: bytes | None = None) -> str:
        """Run `kubectl ARGS` against the control plane; its standard output. `editor` is the KUBE_EDITOR a
        `kubectl edit` runs on the object's file (a command line, the file's path appended)."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        if editor is not None:
            env["KUBE_EDITOR"] = editor
        proc = await asyncio.create_subprocess_exec(
            str(self.binary),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise KubectlError(f"kubectl {' '.join(args)}: no answer after {TIMEOUT:.0f}s") from None
        if proc.returncode != 0:
            raise KubectlError(
                f"kubectl {' '.join(args)} exited {proc.returncode}: {err.decode(errors='replace').strip()}"
            )
        return out.decode()

    async def apply(self, manifest: str, *args: str) -> str:
        """`kubectl apply -f -` of a YAML or JSON manifest (client-side apply unless ARGS say `--server-side`)."""
        return await self("apply", "-f", "-", *args, stdin=manifest.encode())
