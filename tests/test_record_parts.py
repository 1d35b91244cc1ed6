"""A record read by parts (format 3): work sets shared by the tests that ran the same
names, lookups that read only the blocks they need, and a merge whose memory follows the
distinct work sets, not the tests (issue 36: a whole suite's record).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.query.recorded import RecordedRuns
from indexer.record import storage
from indexer.record.merge import merge
from indexer.record.model import Record, RecordedTest

FILE = "test/test_ops.py"
SUM_FILE = "test/test_sum.py"  # after FILE: its tests' node ids lie in the last block


def a_suite(instances: int, commit: str = "c" * 40) -> Record:
    """``instances`` instances of one parametrized test that ran add and mul, and one
    test that ran only sum: as a PyTorch file's dtype and device variants are recorded."""
    record = Record(meta={"commit": commit, "created_at": "2026-12-01T00:00:00+00:00"})
    same = {record.name_id("op", "aten::add.Tensor"), record.name_id("op", "aten::mul.Tensor")}
    for number in range(instances):
        # long node ids, so that the node ids span several 64 KiB blocks
        nodeid = f"{FILE}::TestOps::test_binary_{'x' * 80}_{number:06}"
        segment = record.add_segment("test", nodeid)
        record.segments[segment].names = set(same)
        record.tests.append(RecordedTest(nodeid, FILE, "passed", 0.01, [segment]))
    nodeid = f"{SUM_FILE}::test_sum"
    segment = record.add_segment("test", nodeid)
    record.segments[segment].names = {record.name_id("op", "aten::sum")}
    record.tests.append(RecordedTest(nodeid, SUM_FILE, "passed", 0.01, [segment]))
    return record


def header_of(path: Path) -> dict:
    return json.loads(path.read_bytes()[len(storage.MAGIC) :].split(b"\n", 1)[0])


def test_tests_that_ran_the_same_names_share_one_work_set(tmp_path: Path) -> None:
    record = a_suite(500)
    path = storage.write(record, tmp_path / "r.ttr")
    header = header_of(path)
    assert header["counts"]["worksets"] == 2
    postings = dict((name, length) for name, _, length in header["sections"])
    assert postings["posting_worksets"] == 3  # add and mul once each, sum once: not 1,001
    assert storage.read(path) == storage.canonical(record)
    runs = RecordedRuns.open(path)
    assert len(runs.tests_executing([("op", "aten::mul.Tensor")])) == 500
    assert [runs.record.tests[i].nodeid for i in runs.tests_executing([("op", "aten::sum")])] == [
        f"{SUM_FILE}::test_sum"
    ]


def test_a_lookup_reads_only_the_blocks_it_needs_and_damage_it_reads_is_refused(
    tmp_path: Path,
) -> None:
    path = storage.write(a_suite(3000), tmp_path / "r.ttr")
    data = bytearray(path.read_bytes())
    sizes = [
        (name, length * {"B": 1, "I": 4, "d": 8}[code])
        for name, code, length in header_of(path)["sections"]
    ]
    at = len(data) - sum(size for _, size in sizes)  # where the first section starts
    for name, size in sizes:
        if name == "test_nodeids":
            assert size > 3 * storage.sections.BLOCK
            data[at + 10] ^= 0xFF  # in the first test's node id, the first block
            break
        at += size
    path.write_bytes(bytes(data))

    runs = RecordedRuns.open(path)  # the header and the table of checksums: whole
    assert len(runs.tests_executing([("op", "aten::add.Tensor")])) == 3000
    summed = runs.tests_executing([("op", "aten::sum")])
    assert [runs.nodeid(i) for i in summed] == [f"{SUM_FILE}::test_sum"]  # the last block
    with pytest.raises(storage.RecordError) as refused:
        runs.nodeid(0)
    assert "checksum does not match" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(storage.RecordError):
        runs.summary()  # what describes the record whole reads it whole
    with pytest.raises(storage.RecordError):
        storage.read(path)


def test_a_merge_keeps_one_set_of_names_per_work_set(tmp_path: Path) -> None:
    shards = [a_suite(200), a_suite(200)]
    shards[1].tests = [
        RecordedTest(
            t.nodeid.replace("test_binary", "test_other"), t.file, "passed", 0.01, t.segments
        )
        for t in shards[1].tests
    ]
    for segment in shards[1].segments:
        segment.label = segment.label.replace("test_binary", "test_other")
    read = [storage.read(storage.write(s, tmp_path / f"{i}.ttr")) for i, s in enumerate(shards)]
    merged = merge(read)
    assert len(merged.tests) == 401  # test_sum is in both
    held = {id(s.names) for s in merged.segments}
    assert len(held) == 2, "each test kept a set of its own"
    again = storage.read(storage.write(merged, tmp_path / "merged.ttr"))
    assert again == merged
