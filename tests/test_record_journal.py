"""Durable recording: real recorded runs of the recext fixture, stopped from outside.

A fixture test file of five tests (two share a module fixture) is recorded; the fourth
test writes a flag file and waits, and the test run is sent SIGTERM, SIGINT or SIGKILL
while it waits. What reached the journal is then checked against what the tests did:
the three tests that finished are in the record with what they ran (the module
fixture's ops too), the interrupted one is unrecorded and never "passed", and the
record says it is partial and why. Also: a torn or damaged journal entry, the options
that used to take a test path as the record path, and the tree state a record names.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer.record import storage
from indexer.record.merge import merge
from indexer.record.model import Record, RecordedTest
from indexer.record.storage import RecordError
from tests.helpers import commit_all
from tests.record_support import (
    build_recext_library,
    libraries,
    make_recext_repo,
    recext_env,
    run_pytest,
)

pytestmark = pytest.mark.xdist_group("recorded-runs")

STOP_TESTS = """
import os
import pathlib
import time

import pytest
import torch


@pytest.fixture(scope="module")
def shared():
    return torch.sigmoid(torch.ones(3))  # once, in test_first's setup


def test_first(shared):
    assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).sum() == 8


def test_second(shared):
    torch.sort(torch.tensor([3.0, 1.0]))


def test_third():
    torch.cumsum(torch.ones(3), 0)


def test_fourth():
    flag = os.environ.get("STOP_FLAG")
    if flag:
        pathlib.Path(flag).write_text("waiting")
        try:
            time.sleep(300)  # stopped from outside while here
        except Exception:  # as test code often does: it must not swallow the stop
            pass
    torch.atan2(torch.ones(1), torch.ones(1))


def test_fifth():
    torch.abs(torch.ones(1))
