"""`snapshot import` refuses every kind of bad archive, in one line, installing nothing."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.locations import cache_dir
from pytest_torchtalk.cli import main
from tests.helpers import make_fixture_repo


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def good_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid archive of a snapshot named 'good' of the minitorch fixture, built once."""
    base = tmp_path_factory.mktemp("good-archive")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(base / "cache"))
        patch.setenv("TORCHTALK_CONFIG_DIR", str(base / "config"))
        assert main(["index", "build", "--source", str(repo), "-q"]) == 0
        assert main(["snapshot", "save", "good", "--source", str(repo)]) == 0
        archive = base / "good.tar.gz"
        assert main(["snapshot", "export", "good", "-o", str(archive)]) == 0
    return archive


@pytest.fixture
def exported(good_archive: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "good.tar.gz"
    shutil.copyfile(good_archive, copy)
    return copy


CORE = ("SHA256SUMS", "snapshot.json", "index.sqlite")


def members(archive: Path) -> dict[str, bytes]:
    """The archive's three core members (its checksums listing only those): the archives
    these tests craft leave the optional ones (a record) out."""
    with tarfile.open(archive, "r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    kept = [line for line in files["SHA256SUMS"].decode().splitlines()
            if line.split("  ")[-1] in CORE]  # fmt: skip
    files["SHA256SUMS"] = ("\n".join(kept) + "\n").encode()
    return {name: files[name] for name in CORE}


def sums(files: dict[str, bytes]) -> bytes:
    return "".join(
        f"{hashlib.sha256(files[name]).hexdigest()}  {name}\n"
        for name in ("snapshot.json", "index.sqlite")
    ).encode()


def write(path: Path, entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def standard(files: dict[str, bytes]) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    return [regular(name, files[name]) for name in ("SHA256SUMS", "snapshot.json", "index.sqlite")]


def _symlink(files):
    link = tarfile.TarInfo("index.sqlite")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return [*standard(files)[:2], (link, None)]


def _hardlink(files):
    link = tarfile.TarInfo("index.sqlite")
    link.type, link.linkname = tarfile.LNKTYPE, "snapshot.json"
    return [*standard(files)[:2], (link, None)]


def _device(files):
    dev = tarfile.TarInfo("index.sqlite")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
    return [*standard(files)[:2], (dev, None)]


def _oversized_meta(files):
    big = files["snapshot.json"] + b" " * (2 * 1024 * 1024)
    changed = {**files, "snapshot.json": big}
    return [regular("SHA256SUMS", sums(changed)), regular("snapshot.json", big)]


def _wrong_checksum(files):
    damaged = bytearray(files["index.sqlite"])
    damaged[len(damaged) // 2] ^= 0xFF
    return [*standard(files)[:2], regular("index.sqlite", bytes(damaged))]


def _schema(files):
    meta = json.loads(files["snapshot.json"])
    meta["schema_version"] = 999
    changed = {**files, "snapshot.json": json.dumps(meta).encode()}
    return [regular("SHA256SUMS", sums(changed)), *standard(changed)[1:]]


CASES: dict[str, tuple[Callable, str]] = {
    "absolute path": (
        lambda f: [*standard(f), regular("/tmp/evil", b"x")],
        "has an absolute path",
    ),
    "dot-dot": (lambda f: [regular("../evil", b"x"), *standard(f)], "leads out of the archive"),
    "nested dot-dot": (
        lambda f: [regular("a/../../evil", b"x"), *standard(f)],
        "leads out of the archive",
    ),
    "symlink": (_symlink, "is a link"),
    "hardlink": (_hardlink, "is a link"),
    "device": (_device, "is a device"),
    "oversized member": (_oversized_meta, "is oversized"),
    "unexpected member": (lambda f: [*standard(f), regular("extra.txt", b"x")], "unexpected"),
    "directory member": (
        lambda f: [(_dir("index.sqlite"), None), *standard(f)[:2]],
        "not a regular file",
    ),
    "duplicate member": (lambda f: [*standard(f), regular("snapshot.json", b"{}")], "twice"),
    "missing member": (lambda f: standard(f)[:2], "lacks index.sqlite"),
    "checksum mismatch": (_wrong_checksum, "checksum mismatch for index.sqlite"),
    "bad checksum list": (
        lambda f: [regular("SHA256SUMS", b"nonsense\n"), *standard(f)[1:]],
        "malformed line",
    ),
    "schema version": (_schema, "schema version 999"),
}


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def assert_nothing_installed() -> None:
    store = cache_dir() / "snapshots"
    assert not list(store.rglob("snapshot.json")), "a snapshot was installed"
    assert not [p for p in store.iterdir() if p.name != ".lock"], "leftovers in the store"


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_archive_is_refused(
    case: str, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build, message = CASES[case]
    bad = write(tmp_path / "bad.tar.gz", build(members(exported)))
    code, _, err = run(capsys, "snapshot", "import", str(bad), "--name", "bad")
    assert code == 1, err
    assert err.startswith("torchtalk: error: ") and err.count("\n") == 1, err
    assert message in err
    assert_nothing_installed()


def test_oversized_header_is_refused_before_reading(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = members(exported)
    head = b""
    for info, data in standard(files)[:2]:
        info.size = len(data)
        head += info.tobuf(tarfile.PAX_FORMAT) + data + b"\0" * (-len(data) % 512)
    huge = tarfile.TarInfo("index.sqlite")
    huge.size = 100 * 1024**3  # claims 100 GiB; the content is not there at all
    bad = tmp_path / "huge.tar.gz"
    bad.write_bytes(gzip.compress(head + huge.tobuf(tarfile.PAX_FORMAT)))
    code, _, err = run(capsys, "snapshot", "import", str(bad))
    assert code == 1 and "is oversized" in err
    assert_nothing_installed()


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.999])
def test_truncated_archive(
    cut: float, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = exported.read_bytes()
    bad = tmp_path / "truncated.tar.gz"
    bad.write_bytes(data[: int(len(data) * cut)])
    code, _, err = run(capsys, "snapshot", "import", str(bad))
    assert code == 1 and err.count("\n") == 1
    assert "corrupt or truncated" in err or "truncated" in err
    assert_nothing_installed()


@pytest.mark.parametrize("what", ["garbage", "flipped", "plain tar", "empty"])
def test_corrupt_archive(
    what: str, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(exported.read_bytes())
    bad = tmp_path / "corrupt.tar.gz"
    if what == "garbage":
        bad.write_bytes(b"this is not an archive\n" * 50)
    elif what == "flipped":
        for offset in range(200, len(data), max(1, len(data) // 20)):
            data[offset] ^= 0x5A
        bad.write_bytes(bytes(data))
    elif what == "plain tar":
        bad.write_bytes(gzip.decompress(bytes(data)))
    else:
        bad.write_bytes(b"")
    code, _, err = run(capsys, "snapshot", "import", str(bad))
    assert code == 1 and err.startswith("torchtalk: error: ") and err.count("\n") == 1, err
    assert_nothing_installed()


def test_missing_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "snapshot", "import", str(tmp_path / "none.tar.gz"))
    assert code == 1 and "no such archive" in err


def test_failed_import_keeps_the_existing_snapshot(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "snapshot", "import", str(exported))[0] == 0
    before = (cache_dir() / "snapshots" / "good" / "index.sqlite").read_bytes()
    bad = write(tmp_path / "bad.tar.gz", _wrong_checksum(members(exported)))
    code, _, err = run(capsys, "snapshot", "import", str(bad), "--force")
    assert code == 1 and "checksum mismatch" in err
    assert (cache_dir() / "snapshots" / "good" / "index.sqlite").read_bytes() == before
