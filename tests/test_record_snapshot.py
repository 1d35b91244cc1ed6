"""A record travels with its index: snapshot save, export, import elsewhere, load --nearest.

The nightly job records a run beside the index and saves a snapshot; a PR job on another
machine imports it into a checkout at another path and loads the nearest: the record it
gets must read back equal, and a damaged record must never be carried or installed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from indexer.query.recorded import record_path_for
from indexer.record import storage
from indexer.record.model import Record, RecordedTest
from indexer.workspace import Workspace
from tests.test_snapshot_nearest import build_and_save, run


def a_record(commit: str) -> Record:
    record = Record(meta={"commit": commit, "created_at": "2026-12-01T00:00:00+00:00"})
    segment = record.add_segment("test", "test/test_ops.py::test_add")
    record.segments[segment].names = {record.name_id("op", "aten::add.Tensor")}
    record.tests.append(
        RecordedTest("test/test_ops.py::test_add", "test/test_ops.py", "passed", 0.5, [segment])
    )
    return record


def test_a_record_round_trips_through_an_exported_snapshot(
    minitorch_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)  # the index exists; now record beside it
    record_path = record_path_for(Workspace.resolve(repo).db_path)
    storage.write(a_record("c" * 40), record_path)
    written = storage.read(record_path)
    code, _, err = run(capsys, "snapshot", "save", "nightly", "--source", str(repo))
    assert code == 0, err
    archive = tmp_path / "nightly.tar.gz"
    assert run(capsys, "snapshot", "export", "nightly", "-o", str(archive))[0] == 0

    # Another machine: a fresh store, the same code at another path.
    other = tmp_path / "elsewhere"
    shutil.copytree(repo, other)
    shutil.rmtree(record_path.parent.parent.parent)  # a new machine: the cache is empty
    code, _, err = run(capsys, "snapshot", "import", str(archive))
    assert code == 0, err
    code, out, err = run(capsys, "snapshot", "load", "--nearest", "--source", str(other))
    assert code == 0, err
    loaded = storage.read(record_path_for(Workspace.resolve(other).db_path))
    assert loaded == written
    code, out, _ = run(capsys, "snapshot", "list", "--json")
    assert '"tests": 1' in out


def test_a_damaged_record_is_not_carried(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)
    record_path = record_path_for(Workspace.resolve(repo).db_path)
    storage.write(a_record("c" * 40), record_path)
    data = bytearray(record_path.read_bytes())
    data[-3] ^= 0xFF
    record_path.write_bytes(bytes(data))
    code, _, err = run(capsys, "snapshot", "save", "nightly", "--source", str(repo))
    assert code == 1 and "checksum does not match" in err and len(err.strip().splitlines()) == 1
