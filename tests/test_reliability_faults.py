"""The second reliability pass (issue 40): full disks, a killed import, git missing.

A full disk is a small tmpfs (root only: ``mount -t tmpfs -o size=2m``, filled to its
last 100 KiB); where that is not possible the case is skipped saying why. The writer
thread of an import meets a full disk without root too: ``/dev/full`` refuses every
write. docs/reliability.md has the table."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexer.snapshot.archive import _copy_hashed
from indexer.snapshot.blockgzip import BlockGzipReader, BlockGzipWriter
from indexer.snapshot.store import store_root
from indexer.workspace import Workspace
from tests.reliability_support import (
    build,
    index_files,
    is_root,
    one_line_error,
    run,
    run_pytest,
    torchtalk_process,
)


@contextlib.contextmanager
def full_disk(where: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs at ``where`` (root only), to be filled by :func:`fill`."""
    if not is_root():
        pytest.skip("a full disk is a small tmpfs, and mounting one needs root")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path, leave_kib: int = 100) -> None:
    free = shutil.disk_usage(where).free
    (where / "filler").write_bytes(b"\0" * max(free - leave_kib * 1024, 0))


# --- snapshot import on a full disk ------------------------------------------------------


def blockgzip_of(data: bytes) -> BlockGzipReader:
    packed = io.BytesIO()
    with BlockGzipWriter(packed) as gz:
        gz.write(data)
    packed.seek(0)
    return BlockGzipReader(packed)


@pytest.mark.parametrize("size", [1000, 3 << 20], ids=["fails-on-the-last-flush", "fails-early"])
def test_import_writer_on_a_full_disk_neither_hangs_nor_hides_it(size: int) -> None:
    """/dev/full takes no byte: a small member fails on the writer's last flush, after
    the reader's end mark was taken; the writer then waited for another mark forever."""
    data = os.urandom(size)
    failure: list[BaseException] = []
    with blockgzip_of(data) as source:

        def copy() -> None:
            try:
                _copy_hashed(source, Path("/dev/full"), len(data))
            except BaseException as exc:
                failure.append(exc)

        worker = threading.Thread(target=copy, daemon=True)
        worker.start()
        worker.join(20)
    assert not worker.is_alive(), "the import deadlocked on a full disk"
    assert failure and isinstance(failure[0], OSError) and failure[0].errno == 28


@pytest.mark.slow
def test_snapshot_import_on_a_full_disk(
    minitorch_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(minitorch_repo, capsys)[0] == 0
    assert run(capsys, "snapshot", "save", "good", "--source", str(minitorch_repo))[0] == 0
    archive = tmp_path / "good.tar.gz"
    assert run(capsys, "snapshot", "export", "good", "-o", str(archive))[0] == 0
    with full_disk(tmp_path / "small") as cache:
        (cache / "snapshots").mkdir()
        fill(cache, 100)
        env = {"TORCHTALK_CACHE_DIR": str(cache)}
        done = torchtalk_process("snapshot", "import", str(archive), env=env, timeout=120)
        assert done.returncode == 1 and one_line_error(done.stderr), done.stderr
        assert "No space left on device" in done.stderr
        assert sorted(p.name for p in (cache / "snapshots").iterdir()) == [], "staging left"


def test_the_next_command_removes_what_a_killed_import_left(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A kill -9 skips the import's cleanup: its staging directory (named with its
    process id) stayed for ever. A live process's staging is left alone."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    root = store_root()
    root.mkdir(parents=True)
    killed = root / f".staging-{gone.pid}-abc123"
    (killed / "index.sqlite").parent.mkdir()
    (killed / "index.sqlite").write_bytes(b"half an index")
    live = root / f".staging-{os.getpid()}-def456"
    live.mkdir()
    code, _, err = run(capsys, "snapshot", "list")
    assert code == 0, err
    assert not killed.exists() and live.exists()


# --- index build on a full disk ----------------------------------------------------------


@pytest.mark.slow
def test_index_build_on_a_full_disk_keeps_the_old_index(
    minitorch_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with full_disk(tmp_path / "small") as cache:
        env = {"TORCHTALK_CACHE_DIR": str(cache)}
        assert (
            torchtalk_process(
                "index", "build", "-q", "--source", str(minitorch_repo), env=env
            ).returncode
            == 0
        )
        monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(cache))
        before = index_files(minitorch_repo)
        fill(cache, 100)
        (minitorch_repo / "minitorch/linalg.py").write_text("DEFAULT_ORD = 2\n")
        done = torchtalk_process(
            "index", "build", "-q", "--force", "--source", str(minitorch_repo), env=env
        )
        assert done.returncode == 1 and one_line_error(done.stderr), done.stderr
        assert "database or disk is full; the previous index is kept" in done.stderr
        assert index_files(minitorch_repo) == before
        db = Workspace.resolve(minitorch_repo).db_path
        assert not [p for p in db.parent.iterdir() if ".building-" in p.name]


# --- git missing from PATH ----------------------------------------------------------------


@pytest.fixture
def no_git(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH holds no git (nor anything else)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    return {"PATH": str(empty)}


def test_git_missing_is_one_line_in_the_cli(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], no_git: dict[str, str]
) -> None:
    assert build(minitorch_repo, capsys)[0] == 0
    done = torchtalk_process("select", "--source", str(minitorch_repo), env=no_git)
    assert done.returncode == 2 and one_line_error(done.stderr), done.stderr
    assert "git is not installed (or not on PATH)" in done.stderr
    done = torchtalk_process("status", env=no_git, cwd=minitorch_repo)  # no --source
    assert done.returncode == 2 and one_line_error(done.stderr), done.stderr
    assert "git is not installed" in done.stderr and "no git repository" not in done.stderr


@pytest.mark.slow
def test_git_missing_is_one_line_in_pytest(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], no_git: dict[str, str]
) -> None:
    assert build(minitorch_repo, capsys)[0] == 0
    result = run_pytest(minitorch_repo, "--torchtalk-affected", env=no_git)
    output = result.stdout + result.stderr
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert result.returncode == 4, output
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == [
        "ERROR: torchtalk: git is not installed (or not on PATH): TorchTalk reads the tree's changes with it"
    ]
