"""The record's file format: what format 2 adds (device types per segment), and what a
reader does with a record of format 1, of a format it does not know, or of no format.

Format 1 records hold no device names. Read as they are, they must say that which
devices a test used is not known, never that no test used CUDA.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from indexer.query.recorded import RecordedRuns
from indexer.record import storage
from indexer.record.merge import merge
from indexer.record.model import KINDS, OUTCOMES, SEGMENT_KINDS, Record, RecordedTest
from indexer.record.observer import DEVICES_HOW
from indexer.store import array_file


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


def write_old(record: Record, path: Path, fmt: int) -> Path:
    """``record`` as formats 1 and 2 wrote it: the arrays behind one checksum, each
    segment's names as postings of its own (docs/recording.md, "Older formats")."""
    record = storage.canonical(record)
    offsets, flat = array("I", [0]), array("I")
    for name in range(len(record.names)):
        flat.extend(i for i, s in enumerate(record.segments) if name in s.names)
        offsets.append(len(flat))
    files = sorted({t.file for t in record.tests} | set(record.files))
    test_offsets, test_segments = array("I", [0]), array("I")
    for test in record.tests:
        test_segments.extend(test.segments)
        test_offsets.append(len(test_segments))

    def blob(texts: list[str]) -> array:
        return array("B", "\0".join(texts).encode())

    arrays = {
        "name_kinds": array("B", [KINDS.index(kind) for kind, _ in record.names]),
        "names": blob([text for _, text in record.names]),
        "segment_kinds": array("B", [SEGMENT_KINDS.index(s.kind) for s in record.segments]),
        "segment_labels": blob([s.label for s in record.segments]),
        "posting_offsets": offsets,
        "posting_segments": flat,
        "test_nodeids": blob([t.nodeid for t in record.tests]),
        "test_files": array("I", [files.index(t.file) for t in record.tests]),
        "test_outcomes": array("B", [OUTCOMES.index(t.outcome) for t in record.tests]),
        "test_durations": array("d", [t.duration for t in record.tests]),
        "test_unrecorded": array("I", [0 for _ in record.tests]),
        "test_segment_offsets": test_offsets,
        "test_segments": test_segments,
        "file_paths": blob(files),
        "file_hashes": blob([record.files.get(p, "") for p in files]),
    }
    header = {
        "format": fmt,
        "meta": record.meta,
        "reasons": [""],
        "counts": {"names": len(record.names), "segments": len(record.segments),
                   "tests": len(record.tests), "files": len(files)},
    }  # fmt: skip
    header["header_digest"] = storage._header_digest(header)
    assert array_file.write(path, storage.MAGIC, f"record-v{fmt}", header, arrays)
    return path


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


def test_a_format_1_record_is_read_and_says_devices_are_unknown(tmp_path: Path) -> None:
    record = a_record()
    for segment in record.segments:
        segment.names = {n for n in segment.names if record.names[n][0] != "device"}
    del record.meta["mechanisms"]
    path = write_old(record, tmp_path / "old.ttr", 1)
    old = storage.read(path)
    assert [t.nodeid for t in old.tests] == sorted(t.nodeid for t in record.tests)
    runs = RecordedRuns(old)
    assert runs.tests_using_device("cuda") is None
    assert "made before format 2" in runs.summary()["device_types"]


def test_a_record_of_a_newer_format_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(storage, "KEY", "record-v4")
        path = storage.write(a_record(), tmp_path / "new.ttr")
    for read in (storage.read, RecordedRuns.open):
        with pytest.raises(storage.RecordError) as refused:
            read(path)
        message = str(refused.value)
        assert "written as 'record-v4', not 'record-v3'" in message and "\n" not in message


def test_a_format_2_record_is_read_as_it_was_written(tmp_path: Path) -> None:
    path = write_old(a_record(), tmp_path / "old.ttr", 2)
    runs = RecordedRuns.open(path)
    assert nodeids(runs, runs.tests_using_device("cuda")) == {"test/test_ops.py::test_add_cuda"}
    assert storage.read(path) == storage.read(storage.write(a_record(), tmp_path / "new.ttr"))
