"""Block gzip: a .gz file made of independent members that state their own length.

A gzip file may hold several members one after another; every gzip reader (``gzip -d``,
``tar xzf``, Python's ``gzip``) reads them as one stream. Writing the archive as members
of ``BLOCK_BYTES`` each, whose header carries the member's compressed length in an extra
field (the idea of BGZF, with a four-byte length), lets import find every member without
inflating the one before, so several threads inflate at once: zlib releases the GIL. The
archive stays a plain .tar.gz and costs well under 1 % in size (deflate's window is 32 KiB).

A .gz without the field (made by another tool) is read member by member in one thread.
Every member's CRC-32 and length are checked by zlib; a member that is cut short, has
bytes after its end, says a wrong length, or inflates beyond ``MAX_BLOCK_BYTES`` is an
error.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO

BLOCK_BYTES = 4 << 20
# A reader refuses a member that inflates beyond this (a block of another writer, or a
# crafted one meant to exhaust memory).
MAX_BLOCK_BYTES = 64 << 20
_EXTRA_ID = b"TT"
_HEADER = struct.Struct("<BBBBIBBHccHI")  # magic, method, flags, mtime, xfl, os, extra
_FEXTRA = 0x04
_OS_UNKNOWN = 255
_READ_BYTES = 1 << 20


class BlockGzipError(ValueError):
    """The compressed stream is corrupt or truncated."""


def _workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _member(payload: bytes, level: int) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = compressor.compress(payload) + compressor.flush()
    size = _HEADER.size + len(body) + 8
    header = _HEADER.pack(0x1F, 0x8B, 8, _FEXTRA, 0, 0, _OS_UNKNOWN, 8, b"T", b"T", 4, size)
    trailer = struct.pack("<II", zlib.crc32(payload), len(payload) & 0xFFFFFFFF)
    return header + body + trailer


class BlockGzipWriter:
    """A write-only file object compressing into ``out`` block by block, in parallel."""

    def __init__(self, out: IO[bytes], level: int = 6, block_bytes: int | None = None) -> None:
        self._out = out
        self._level = level
        self._block = block_bytes or BLOCK_BYTES
        self._pending = bytearray()
        self._members = 0
        self._pool = ThreadPoolExecutor(_workers(), thread_name_prefix="snapshot-deflate")
        self._inflight: deque[Future[bytes]] = deque()

    def write(self, data: bytes) -> int:
        self._pending += data
        while len(self._pending) >= self._block:
            self._submit(bytes(self._pending[: self._block]))
            del self._pending[: self._block]
        return len(data)

    def _submit(self, payload: bytes) -> None:
        self._members += 1
        self._inflight.append(self._pool.submit(_member, payload, self._level))
        while len(self._inflight) > 2 * _workers():
            self._out.write(self._inflight.popleft().result())

    def close(self) -> None:
        """Compress what is left and write every member, in order."""
        try:
            if self._pending or not self._members:  # empty input: one empty member
                self._submit(bytes(self._pending))
                self._pending.clear()
            while self._inflight:
                self._out.write(self._inflight.popleft().result())
        finally:
            self._pool.shutdown(cancel_futures=True)

    def __enter__(self) -> BlockGzipWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self._pool.shutdown(cancel_futures=True)


def _block_length(header: bytes) -> int | None:
    """The member length in the header's extra field, or None for a member without it."""
    if len(header) < 10 or header[:3] != b"\x1f\x8b\x08":
        raise BlockGzipError("not a gzip stream (bad magic number)")
    if not header[3] & _FEXTRA or len(header) < _HEADER.size:
        return None
    *_, xlen, si1, si2, sublen, size = _HEADER.unpack(header[: _HEADER.size])
    if xlen < 8 or si1 + si2 != _EXTRA_ID or sublen != 4:
        return None
    # Deflate never grows data by more than a few bytes per 16 KiB: a longer member would
    # only make the reader hold a crafted length in memory.
    if size <= _HEADER.size + 8 or size > MAX_BLOCK_BYTES + MAX_BLOCK_BYTES // 64:
        raise BlockGzipError(f"gzip member states an impossible length ({size} bytes)")
    return size


