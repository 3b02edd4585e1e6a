"""`--record FILE`: every event the live watcher receives, as JSON Lines that `fightwatch replay` reads.

Each line is `{"type", "object", "observedAt"}`, with the receive time the engine used, to the microsecond,
so a replay finds what the watcher found. Objects of relists are ADDED events, objects gone during a gap
are DELETED events, as the engine saw them. The file rotates by size (FILE.1 is the newest rotated part; replay
them oldest first, or all at once: `fightwatch replay FILE.2 FILE.1 FILE` merges by time). Writes are buffered
and flushed about once a second and on shutdown; a failing disk stops the recording, never the watcher.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from typing import IO, Final

import structlog

from watcher.detection.events import ObjectEvent, encode, event_object
from watcher.model import JSONObject, format_observed

BUFFER_BYTES = 2**16  # (resident while the file is open, once filled: 1 MiB is a tenth of what `run` adds)
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"  # holds a Secret's data, for `kubectl apply`

log = structlog.get_logger("fightwatch.recording")


class Recording:
    def __init__(self, path: Path, *, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.bytes_written = 0
        self.events = 0
        self.rotations = 0
        self.error: str | None = None
        self._file: IO[bytes] | None = None
        self._size = 0
        self._open()

    def write(self, event: ObjectEvent, *, secret: bool = False) -> None:
        """Append an event.

        A Secret's last-applied-configuration annotation (its data) is recorded as a digest only (its changes stay
        visible to a replay).
        """
        if self._file is None:
            return
        line = None if secret else spliced(event)
        if line is None:
            obj = event_object(event)
            if secret:
                obj = _redacted(obj)
            line = encode(event.type, obj, event.observed_at or 0.0)
        try:
            self._file.write(line)
            self._file.write(b"\n")
            size = len(line) + 1
            self._size += size
            self.bytes_written += size
            self.events += 1
            if self._size >= self.max_bytes:
                self._rotate()
        except OSError as exc:
            self._fail(exc)

    def flush(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as exc:
                self._fail(exc)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self._fail(exc)
            self._file = None

    def _open(self) -> None:
        """Open FILE for appending (a recording continued by a restarted watcher replays as one)."""
        self._file = self.path.open("ab", buffering=BUFFER_BYTES)
        self._size = self._file.tell()

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        self._file = None
        if self.keep == 0:
            self.path.unlink()
        else:
            for n in range(self.keep, 1, -1):
                older = self.path.with_name(f"{self.path.name}.{n - 1}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{n}"))
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self.rotations += 1
        self._open()

    def _fail(self, exc: OSError) -> None:
        self.error = f"{self.path}: {exc.strerror or exc}"
        log.error("recording stopped", error=self.error, events=self.events)
        if self._file is not None:
            with contextlib.suppress(OSError):  # the file is given up either way; its error was logged above
                self._file.close()
            self._file = None


_METADATA_TYPE: Final = b'"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",'
_PLAIN: Final = re.compile(r"[A-Za-z0-9./-]+")


def spliced(event: ObjectEvent) -> bytes | None:
    """Return the recorded line of an event made from the text the API server sent.

    Its object's type meta as the decoder named it (`PartialObjectMetadata` of a metadata-only watch becomes the
    object's own kind) and `observedAt` added, the rest byte for byte. The same JSON as `encode` makes of the decoded
    object, without decoding it and encoding it again (a fifth of the live watcher's CPU per event when recording).
    None: the text is not shaped as a watch event of the API server's
    (`{"type":...,"object":{"kind":...,"apiVersion":...,...}}`).
    """
    data, kind, api_version = event.data, event.kind, event.api_version
    head = b'{"type":"' + event.type.encode() + b'","object":{'
    if (
        not data.startswith(head)
        or not data.endswith(b"}}")
        or not (_PLAIN.fullmatch(kind) and _PLAIN.fullmatch(api_version))
    ):
        return None
    own = f'"kind":"{kind}","apiVersion":"{api_version}",'.encode()
    start = len(head)
    if data.startswith(_METADATA_TYPE, start):
        rest = data[start + len(_METADATA_TYPE) : -1]
    elif data.startswith(own, start):
        rest = data[start + len(own) : -1]
    else:
        return None
    observed = format_observed(event.observed_at or 0.0).encode()
    return b"".join((head, own, rest, b',"observedAt":"', observed, b'"}'))


def _redacted(obj: JSONObject) -> JSONObject:
    """Return a copy of a Secret's object without its data in the last-applied-configuration annotation."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or not isinstance(annotations.get(LAST_APPLIED), str):
        return obj
    digest = hashlib.sha256(annotations[LAST_APPLIED].encode()).hexdigest()
    return obj | {"metadata": meta | {"annotations": annotations | {LAST_APPLIED: f"sha256:{digest}"}}}
