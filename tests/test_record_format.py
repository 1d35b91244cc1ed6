"""The record's file format: what format 2 adds (device types per segment), and what a
reader does with a record of format 1, of a format it does not know, or of no format.

Format 1 records hold no device names. Read as they are, they must say that which
devices a test used is not known, never that no test used CUDA.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.recorded import RecordedRuns
from indexer.record import storage
from indexer.record.merge import merge
from indexer.record.model import Record, RecordedTest
from indexer.record.observer import DEVICES_HOW


def a_record(commit: str = "c" * 40, devices: tuple[str, ...] = ("cpu", "cuda")) -> Record:
    """Two tests of a GPU machine's run: one used CUDA, one only the CPU."""
    record = Record(
        meta={
            "commit": commit,
            "created_at": "2026-12-01T00:00:00+00:00",
            "devices": list(devices),
            "mechanisms": {"devices": DEVICES_HOW},
        }
    )
    for name, used in (("test_add_cuda", ("cpu", "cuda")), ("test_add_cpu", ("cpu",))):
        segment = record.add_segment("test", f"test/test_ops.py::{name}")
        record.segments[segment].names = {record.name_id("op", "aten::add.Tensor")} | {
            record.name_id("device", device) for device in used
        }
        record.tests.append(
            RecordedTest(f"test/test_ops.py::{name}", "test/test_ops.py", "passed", 0.1, [segment])
        )
    return record


def nodeids(runs: RecordedRuns, indexes: set[int] | None) -> set[str] | None:
    return None if indexes is None else {runs.record.tests[i].nodeid for i in indexes}


def test_device_names_round_trip_and_tell_the_tests_that_used_cuda(tmp_path: Path) -> None:
    path = storage.write(a_record(), tmp_path / "r.ttr")
    runs = RecordedRuns(storage.read(path))
    assert nodeids(runs, runs.tests_using_device("cuda")) == {"test/test_ops.py::test_add_cuda"}
    assert runs.summary()["tests_by_device"] == {"cpu": 2, "cuda": 1}


def test_a_record_made_without_cuda_cannot_tell_who_would_use_it(tmp_path: Path) -> None:
    # On a CPU machine no test used CUDA; on a GPU machine the same tests might.
    runs = RecordedRuns(storage.read(storage.write(a_record(devices=("cpu",)), tmp_path / "r")))
    assert runs.tests_using_device("cuda") is None


def test_merged_with_a_cpu_shard_no_test_is_known_not_to_use_cuda(tmp_path: Path) -> None:
    gpu, cpu = a_record(), a_record(devices=("cpu",))
    cpu.tests = [t for t in cpu.tests if t.nodeid.endswith("_cpu")]
    merged = merge([gpu, cpu])
    assert merged.meta["devices"] == ["cpu", "cuda"]  # present somewhere
    assert RecordedRuns(merged).tests_using_device("cuda") is None
    assert RecordedRuns(merge([gpu, a_record()])).tests_using_device("cuda") is not None


def test_merged_with_a_part_that_did_not_count_devices_no_test_is_known_not_to_use_cuda() -> None:
    older = a_record()  # a GPU machine's part made before format 2: no device names
    for segment in older.segments:
        segment.names = {n for n in segment.names if older.names[n][0] != "device"}
    del older.meta["mechanisms"]
    assert RecordedRuns(merge([a_record(), older])).tests_using_device("cuda") is None
    off = a_record()
    off.meta["mechanisms"] = {"devices": "off: another allocator of higher priority holds it"}
    assert RecordedRuns(merge([a_record(), off])).tests_using_device("cuda") is None


def test_a_format_1_record_is_read_and_says_devices_are_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = a_record()
    for segment in record.segments:
        segment.names = {n for n in segment.names if record.names[n][0] != "device"}
    del record.meta["mechanisms"]
    with monkeypatch.context() as patch:  # written as the previous TorchTalk wrote it
        patch.setattr(storage, "KEY", storage.FORMAT_1_KEY)
        patch.setattr(storage, "FORMAT", 1)
        path = storage.write(record, tmp_path / "old.ttr")
    old = storage.read(path)
    assert [t.nodeid for t in old.tests] == sorted(t.nodeid for t in record.tests)
    runs = RecordedRuns(old)
    assert runs.tests_using_device("cuda") is None
    assert "made before format 2" in runs.summary()["device_types"]


def test_a_record_of_a_newer_format_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(storage, "KEY", "record-v3")
        path = storage.write(a_record(), tmp_path / "new.ttr")
    with pytest.raises(storage.RecordError) as refused:
        storage.read(path)
    message = str(refused.value)
    assert "written as 'record-v3', not 'record-v2'" in message and "\n" not in message