def _inflate(member: bytes) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(member, MAX_BLOCK_BYTES)
    except zlib.error as exc:
        raise BlockGzipError(f"corrupt gzip member ({exc})") from None
    if inflater.unconsumed_tail:
        raise BlockGzipError(f"gzip member inflates beyond {MAX_BLOCK_BYTES} bytes")
    if not inflater.eof:
        raise BlockGzipError("gzip member is truncated")
    if inflater.unused_data:
        raise BlockGzipError("gzip member is shorter than its header says")
    return data


class BlockGzipReader:
    """A read-only, forward-only file object over a gzip file (blocks inflated in parallel
    when the file has the length field, member by member otherwise)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._buffer = memoryview(b"")
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: deque[Future[bytes]] = deque()
        self._ended = False
        self._stream: zlib._Decompress | None = None  # the one-thread fallback
        self._input = b""
        self._position = 0
        self.parallel = False
        head = raw.read(_HEADER.size)
        self._input = head
        if not head:
            raise BlockGzipError("empty file")
        if _block_length(head) is not None:
            self.parallel = True
            self._pool = ThreadPoolExecutor(_workers(), thread_name_prefix="snapshot-inflate")

    # -- block mode --------------------------------------------------------------------
    def _next_member(self) -> bytes | None:
        head = self._input or self._raw.read(_HEADER.size)
        self._input = b""
        if not head:
            return None
        size = _block_length(head)
        if size is None:
            raise BlockGzipError("gzip member lacks its block length (corrupt archive)")
        rest = self._raw.read(size - len(head))
        if len(rest) != size - len(head):
            raise BlockGzipError("gzip member is truncated")
        return head + rest

    def _fill_parallel(self) -> bytes:
        assert self._pool is not None
        while True:
            while not self._ended and len(self._inflight) < 2 * _workers():
                member = self._next_member()
                if member is None:
                    self._ended = True
                else:
                    self._inflight.append(self._pool.submit(_inflate, member))
            if not self._inflight:
                return b""
            data = self._inflight.popleft().result()
            if data:  # an empty member is valid gzip, not the end
                return data

    # -- fallback: one member after another in this thread --------------------------------
    def _fill_serial(self) -> bytes:
        while True:
            if self._stream is None:
                if not self._input:
                    self._input = self._raw.read(_READ_BYTES)
                    if not self._input:
                        return b""
                self._stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
            if not self._input:
                self._input = self._raw.read(_READ_BYTES)
                if not self._input:
                    raise BlockGzipError("gzip stream is truncated")
            try:
                data = self._stream.decompress(self._input, MAX_BLOCK_BYTES)
            except zlib.error as exc:
                raise BlockGzipError(f"corrupt gzip stream ({exc})") from None
            self._input = self._stream.unconsumed_tail
            if self._stream.eof:
                self._input = self._stream.unused_data
                self._stream = None
            if data:
                return data

    def _fill(self) -> bool:
        data = self._fill_parallel() if self.parallel else self._fill_serial()
        self._buffer = memoryview(data)
        return bool(data)

    def read_view(self, limit: int) -> memoryview:
        """Up to ``limit`` bytes from the current block without copying them; empty only
        at the end of the stream."""
        if not self._buffer and not self._fill():
            return self._buffer
        view = self._buffer[:limit]
        self._buffer = self._buffer[len(view) :]
        self._position += len(view)
        return view

    def read(self, size: int) -> bytes:
        """``size`` bytes (fewer only at the end of the stream)."""
        parts: list[memoryview] = []
        while size > 0 and (view := self.read_view(size)):
            parts.append(view)
            size -= len(view)
        return parts[0].tobytes() if len(parts) == 1 else b"".join(parts)

    def tell(self) -> int:
        """Bytes read so far (of the inflated stream)."""
        return self._position

    def close(self) -> None:
        if self._pool is not None:
            for future in self._inflight:
                future.cancel()
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> BlockGzipReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
