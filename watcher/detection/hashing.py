"""Stable hashes: the same input hashes alike in every process, every replica and both engine implementations.

Python's `hash()` of a string is randomised per process, so nothing that can reach output, a finding's identity
or a comparison between replicas is hashed with it. Two kinds are used:

- **value hashes** (32 bits): CRC-32 (IEEE, as zlib computes it) of a leaf value's canonical text, started from a
  seed that tells the value's JSON type apart, so `"1"`, `1`, `1.0` and `true` hash differently. The canonical
  text of a string is its UTF-8, of a number the way Python's `repr` writes it, of a list hashed whole its
  compact JSON (numbers again as `repr` writes them). The native implementation (`native/src/values.rs`)
  computes the very same numbers, so both implementations record identical handovers. A value hash is only
  ever compared for equality: a change is missed when old and new value share their CRC, with a probability of
  about 2**-32 per change.
- **keys** (64 bits): in-process lookup keys, where a collision would merge two different things: `text_key` for
  short strings (uids, resourceVersions) and `digest` for the kilobytes of fieldsV1 tries and bodies, both XXH3
  (the `xxhash` package: seedless, the same in every process; a shared key of two different inputs has a
  probability of about 2**-64). XXH3 digests a 2 KB body about twenty times as fast as CRC-32 and Adler-32
  together, and several times as fast as Python's own `hash()` of the same bytes.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Final

from xxhash import xxh3_64_intdigest

# CRC seeds by JSON type (the native implementation uses the same numbers: native/src/values.rs).
STRING: Final = 0x73  # "s"
NUMBER: Final = 0x6E  # "n"
BOOLEAN: Final = 0x62  # "b"
NULL: Final = 0x7A  # "z"
LIST: Final = 0x6C  # "l": a list hashed whole (its items have no merge key), as compact JSON
OTHER: Final = 0x6A  # "j": anything else as compact JSON

_TRUE: Final = zlib.crc32(b"\x01", BOOLEAN)
_FALSE: Final = zlib.crc32(b"\x00", BOOLEAN)
_NULL: Final = zlib.crc32(b"", NULL)


def text_hash(text: str) -> int:
    """Return the value hash of a string (its UTF-8 bytes)."""
    return zlib.crc32(text.encode(), STRING)


def value_hash(value: Any) -> int:
    """Return the value hash of a JSON scalar (or, as compact JSON, of anything else)."""
    kind = type(value)
    if kind is str:
        return zlib.crc32(value.encode(), STRING)
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is int or kind is float:
        return zlib.crc32(repr(value).encode(), NUMBER)
    if value is None:
        return _NULL
    return zlib.crc32(compact_json(value), OTHER)


def list_hash(items: list[Any]) -> int:
    """Return the value hash of a list without merge keys, hashed whole."""
    return zlib.crc32(compact_json(items), LIST)


def compact_json(value: Any) -> bytes:
    """Encode JSON without spaces, numbers as `repr` writes them.

    This is the standard library's encoder: orjson writes floats its own way, which the native implementation could not
    follow.
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def digest(data: bytes) -> int:
    """Return a 64-bit digest of (long) bytes.

    A change-detection and cache key, not a cryptographic hash.
    """
    return xxh3_64_intdigest(data)


def text_key(text: str) -> int:
    """Return a 64-bit key of a short string (a uid, a resourceVersion)."""
    return xxh3_64_intdigest(text.encode())
