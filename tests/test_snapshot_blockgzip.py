"""Block gzip: archives any gzip reader reads, inflated in parallel, every damage an error."""

from __future__ import annotations

import gzip
import io
import random
import struct
import tarfile
from pathlib import Path

import pytest

from indexer.locations import cache_dir
from indexer.snapshot import blockgzip
from indexer.snapshot.blockgzip import BlockGzipError, BlockGzipReader, BlockGzipWriter
from pytest_torchtalk.cli import main
from tests.helpers import make_fixture_repo

BLOCK = 4096


def sample(size: int = 50_000) -> bytes:
    """Compressible but not trivial: words drawn from a small vocabulary, then noise."""
    rng = random.Random(8)
    words = [b"tensor", b"kernel", b"dispatch", b"at::native", b"\n", b"0x%x" % 77]
    text = b" ".join(rng.choice(words) for _ in range(size // 6))
    return text[:size] + rng.randbytes(1000)


def compress(data: bytes, block: int = BLOCK) -> bytes:
    out = io.BytesIO()
    with BlockGzipWriter(out, level=6, block_bytes=block) as writer:
        for start in range(0, len(data), 777):  # writes that straddle blocks
            writer.write(data[start : start + 777])
    return out.getvalue()


def inflate_all(blob: bytes, piece: int = 1000) -> tuple[bytes, bool]:
    with BlockGzipReader(io.BytesIO(blob)) as reader:
        parts = []
        while chunk := reader.read(piece):
            parts.append(chunk)
        assert reader.tell() == sum(map(len, parts))
        return b"".join(parts), reader.parallel


def member_offsets(blob: bytes) -> list[int]:
    offsets, at = [], 0
    while at < len(blob):
        offsets.append(at)
        at += struct.unpack_from("<I", blob, at + 16)[0]
    assert at == len(blob)
    return offsets


def test_roundtrip_in_blocks_that_every_gzip_reader_reads() -> None:
    data = sample()
    blob = compress(data)
    assert len(member_offsets(blob)) == -(-len(data) // BLOCK)  # one member per block
    assert gzip.decompress(blob) == data  # a plain multi-member .gz
    assert inflate_all(blob) == (data, True)
    assert len(blob) < len(data) / 2


def test_empty_input_is_one_empty_member() -> None:
    blob = compress(b"")
    assert gzip.decompress(blob) == b""
    assert inflate_all(blob) == (b"", True)


def test_an_empty_member_between_blocks_is_not_the_end() -> None:
    first, second = compress(b"a" * 5000), compress(b"b" * 3000)
    assert inflate_all(first + compress(b"") + second) == (b"a" * 5000 + b"b" * 3000, True)


def test_input_of_whole_blocks_ends_without_an_empty_member() -> None:
    data = sample(BLOCK * 12)[: BLOCK * 12]  # more blocks than are ever in flight
    blob = compress(data)
    assert len(member_offsets(blob)) == 12 and gzip.decompress(blob) == data


def test_a_gzip_of_another_tool_is_read_member_by_member() -> None:
    first, second = sample(20_000), sample(3_000)
    blob = gzip.compress(first) + gzip.compress(second, mtime=0)
    assert inflate_all(blob) == (first + second, False)


def damaged(blob: bytes, how: str) -> bytes:
    offsets = member_offsets(blob)
    data = bytearray(blob)
    second = offsets[1]
    if how == "length too long":
        struct.pack_into(
            "<I", data, second + 16, struct.unpack_from("<I", data, second + 16)[0] + 9
        )
    elif how == "length too short":
        struct.pack_into(
            "<I", data, second + 16, struct.unpack_from("<I", data, second + 16)[0] - 9
        )
    elif how == "impossible length":
        struct.pack_into("<I", data, second + 16, 3)
    elif how == "huge length":
        struct.pack_into("<I", data, second + 16, 0xFFFFFFFF)
    elif how == "flipped body byte":
        data[second + 40] ^= 0x10
    elif how == "flipped crc":
        data[offsets[2] - 6] ^= 0x01
    elif how == "cut inside a member":
        del data[second + 30 :]
    elif how == "trailing garbage":
        data += b"not gzip"
    elif how == "member without length":
        data[second + 3] = 0  # FLG: no extra field
    return bytes(data)


DAMAGE: dict[str, str | None] = {
    "length too long": None,
    "length too short": None,
    "impossible length": "impossible length",
    "huge length": "impossible length",  # refused before reading 4 GiB into memory
    "flipped body byte": None,
    "flipped crc": "corrupt gzip member",
    "cut inside a member": None,
    "trailing garbage": "not a gzip stream",
    "member without length": "lacks its block length",
}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_damage_is_an_error(how: str) -> None:
    blob = damaged(compress(sample()), how)
    with pytest.raises(BlockGzipError, match=DAMAGE[how]):
        inflate_all(blob)


def test_a_member_inflating_beyond_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    blob = compress(b"\0" * 20_000, block=20_000)
    monkeypatch.setattr(blockgzip, "MAX_BLOCK_BYTES", 10_000)
    with pytest.raises(BlockGzipError, match="inflates beyond"):
        inflate_all(blob)
    serial = gzip.compress(b"\0" * 20_000)  # no limit per member here: the tar checks sizes
    assert inflate_all(serial)[0] == b"\0" * 20_000


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blockgzip, "BLOCK_BYTES", 64 * 1024)


@pytest.fixture
def multi_block_archive(small_blocks: None, tmp_path: Path) -> Path:
    repo = make_fixture_repo("minitorch", tmp_path / "minitorch")
    assert main(["index", "build", "--source", str(repo), "-q"]) == 0
    assert main(["snapshot", "save", "good", "--source", str(repo)]) == 0
    archive = tmp_path / "good.tar.gz"
    assert main(["snapshot", "export", "good", "-o", str(archive)]) == 0
    assert main(["snapshot", "delete", "good"]) == 0
    return archive


def test_a_multi_block_archive_imports_and_is_a_plain_tar_gz(
    multi_block_archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = multi_block_archive.read_bytes()
    assert len(member_offsets(blob)) > 3
    with tarfile.open(multi_block_archive, "r:gz") as tar:
        names = tar.getnames()
        assert names[:3] == ["SHA256SUMS", "snapshot.json", "index.sqlite"]
        assert names[3:] == []  # what selections read is inside the index
        db = tar.extractfile("index.sqlite").read()  # type: ignore[union-attr]
    assert main(["snapshot", "import", str(multi_block_archive)]) == 0
    assert (cache_dir() / "snapshots" / "good" / "index.sqlite").read_bytes() == db


@pytest.mark.parametrize("how", ["at a member boundary", "inside a member", "flipped block"])
def test_a_damaged_multi_block_archive_installs_nothing(
    how: str, multi_block_archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = multi_block_archive.read_bytes()
    offsets = member_offsets(blob)
    middle = offsets[len(offsets) // 2]
    if how == "at a member boundary":
        bad_bytes = blob[:middle]
    elif how == "inside a member":
        bad_bytes = blob[: middle + 100]
    else:
        bad_bytes = blob[: middle + 100] + bytes([blob[middle + 100] ^ 0x20]) + blob[middle + 101 :]
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bad_bytes)
    capsys.readouterr()
    assert main(["snapshot", "import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("torchtalk: error: ") and err.count("\n") == 1, err
    assert "truncated" in err or "corrupt" in err
    store = cache_dir() / "snapshots"
    assert not list(store.rglob("snapshot.json"))
    assert not [p for p in store.iterdir() if p.name != ".lock"]
