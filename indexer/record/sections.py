"""A file of named arrays that is read by parts: each 64 KiB block checksummed on its own.

A record of a whole suite is hundreds of MB, and a selection asks a few hundred of its
names: reading and checksumming all of it would cost more than the selection. So the
arrays ("sections") are laid out one after another behind a JSON header, a table of
CRC-32s holds one per block of every section, and a reader reads (``os.pread``) and
checks only the blocks that hold what it asks for. Only the header and the table are
read at opening; the layout is checked against the file's size before a byte of a
section is allocated (a length of 2**62 is refused, not attempted). The layout is in
docs/recording.md ("The file").

The checksums guard against damage, not tampering: what a section holds is checked by
its reader where it reads it (``indexer.record.storage``).
"""

from __future__ import annotations

import json
import os
import weakref
import zlib
from array import array
from pathlib import Path
from typing import Any, BinaryIO

from indexer.store.array_file import DamagedFile, is_layout_entry, parse_json

BLOCK = 1 << 16  # bytes; a multiple of every item size
TABLE = "block_crc32"  # the section of checksums, listed first


def _blocks(nbytes: int) -> int:
    return -(-nbytes // BLOCK)


def _crcs(data: bytes | memoryview) -> array:
    view = memoryview(data)
    return array("I", (zlib.crc32(view[at : at + BLOCK]) for at in range(0, len(view), BLOCK)))


def write(
    handle: BinaryIO, magic: bytes, header: dict[str, Any], sections: dict[str, array]
) -> None:
    """``sections`` (in their dict order) behind ``header`` (to which the layout and the
    table's own checksum are added) into ``handle``, an open file of the caller's."""
    table = array("I")
    for values in sections.values():
        table.extend(_crcs(memoryview(values).cast("B")))
    listed = {TABLE: table, **sections}
    full = {
        **header,
        "block": BLOCK,
        "sections": [[name, values.typecode, len(values)] for name, values in listed.items()],
        "table_crc32": zlib.crc32(memoryview(table).cast("B")),
    }
    handle.write(magic)
    handle.write(json.dumps(full).encode() + b"\n")
    for values in listed.values():
        values.tofile(handle)


class Sections:
    """An opened file of sections: its header, and its arrays read by parts on demand.

    :class:`DamagedFile` (a ValueError) says why when the file or a block read is not
    whole; OSError when it cannot be read."""

    def __init__(self, path: Path, magic: bytes, typecodes: dict[str, str]) -> None:
        fd = os.open(path, os.O_RDONLY)
        self._fd = fd
        weakref.finalize(self, os.close, fd)
        with os.fdopen(os.dup(fd), "rb") as handle:
            if handle.readline(len(magic)) != magic:
                raise DamagedFile("not a file of this kind")
            line = handle.readline()
            start = handle.tell()
            size = os.fstat(handle.fileno()).st_size
        header = parse_json(line, what="its header")
        if not isinstance(header, dict):
            raise DamagedFile("its header is not an object")
        self.header: dict[str, Any] = header
        self._layout: dict[str, tuple[str, int, int]] = {}  # name -> typecode, offset, bytes
        self._first_block: dict[str, int] = {}
        self._whole: dict[str, array] = {}
        self._checked: dict[int, bytes] = {}  # block number -> its bytes, checked
        if header.get("block") != BLOCK:
            raise DamagedFile("its blocks are not of the size this version reads")
        self._lay_out(header.get("sections"), {TABLE: "I", **typecodes}, start, size)
        _, offset, nbytes = self._layout[TABLE]
        table = array("I")
        table.frombytes(self._pread(offset, nbytes))
        if header.get("table_crc32") != zlib.crc32(memoryview(table).cast("B")):
            raise DamagedFile("its checksums do not match (damaged in place)")
        if len(table) != self._blocks_total:
            raise DamagedFile("its checksums are not one per block")
        self._table = table

    def _lay_out(self, listed: Any, typecodes: dict[str, str], start: int, size: int) -> None:
        if not isinstance(listed, list):
            raise DamagedFile("its header lists no sections")
        offset, block = start, 0
        for entry in listed:
            if not is_layout_entry(entry):
                raise DamagedFile(
                    "its header lists a section as something else than name, type, length"
                )
            name, typecode, length = entry
            if typecodes.get(name) != typecode or name in self._layout:
                raise DamagedFile(f"unexpected section {name!r}")
            nbytes = length * array(typecode).itemsize
            self._layout[name] = (typecode, offset, nbytes)
            if name != TABLE:
                self._first_block[name] = block
                block += _blocks(nbytes)
            offset += nbytes
            if offset > size:  # checked as it is summed: a huge length is never multiplied on
                raise DamagedFile(f"truncated: its sections take more than the {size} bytes it has")
        if set(self._layout) != set(typecodes) or next(iter(self._layout)) != TABLE:
            raise DamagedFile("sections are missing")
        if offset != size:
            raise DamagedFile("bytes follow its last section")
        self._blocks_total = block

    def _pread(self, offset: int, nbytes: int) -> bytes:
        data = os.pread(self._fd, nbytes, offset)
        if len(data) != nbytes:  # shortened while we read it
            raise DamagedFile("truncated")
        return data

    def length(self, name: str) -> int:
        """How many items the section ``name`` holds (read from the header only)."""
        typecode, _, nbytes = self._layout[name]
        return nbytes // array(typecode).itemsize

    def read(self, name: str, start: int = 0, stop: int | None = None) -> array:
        """Items ``start:stop`` of section ``name`` (0 <= start <= stop <= its length,
        else ValueError), their blocks checked."""
        whole = self._whole.get(name)
        typecode, offset, nbytes = self._layout[name]
        size = array(typecode).itemsize
        count = nbytes // size
        stop = count if stop is None else stop
        if not 0 <= start <= stop <= count:
            raise ValueError(f"{name}[{start}:{stop}] lies outside its {count} items")
        if whole is not None:
            return whole[start:stop]
        first, last = start * size // BLOCK, _blocks(stop * size)
        data = b"".join(self._block(name, offset, nbytes, b) for b in range(first, last))
        skip = start * size - first * BLOCK
        out = array(typecode)
        out.frombytes(memoryview(data)[skip : skip + (stop - start) * size])
        return out

    def raw(self, name: str, start: int, stop: int) -> bytes:
        """Bytes ``start:stop`` of a section of bytes (typecode B), their blocks checked."""
        typecode, offset, nbytes = self._layout[name]
        if typecode != "B" or not 0 <= start <= stop <= nbytes:
            raise ValueError(f"{name}[{start}:{stop}] lies outside its {nbytes} bytes")
        first, last = start // BLOCK, _blocks(stop)
        if last - first == 1:
            return self._block(name, offset, nbytes, first)[
                start - first * BLOCK : stop - first * BLOCK
            ]
        data = b"".join(self._block(name, offset, nbytes, b) for b in range(first, last))
        return data[start - first * BLOCK : stop - first * BLOCK]

    def _block(self, name: str, offset: int, nbytes: int, block: int) -> bytes:
        """Block ``block`` of section ``name``, checked once and kept (a lookup reads a
        few items at a time, often from the same blocks)."""
        number = self._first_block[name] + block
        data = self._checked.get(number)
        if data is None:
            at = block * BLOCK
            data = self._pread(offset + at, min(BLOCK, nbytes - at))
            if zlib.crc32(data) != self._table[number]:
                raise DamagedFile("its checksum does not match (damaged in place)")
            self._checked[number] = data
        return data

    def whole(self, name: str) -> array:
        """All of section ``name``, read once and kept."""
        if name not in self._whole:
            typecode, offset, nbytes = self._layout[name]
            data = self._pread(offset, nbytes)
            view = memoryview(data)
            first = self._first_block[name]
            for block in range(_blocks(nbytes)):
                piece = view[block * BLOCK : (block + 1) * BLOCK]
                if zlib.crc32(piece) != self._table[first + block]:
                    raise DamagedFile("its checksum does not match (damaged in place)")
            values = array(typecode)
            values.frombytes(data)
            self._whole[name] = values
        return self._whole[name]
