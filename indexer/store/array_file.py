"""Files of named arrays behind a JSON header: the index's sidecars.

A sidecar holds what is derived from one index and costly to derive again (the edges
both ways, the walk from the hub). Each names the key it was derived for, so one left
over from another index is never read as this one's; carries a digest of its arrays, so
a file damaged in place is rebuilt rather than trusted; and is written whole or not at
all: to a temporary file, then renamed over the old one.
"""

from __future__ import annotations

import json
import zlib
from array import array
from pathlib import Path
from typing import Any

from indexer import durable


def digest(arrays: dict[str, array]) -> str:
    """A checksum of the arrays' bytes, in the order of the dict. It guards against
    damage, not tampering: CRC-32 reads the adjacency's 36 MB in ~10 ms, a cryptographic
    hash in ~60, and every selection reads it."""
    checksum = 0
    for values in arrays.values():
        checksum = zlib.crc32(memoryview(values).cast("B"), checksum)
    return f"crc32:{checksum:08x}"


def write(
    path: Path, magic: bytes, key: str, header: dict[str, Any], arrays: dict[str, array]
) -> bool:
    """Write ``arrays`` (in their dict order) under ``header``; False when the file
    cannot be written (a read-only cache: the caller keeps what it made in memory)."""
    full = {
        **header,
        "key": key,
        "digest": digest(arrays),
        "arrays": [[name, values.typecode, len(values)] for name, values in arrays.items()],
    }
    try:
        with durable.atomic_output(path) as handle:
            handle.write(magic)
            handle.write(json.dumps(full).encode() + b"\n")
            for values in arrays.values():
                values.tofile(handle)
    except OSError:
        return False
    return True


class DamagedFile(ValueError):
    """A sidecar that is not whole: wrong magic or key, truncated, or damaged in place."""


def read_checked(
    path: Path, magic: bytes, key: str, typecodes: dict[str, str]
) -> tuple[dict[str, Any], dict[str, array]]:
    """(header, arrays) of a file written for ``key`` holding exactly the arrays of
    ``typecodes`` (name -> typecode); :class:`DamagedFile` saying why otherwise (OSError
    when it cannot be opened)."""
    with open(path, "rb") as handle:
        if handle.readline() != magic:
            raise DamagedFile("not a file of this kind")
        try:
            header = json.loads(handle.readline())
            if not isinstance(header, dict):
                raise DamagedFile("its header is not an object")
            if header.get("key") != key:
                raise DamagedFile(f"written as {header.get('key')!r}, not {key!r}")
            arrays: dict[str, array] = {}
            for name, typecode, length in header["arrays"]:
                if typecodes.get(name) != typecode:
                    raise DamagedFile(f"unexpected array {name!r}")
                values = array(typecode)
                values.fromfile(handle, length)
                arrays[name] = values
        except EOFError:
            raise DamagedFile("truncated") from None
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, DamagedFile):
                raise
            raise DamagedFile(f"its header is damaged ({exc})") from None
        if set(arrays) != set(typecodes):
            raise DamagedFile("arrays are missing")
        if handle.read(1):
            raise DamagedFile("bytes follow its last array")
    if header.get("digest") != digest(arrays):
        raise DamagedFile("its checksum does not match (damaged in place)")
    return header, arrays


def read(
    path: Path, magic: bytes, key: str, typecodes: dict[str, str]
) -> tuple[dict[str, Any], dict[str, array]] | None:
    """(header, arrays) of a file written for ``key`` holding exactly the arrays of
    ``typecodes`` (name -> typecode), whole and undamaged; None otherwise."""
    try:
        return read_checked(path, magic, key, typecodes)
    except (OSError, DamagedFile):
        return None
