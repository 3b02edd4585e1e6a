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
  short strings (uids, resourceVersions), `digest`, CRC-32 and Adler-32 side by side, for the kilobytes of
  fieldsV1 tries and bodies (a CRC-32 tells apart any two texts that differ in a run of 32 bits or less: a changed
  value always changes the digest). Both run at about the speed of Python's own `hash()`; BLAKE2b would cost
  three times as much, per event.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Final

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
    """The value hash of a string (its UTF-8 bytes)."""
    return zlib.crc32(text.encode(), STRING)


def value_hash(value: Any) -> int:
    """The value hash of a JSON scalar (or, as compact JSON, of anything else)."""
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
    """The value hash of a list without merge keys, hashed whole."""
    return zlib.crc32(compact_json(items), LIST)


def compact_json(value: Any) -> bytes:
    """JSON without spaces, numbers as `repr` writes them (the standard library's encoder: orjson writes floats its
    own way, which the native implementation could not follow)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def digest(data: bytes, previous: int = 0) -> int:
    """A 64-bit digest of (long) bytes, its high half their CRC-32: a change-detection and cache key, not a
    cryptographic hash. Bytes whose CRC-32 is `previous`'s high half are taken for `previous`'s own (and it is
    returned, without computing the rest): a change of 32 bits or fewer in a row always changes the CRC-32,
    another goes unseen with a probability of 2**-32, as a change of a value does (see above)."""
    crc = zlib.crc32(data)
    if previous and crc == previous >> 32:
        return previous
    return crc << 32 | zlib.adler32(data)


def text_key(text: str) -> int:
    """A 64-bit key of a short string (a uid, a resourceVersion): the CRC-32s of its bytes forwards and backwards
    (two different linear maps: for unrelated strings, a shared key has a probability of about 2**-64)."""
    data = text.encode()
    return zlib.crc32(data) << 32 | zlib.crc32(data[::-1])
