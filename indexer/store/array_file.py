"""Files of named arrays behind a JSON header (the record's earlier format).

Each names the key it was written for, so one of another kind or version is never read
as this one's; carries a digest of its arrays, so a file damaged in place is refused
rather than trusted; and is written whole or not at all: to a temporary file, then
renamed over the old one.

A file may also come from elsewhere (a snapshot archive, a record from CI), so nothing in
it is trusted before it is checked: a header nested deeper than any we write is refused
(never a RecursionError), and the arrays it lists must fill the file exactly before one
byte is allocated for them (a length of 2**62 is refused, not attempted).
"""

from __future__ import annotations

import json
import os
import zlib
from array import array
from pathlib import Path
from typing import Any, BinaryIO

from indexer import durable


def is_layout_entry(entry: Any) -> bool:
    """Whether a header's entry is [name, typecode, length >= 0], as write() lays them out."""
    return (
        isinstance(entry, list)
        and len(entry) == 3
        and isinstance(entry[0], str)
        and isinstance(entry[1], str)
        and type(entry[2]) is int
        and entry[2] >= 0
    )


def digest(arrays: dict[str, array]) -> str:
    """A checksum of the arrays' bytes, in the order of the dict. It guards against
    damage, not tampering: CRC-32 is several times cheaper than a cryptographic hash."""
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
    """A file that is not whole: wrong magic or key, truncated, or damaged in place."""


# Deeper than any header we write (a record's meta is 3 levels down). The parser's own
# guard against a deeper one is the interpreter's recursion limit: caught, and below it
# the depth is checked here, so the bound is this one wherever the reader's stack stands.
MAX_HEADER_DEPTH = 16


def _depth_within(value: Any, limit: int) -> bool:
    pending = [(value, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if depth > limit:
                return False
            pending.extend((item, depth + 1) for item in value)
    return True


def parse_json(text: bytes, depth: int = MAX_HEADER_DEPTH, what: str = "it") -> Any:
    """``text`` parsed, nested at most ``depth`` deep; :class:`DamagedFile` otherwise."""
    too_deep = DamagedFile(f"{what} nests deeper than {depth} levels")
    try:
        value = json.loads(text)
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:
        raise DamagedFile(f"{what} is damaged ({exc})") from None
    if not _depth_within(value, depth):
        raise too_deep
    return value


def _header(line: bytes) -> dict[str, Any]:
    header = parse_json(line, what="its header")
    if not isinstance(header, dict):
        raise DamagedFile("its header is not an object")
    return header


def _layout(
    header: dict[str, Any], typecodes: dict[str, str], available: int
) -> list[tuple[str, str, int]]:
    """The arrays the header lists, checked against ``typecodes`` and against the bytes
    the file holds after its header, before any is allocated."""
    listed = header.get("arrays")
    if not isinstance(listed, list):
        raise DamagedFile("its header lists no arrays")
    layout: list[tuple[str, str, int]] = []
    needed = 0
    for entry in listed:
        if not is_layout_entry(entry):
            raise DamagedFile("its header lists an array as something else than name, type, length")
        name, typecode, length = entry
        if typecodes.get(name) != typecode:
            raise DamagedFile(f"unexpected array {name!r}")
        layout.append((name, typecode, length))
        needed += length * array(typecode).itemsize
    if len({name for name, _, _ in layout}) != len(layout):
        raise DamagedFile("its header lists an array twice")
    if {name for name, _, _ in layout} != set(typecodes):
        raise DamagedFile("arrays are missing")
    if needed > available:
        raise DamagedFile(
            f"truncated: its arrays take {needed} bytes, {available} follow its header"
        )
    if needed < available:
        raise DamagedFile("bytes follow its last array")
    return layout


def read_checked(
    path: Path, magic: bytes, key: str, typecodes: dict[str, str]
) -> tuple[dict[str, Any], dict[str, array]]:
    """(header, arrays) of a file written for ``key`` holding exactly the arrays of
    ``typecodes`` (name -> typecode); :class:`DamagedFile` saying why otherwise (OSError
    when it cannot be opened)."""
    with open(path, "rb") as handle:
        if handle.readline(len(magic)) != magic:
            raise DamagedFile("not a file of this kind")
        header = _header(handle.readline())
        if header.get("key") != key:
            raise DamagedFile(f"written as {header.get('key')!r}, not {key!r}")
        return header, _arrays(handle, header, typecodes)


def _arrays(
    handle: BinaryIO, header: dict[str, Any], typecodes: dict[str, str]
) -> dict[str, array]:
    """The arrays that follow the header, whole and matching its digest."""
    size = os.fstat(handle.fileno()).st_size
    arrays: dict[str, array] = {}
    for name, typecode, length in _layout(header, typecodes, size - handle.tell()):
        values = array(typecode)
        try:
            values.fromfile(handle, length)
        except EOFError:  # shortened while we read it
            raise DamagedFile("truncated") from None
        arrays[name] = values
    if handle.read(1):
        raise DamagedFile("bytes follow its last array")
    if header.get("digest") != digest(arrays):
        raise DamagedFile("its checksum does not match (damaged in place)")
    return arrays