"""
FILE = "tests/test_stop.py"
FINISHED = [f"{FILE}::test_{n}" for n in ("first", "second", "third")]
WAITING = f"{FILE}::test_fourth"


@pytest.fixture(scope="module")
def stoppable(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("stoppable")
    library = build_recext_library(libraries(tmp_path_factory))
    repo = make_recext_repo(base / "recext")
    (repo / FILE).write_text(STOP_TESTS)
    commit_all(repo, "tests stopped from outside")
    return repo, recext_env(base, library, repo)


def run_until_waiting(
    repo: Path, env: dict[str, str], sig: int, *args: str, group: bool = False
) -> subprocess.CompletedProcess:
    """Record tests/test_stop.py and send ``sig`` once test_fourth waits."""
    flag = repo / "waiting.flag"
    flag.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", *args]
    process = subprocess.Popen(
        command, cwd=repo, env={**os.environ, **env, "STOP_FLAG": str(flag)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A shell's background job ignores SIGINT; the run gets Python's own handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        start_new_session=group,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not flag.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "test_fourth never started"
        time.sleep(0.1)
    if group:
        os.killpg(process.pid, sig)  # as CI's timeout does: every process of the run
    else:
        process.send_signal(sig)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def ops(record: Record, nodeid: str) -> set[str]:
    test = next(t for t in record.tests if t.nodeid == nodeid)
    return {text for kind, text in (record.names[n] for n in record.names_of(test)) if kind == "op"}


def finalize(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_torchtalk", "record", "finalize", *args],
        cwd=repo, env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def blake2b_12(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=12).hexdigest()


def test_sigterm_keeps_the_tests_that_finished_and_names_the_dirty_tree(stoppable) -> None:
    repo, env = stoppable
    # Recorded in a dirty tree: one tracked file edited, one new file not yet added.
    edited, added = repo / "recext" / "lookup.py", repo / "recext" / "extra.py"
    edited.write_text(edited.read_text() + "\nEDITED = True\n")
    added.write_text("NEW = 1\n")
    try:
        done = run_until_waiting(repo, env, signal.SIGTERM, "--torchtalk-record-to=t.ttr", FILE)
        assert done.returncode == 2, done.stdout + done.stderr  # interrupted
        record = storage.read(repo / "t.ttr")
        tests = {t.nodeid: t for t in record.tests}
        assert set(tests) == {*FINISHED, WAITING}  # test_fifth never started
        assert all(tests[n].complete for n in FINISHED)
        assert "aten::sigmoid" in ops(record, FINISHED[1])  # the module fixture's work
        assert {"aten::mm", "aten::sort", "aten::cumsum"} <= set().union(
            *(ops(record, n) for n in FINISHED)
        )
        stopped = tests[WAITING]
        assert stopped.outcome != "passed" and not stopped.complete
        assert stopped.unrecorded == "interrupted: SIGTERM"
        assert record.meta["partial"] is True
        assert record.meta["partial_reasons"] == ["interrupted: SIGTERM"]
        assert "the record is partial: interrupted: SIGTERM" in done.stdout
        assert not (repo / "t.ttr.journal").exists()  # the journal is the record now
        # whose record: HEAD, and the two files that differ from it, with their content
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert record.meta["commit"] == head
        assert record.meta["dirty"] == {
            "recext/extra.py": blake2b_12(added),
            "recext/lookup.py": blake2b_12(edited),
        }
        stats = subprocess.run(
            [sys.executable, "-m", "pytest_torchtalk", "record", "stats", "--record", "t.ttr"],
            cwd=repo, env={**os.environ, **env}, capture_output=True, text=True, check=True,
        ).stdout.splitlines()  # fmt: skip
        assert "tree:     dirty, 2 files differ from the commit:" in stats
        assert f"            recext/lookup.py {blake2b_12(edited)}" in stats
        assert "partial:  interrupted: SIGTERM" in stats
    finally:
        subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--", "recext/lookup.py"])
        added.unlink()


def test_sigint_during_a_test_leaves_it_unrecorded_not_passed(stoppable) -> None:
    repo, env = stoppable
    done = run_until_waiting(repo, env, signal.SIGINT, "--torchtalk-record-to=i.ttr", FILE)
    assert done.returncode == 2, done.stdout + done.stderr
    record = storage.read(repo / "i.ttr")
    tests = {t.nodeid: t for t in record.tests}
    assert set(tests) == {*FINISHED, WAITING}
    assert tests[WAITING].outcome == "error"
    assert tests[WAITING].unrecorded == "interrupted: KeyboardInterrupt (SIGINT)"
    assert record.meta["partial_reasons"] == ["interrupted: KeyboardInterrupt (SIGINT)"]
    assert record.meta["dirty"] == {}  # a clean tree says so


def test_sigkill_leaves_journals_that_finalize_makes_the_record(stoppable) -> None:
    repo, env = stoppable
    done = run_until_waiting(repo, env, signal.SIGKILL, "--torchtalk-record-to=k.ttr", FILE)
    assert done.returncode == -signal.SIGKILL
    assert not (repo / "k.ttr").exists()
    journals = sorted((repo / "k.ttr.journal").iterdir())
    assert len(journals) == 1 and journals[0].suffix == ".ttj"
    kept = journals[0].read_bytes()

    # A new run recording to the same path is refused before any test runs: the journals
    # of the stopped run are not lost under it.
    again = run_pytest(repo, "--torchtalk-record-to=k.ttr", FILE, env=env, check_codes=(4,))
    assert "holds the journals of a run that did not finish" in again.stderr
    assert "passed" not in again.stdout

    done = finalize(repo, env, "k.ttr.journal")
    assert done.returncode == 0, done.stderr
    record = storage.read(repo / "k.ttr")
    assert sorted(t.nodeid for t in record.tests) == sorted(FINISHED)
    assert all(t.complete for t in record.tests)
    assert "aten::sigmoid" in ops(record, FINISHED[1])
    assert record.meta["partial"] is True
    assert record.meta["partial_reasons"][0].startswith("the run stopped before its end")
    assert not (repo / "k.ttr.journal").exists()

    # The same journal with its last entry torn (the process killed mid-write): that
    # test is dropped, the others stay.
    torn = repo / "torn.journal"
    torn.mkdir()
    (torn / "1.ttj").write_bytes(kept[: kept.rstrip(b"\n").rfind(b"\n") + 40])
    done = finalize(repo, env, "torn.journal", "-o", "torn.ttr")
    assert done.returncode == 0, done.stderr
    record = storage.read(repo / "torn.ttr")
    assert sorted(t.nodeid for t in record.tests) == sorted(FINISHED[:2])
    assert "its last entry was torn (dropped)" in record.meta["partial_reasons"]

    # An entry damaged in the middle ends the reading there: what follows is dropped,
    # and the record says so.
    lines = kept.split(b"\n")
    second_test = 3  # magic, start, first test, second test
    lines[second_test] = lines[second_test].replace(b"aten::", b"aten:;", 1)
    damaged = repo / "damaged.journal"
    damaged.mkdir()
    (damaged / "1.ttj").write_bytes(b"\n".join(lines))
    done = finalize(repo, env, "damaged.journal", "-o", "damaged.ttr")
    assert done.returncode == 0, done.stderr
    record = storage.read(repo / "damaged.ttr")
    assert [t.nodeid for t in record.tests] == FINISHED[:1]
    assert any("fails its checksum" in r for r in record.meta["partial_reasons"])


def test_a_killed_xdist_run_leaves_each_workers_journal(stoppable) -> None:
    repo, env = stoppable
    done = run_until_waiting(
        repo, env, signal.SIGKILL, "-n", "2", "--torchtalk-record-to=x.ttr", FILE, group=True
    )
    assert done.returncode == -signal.SIGKILL
    journals = sorted(p.name for p in (repo / "x.ttr.journal").iterdir())
    assert len(journals) == 2 and all(name.startswith("gw") for name in journals)
    done = finalize(repo, env, "x.ttr.journal")
    assert done.returncode == 0, done.stderr
    record = storage.read(repo / "x.ttr")
    recorded = {t.nodeid for t in record.tests}
    # What finished on either worker before the kill; never the waiting test.
    assert WAITING not in recorded and recorded <= {*FINISHED, f"{FILE}::test_fifth"}
    assert all(t.complete for t in record.tests)
    assert record.meta["partial"] is True and record.meta["parts"] == 2


def test_the_record_flag_takes_no_test_path(stoppable, tmp_path: Path) -> None:
    repo, env = stoppable
    env = {**env, "TORCHTALK_CACHE_DIR": str(tmp_path / "cache")}
    target = repo / "tests" / "test_shift.py"
    before = target.read_bytes()
    done = run_pytest(repo, "--torchtalk-record", "tests/test_shift.py", env=env)
    assert target.read_bytes() == before  # the test file is a test file, not the record
    assert "4 passed" in done.stdout  # the file given, not the whole suite
    assert "recorded 4 tests to " in done.stdout


def test_record_paths_that_cannot_take_a_record_are_refused_before_tests_run(
    stoppable,
) -> None:
    repo, env = stoppable
    target = repo / "tests" / "test_shift.py"
    before = target.read_bytes()
    for path, problem in (
        ("tests", f"the record path {repo / 'tests'} is a directory"),
        ("tests/test_shift.py", "exists and is not a TorchTalk record: not overwriting it"),
    ):
        done = run_pytest(
            repo, f"--torchtalk-record-to={path}", FILE, env=env, check_codes=(4,)
        )  # fmt: skip
        assert "torchtalk: " in done.stderr and problem in done.stderr, done.stderr
        assert "passed" not in done.stdout
    assert target.read_bytes() == before


def a_part(nodeid: str, **meta: object) -> Record:
    record = Record(meta={"commit": "c" * 40, "created_at": "2026-12-07T00:00:00+00:00", **meta})
    segment = record.add_segment("test", nodeid)
    record.segments[segment].names = {record.name_id("op", "aten::mm")}
    record.tests.append(RecordedTest(nodeid, "tests/test_a.py", "passed", 0.1, [segment]))
    return record


def test_a_merge_is_partial_when_any_part_is() -> None:
    stopped = a_part("tests/test_a.py::one", partial=True, partial_reasons=["interrupted: SIGTERM"])
    whole = a_part("tests/test_a.py::two", partial=False, partial_reasons=[])
    for parts in ([stopped, whole], [whole, stopped]):
        merged = merge(parts)
        assert merged.meta["partial"] is True
        assert merged.meta["partial_reasons"] == ["interrupted: SIGTERM"]


def test_records_of_one_commit_with_different_uncommitted_files_are_not_merged() -> None:
    clean = a_part("tests/test_a.py::one", dirty={})
    edited = a_part("tests/test_a.py::two", dirty={"pkg/mod.py": "0" * 24})
    with pytest.raises(RecordError, match="different tree states"):
        merge([clean, edited])
    mixed = merge([clean, edited], allow_mixed_commits=True)
    assert mixed.meta["commit"] is None and "dirty" not in mixed.meta
    assert merge([edited, a_part("tests/test_a.py::three", dirty=dict(edited.meta["dirty"]))])


def test_a_run_cut_short_is_completed_by_recording_only_what_it_lacks(stoppable) -> None:
    repo, env = stoppable
    cut = run_until_waiting(repo, env, signal.SIGTERM, "--torchtalk-record-to=cut.ttr", FILE)
    assert cut.returncode == 2, cut.stdout + cut.stderr
    rest = run_pytest(
        repo, "--torchtalk-record-to=rest.ttr", "--torchtalk-record-missing=cut.ttr", FILE, env=env
    )  # fmt: skip
    assert "torchtalk: 3 tests already recorded in " in rest.stdout, rest.stdout
    assert "2 passed, 3 deselected" in rest.stdout
    assert {t.nodeid for t in storage.read(repo / "rest.ttr").tests} == {
        WAITING,
        f"{FILE}::test_fifth",
    }
    merged = subprocess.run(
        [sys.executable, "-m", "pytest_torchtalk", "record", "merge", "cut.ttr", "rest.ttr",
         "-o", "all.ttr"],
        cwd=repo, env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    record = storage.read(repo / "all.ttr")
    tests = {t.nodeid: t for t in record.tests}
    assert len(tests) == 5 and all(t.complete for t in tests.values())
    # The stopped run's 'error' was the stop, not the test: the whole run's outcome counts.
    assert tests[WAITING].outcome == "passed"
    assert "aten::atan2" in ops(record, WAITING)


def test_recording_what_a_record_lacks_is_refused_where_it_would_mislead(stoppable) -> None:
    repo, env = stoppable
    storage.write(a_part(f"{FILE}::test_first"), repo / "elsewhere.ttr")  # commit cccc...
    for args, problem in (
        (["--torchtalk-record-missing=elsewhere.ttr"], "needs --torchtalk-record"),
        (
            ["--torchtalk-record-to=elsewhere.ttr", "--torchtalk-record-missing=elsewhere.ttr"],
            "is the record this run writes",
        ),
        (
            ["--torchtalk-record-to=new.ttr", "--torchtalk-record-missing=elsewhere.ttr"],
            "was recorded at cccccccccccc, this tree is at ",
        ),
        (
            ["--torchtalk-record-to=new.ttr", f"--torchtalk-record-missing={FILE}"],
            "tests/test_stop.py",
        ),
    ):
        done = run_pytest(repo, *args, FILE, env=env, check_codes=(4,))
        assert "torchtalk: " in done.stderr and problem in done.stderr, done.stderr
        assert "passed" not in done.stdout
        assert not (repo / "new.ttr").exists() and not (repo / "new.ttr.journal").exists()


def test_a_test_is_recorded_when_any_of_its_runs_saw_all_of_its_work() -> None:
    nodeid = "tests/test_a.py::one"

    def run(outcome: str, unrecorded: str = "") -> Record:
        part = a_part(nodeid)
        part.tests[0].outcome, part.tests[0].unrecorded = outcome, unrecorded
        return part

    stopped = run("error", "interrupted: SIGTERM")
    unfollowed = run("failed", "a child process was not followed: 1 of 1 started (sh)")
    for parts, outcome, unrecorded in (
        ([stopped, run("passed")], "passed", ""),  # the stop is not the test's outcome
        ([unfollowed, run("passed")], "failed", ""),  # a real failure stays the worse
        (
            [stopped, unfollowed],
            "failed",
            "a child process was not followed: 1 of 1 started (sh); interrupted: SIGTERM",
        ),
    ):
        for ordered in (parts, parts[::-1]):
            (test,) = merge(ordered).tests
            assert (test.outcome, test.unrecorded) == (outcome, unrecorded)


def test_xdist_workers_completing_a_record_take_the_tree_from_the_controller(
    stoppable, tmp_path: Path
) -> None:
    # Each worker checked BASE against the tree with git of its own: on a tree of
    # PyTorch's size that is seconds per worker. The controller reads the tree once.
    repo, env = stoppable
    run_pytest(repo, "--torchtalk-record-to=whole.ttr", FILE, env=env)
    wrapper, log = tmp_path / "bin", tmp_path / "git-callers"
    wrapper.mkdir()
    real = shutil.which("git")
    (wrapper / "git").write_text(f'#!/bin/sh\necho "$PPID" >> {log}\nexec {real} "$@"\n')
    (wrapper / "git").chmod(0o755)
    path = f"{wrapper}{os.pathsep}{os.environ['PATH']}"
    done = run_pytest(
        repo, "-n", "2", "--torchtalk-record-to=again.ttr", "--torchtalk-record-missing=whole.ttr",
        FILE, env={**env, "PATH": path}, check_codes=(0, 5),
    )  # fmt: skip
    assert "recorded 0 tests" in done.stdout and "no tests ran" in done.stdout, done.stdout
    callers = set(log.read_text().split())
    assert len(callers) == 1, f"git ran in {len(callers)} processes"
