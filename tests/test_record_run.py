"""pytest --torchtalk-record on a real extension: its C++ ops compiled, its tests run.

What the record holds is checked against what the fixture's tests really do: the ops the
dispatcher saw (a composite and the ops it decomposes into, an op called from another
op's C++, custom ops of C++ and of Python, backward ops), the Python functions entered
(one reached only by getattr), the modules imported, work of a module fixture counted
for every test that uses it, outcomes, and a test that disturbed the recorder marked
unrecorded rather than recorded as doing less.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.record import storage
from indexer.record.merge import merge
from indexer.record.model import Record
from tests.record_support import (
    build_recext_library,
    libraries,
    make_recext_repo,
    recext_env,
    run_pytest,
)

pytestmark = pytest.mark.xdist_group("recorded-runs")


@pytest.fixture(scope="module")
def recext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("recext")
    library = build_recext_library(libraries(tmp_path_factory))
    repo = make_recext_repo(base / "recext")
    env = recext_env(base, library, repo)
    return repo, env


@pytest.fixture(scope="module")
def serial(recext) -> Record:
    repo, env = recext
    run_pytest(repo, "--torchtalk-record-to=serial.ttr", env=env)
    return storage.read(repo / "serial.ttr")


def executed(record: Record, nodeid: str) -> set[tuple[str, str]]:
    test = next(t for t in record.tests if t.nodeid == nodeid)
    return {record.names[n] for n in record.names_of(test)}


def ops(record: Record, nodeid: str) -> set[str]:
    return {text for kind, text in executed(record, nodeid) if kind == "op"}


def test_a_composite_op_and_the_ops_it_decomposes_into(serial: Record) -> None:
    ran = ops(serial, "tests/test_shift.py::test_twice_backward")
    assert {"aten::matmul", "aten::mm", "aten::sigmoid"} <= ran


def test_ops_called_from_inside_other_ops_cpp(serial: Record) -> None:
    # recext::scale's kernel calls at::mul; torch.sort's kernel calls sort.stable.
    assert any(op.startswith("aten::mul") for op in ops(serial, "tests/test_scale.py::test_scale"))
    assert {"aten::sort", "aten::sort.stable"} <= ops(serial, "tests/test_shift.py::test_sorted")


def test_custom_ops_of_cpp_and_of_python(serial: Record) -> None:
    assert "recext::scale" in ops(serial, "tests/test_scale.py::test_scale")
    assert "recext::shift" in ops(serial, "tests/test_shift.py::test_shift")
    assert "recext::twice" in ops(serial, "tests/test_shift.py::test_twice_backward")
    assert "recext::scale" not in ops(serial, "tests/test_shift.py::test_shift")


def test_the_backward_pass(serial: Record) -> None:
    ran = executed(serial, "tests/test_shift.py::test_twice_backward")
    assert {("backward", "SigmoidBackward0"), ("backward", "MmBackward0")} <= ran
    assert ("op", "aten::sigmoid_backward") in ran
    assert not any(
        kind == "backward" for kind, _ in executed(serial, "tests/test_shift.py::test_shift")
    )


def test_python_functions_and_imports(serial: Record) -> None:
    by_name = executed(serial, "tests/test_scale.py::test_scale_by_name")
    # reached through getattr(recext, "sca" + name): no static reference names it
    assert ("function", "recext/__init__.py:scale") in by_name
    assert ("function", "recext/lookup.py:by_name") in by_name
    assert ("function", "recext/__init__.py:shift") not in by_name
    for nodeid in ("tests/test_scale.py::test_scale", "tests/test_shift.py::test_shift"):
        # imported by each test file, whichever file imported recext first
        assert ("module", "recext/__init__.py") in executed(serial, nodeid)
    assert ("module", "recext/lookup.py") in by_name
    assert ("module", "recext/lookup.py") not in executed(serial, "tests/test_shift.py::test_shift")


def test_module_fixture_work_counts_for_every_test_using_it(serial: Record) -> None:
    # `base` (scope=module) runs torch.sigmoid once, during the first test's setup.
    for nodeid in (
        "tests/test_scale.py::test_scale",
        "tests/test_scale.py::test_reuses_module_fixture",
    ):
        assert "aten::sigmoid" in ops(serial, nodeid)
    assert "aten::sigmoid" not in ops(serial, "tests/test_scale.py::test_scale_by_name")


def test_import_work_is_the_modules_whichever_test_imported_it_first(serial: Record) -> None:
    # recext.probes runs recext::probe while it is imported, during the collection of
    # whichever test file imports recext first: that is no test's own work.
    work = {s.label: {serial.names[n] for n in s.names} for s in serial.segments
            if s.kind == "module"}  # fmt: skip
    assert ("op", "recext::probe") in work["recext/probes.py"]
    assert ("module", "recext/probes.py") in work["recext/__init__.py"]
    assert all("recext::probe" not in ops(serial, t.nodeid) for t in serial.tests)
    from indexer.query.recorded import RecordedRuns

    runs = RecordedRuns(serial)
    assert set(runs.import_work([("op", "recext::probe")])) == {"recext/probes.py"}
    importers = {serial.tests[i].nodeid for i in runs.importers(["recext/probes.py"])}
    # every test of a file importing recext, though only the first file's import ran it
    assert importers == {t.nodeid for t in serial.tests if "test_outcomes" not in t.nodeid}
    table_users = {serial.tests[i].nodeid for i in runs.importers(["recext/table.py"])}
    assert table_users == {t.nodeid for t in serial.tests if "test_scale.py" in t.nodeid}


def test_the_device_types_each_test_used(serial: Record) -> None:
    assert serial.meta["mechanisms"]["devices"].startswith("allocations")
    assert ("device", "cpu") in executed(serial, "tests/test_scale.py::test_scale")
    # allocates nothing itself: its module fixture's tensor is what it uses
    assert ("device", "cpu") in executed(serial, "tests/test_scale.py::test_reuses_module_fixture")
    own = next(s for s in serial.segments if s.label.endswith("::test_reuses_module_fixture"))
    assert ("device", "cpu") not in {serial.names[n] for n in own.names}
    untouched = executed(serial, "tests/test_shift.py::test_code_holding_a_dict_constant")
    assert not [name for name in untouched if name[0] == "device"]  # no tensor at all
    assert not [name for name in serial.names if name == ("device", "cuda")]


def test_code_that_cannot_be_hashed_is_recorded(serial: Record) -> None:
    nodeid = "tests/test_shift.py::test_code_holding_a_dict_constant"
    test = next(t for t in serial.tests if t.nodeid == nodeid)
    assert test.complete
    function = "tests/test_shift.py:test_code_holding_a_dict_constant.<locals>.generated"
    assert ("function", function) in executed(serial, nodeid)


def test_outcomes_and_tests_that_are_not_recorded(serial: Record) -> None:
    tests = {t.nodeid.split("::")[-1]: t for t in serial.tests}
    assert tests["test_scale"].outcome == "passed" and tests["test_scale"].complete
    assert tests["test_failing"].outcome == "failed" and not tests["test_failing"].complete
    assert tests["test_skipped"].outcome == "skipped"
    assert tests["test_expected_failure"].outcome == "xfailed"
    disturbed = tests["test_replaces_the_profile_function"]
    if serial.meta["mechanisms"]["python"].startswith("sys.monitoring"):  # Python 3.12+
        why = "sys.monitoring events of tool id 4 were changed"
    else:
        why = "profile function was replaced"
    assert why in disturbed.unrecorded and not disturbed.complete
    assert not tests["test_sorted"].unrecorded  # the recorder came back for the next test


def test_the_record_knows_its_commit_and_file_contents(serial: Record, recext) -> None:
    repo, _ = recext
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert serial.meta["commit"] == head
    assert {"tests/test_scale.py", "recext/__init__.py", "recext/lookup.py"} <= set(serial.files)


def _as_compared(record: Record) -> dict[str, tuple]:
    return {
        t.nodeid: (t.outcome, t.unrecorded, frozenset(record.names[n] for n in record.names_of(t)))
        for t in record.tests
    }


def test_xdist_and_merged_shards_give_the_serial_record(recext, serial: Record) -> None:
    repo, env = recext
    run_pytest(repo, "-n", "2", "--torchtalk-record-to=xdist.ttr", env=env)
    distributed = storage.read(repo / "xdist.ttr")
    assert _as_compared(distributed) == _as_compared(serial)
    run_pytest(repo, "--torchtalk-record-to=a.ttr", "tests/test_scale.py", env=env)
    run_pytest(
        repo, "--torchtalk-record-to=b.ttr", "tests/test_shift.py", "tests/test_outcomes.py",
        "tests/test_square.py", env=env,
    )  # fmt: skip
    shards = [storage.read(repo / "b.ttr"), storage.read(repo / "a.ttr")]
    assert _as_compared(merge(shards)) == _as_compared(serial)
    one, other = repo / "m1.ttr", repo / "m2.ttr"
    storage.write(merge(shards), one)
    storage.write(merge(shards[::-1]), other)
    assert one.read_bytes() == other.read_bytes()  # order-independent, byte for byte


def test_a_record_that_cannot_be_written_is_refused_before_tests_run(
    recext, tmp_path: Path
) -> None:
    repo, env = recext
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_pytest(
        repo, f"--torchtalk-record-to={blocker}/record.ttr", "tests/test_shift.py", env=env,
        check_codes=(4,),
    )  # fmt: skip
    assert f"torchtalk: cannot write the record {blocker}/record.ttr" in done.stderr
    assert "passed" not in done.stdout


def test_cuda_kernels_switch_off_without_a_gpu_and_stats_say_why(recext, serial: Record) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    repo, env = recext
    assert serial.meta["mechanisms"]["cuda_kernels"] == "off: no CUDA device"
    assert not [name for name in serial.names if name[0] == "kernel"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest_torchtalk", "record", "stats", "--record", "serial.ttr"],
        cwd=repo,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert "kernels:  off: no CUDA device" in lines
    devices = next(line for line in lines if line.startswith("devices:"))
    assert devices.startswith("devices:  cpu present; tests using each: cpu ")
