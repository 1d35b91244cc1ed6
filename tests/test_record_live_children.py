"""Recording what a test runs in a worker process that outlives it.

The workerext fixture's tests run each op only in a long-lived worker: a spawn pool made
at module import, a fork pool made by a session fixture, a DataLoader with
persistent_workers=True. When the recording closes a test's stretch it asks each live
child to report it (docs/recording.md#child-processes): each test is recorded with its
own op, and a change to one op's kernel selects exactly the tests that ran it. A worker
that does not answer (stopped), or whose Python is no longer observed (its task replaced
the profile function), leaves its test unrecorded, saying why. Everything runs
for real: the op library and the recorder are compiled, pytest records in a child
process, the selection reads the index built from the sources.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from indexer.record import storage
from indexer.record.children import NOT_FOLLOWED
from indexer.record.model import Record
from indexer.select.matching import ItemMatcher
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from tests.helpers import FIXTURES, commit_all, environment, git
from tests.record_support import build_fixture_library, libraries, run_pytest

pytestmark = pytest.mark.xdist_group("recorded-runs")
OPS = {
    "tests/test_pool.py": {"test_alpha": "alpha", "test_beta": "beta", "test_gamma": "gamma"},
    "tests/test_fork_pool.py": {"test_alpha": "alpha", "test_beta": "beta", "test_gamma": "gamma"},
    "tests/test_loader.py": {"test_loader_beta": "beta", "test_loader_delta": "delta"},
    "tests/test_stopped.py": {"test_answers_again": "alpha"},
}
STOPPED = ("tests/test_stopped.py", "test_stops_answering")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    """(repo, env, record): the workerext repo, indexed, recorded once."""
    base = tmp_path_factory.mktemp("live-children")
    library = build_fixture_library(libraries(tmp_path_factory), "workerext")
    repo = base / "workerext"
    shutil.copytree(FIXTURES / "workerext", repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "workerext fixture")
    git(repo, "tag", "recorded")
    env = {
        "WORKEREXT_LIBRARY": str(library),
        "PYTHONPATH": str(repo),
        "TORCHTALK_CACHE_DIR": str(base / "cache"),
        "TORCHTALK_CONFIG_DIR": str(base / "config"),
        "TORCHTALK_CHILD_REPORT_TIMEOUT": "3",  # a loaded machine: never the workers' fault
    }
    with environment(env):
        from indexer.build import build_index

        build_index(Workspace.resolve(repo), show_progress=False)
        run_pytest(repo, "--torchtalk-record", "-p", "no:randomly", env=env)
        from indexer.query.recorded import record_path_for

        record = storage.read(record_path_for(Workspace.resolve(repo).db_path))
        yield repo, env, record


def recorded_test(record: Record, file: str, name: str):
    return next(t for t in record.tests if t.nodeid == f"{file}::{name}")


def executed(record: Record, file: str, name: str) -> set[tuple[str, str]]:
    return {record.names[n] for n in record.names_of(recorded_test(record, file, name))}


CASES = [(file, name, op) for file, tests in OPS.items() for name, op in tests.items()]


@pytest.mark.parametrize(("file", "name", "op"), CASES)
def test_each_test_is_recorded_with_what_its_worker_ran(recorded, file, name, op) -> None:
    _, _, record = recorded
    test = recorded_test(record, file, name)
    assert test.outcome == "passed" and not test.unrecorded, test.unrecorded
    ran = executed(record, file, name)
    ops = {text for kind, text in ran if kind == "op" and text.startswith("workerext::")}
    # The parent never runs an op of workerext: only the worker, and only the test's own.
    # The stopped worker's report of the previous stretch (gamma) came late: it is taken
    # into the stretch that read it (more, never less).
    late = {"workerext::gamma"} if file == STOPPED[0] else set()
    assert f"workerext::{op}" in ops and ops <= {f"workerext::{op}"} | late, ops
    if "loader" not in file:
        assert ("function", f"workerext/tasks.py:run_{op}") in ran


def test_a_worker_that_does_not_answer_leaves_its_test_unrecorded(recorded) -> None:
    _, _, record = recorded
    test = recorded_test(record, *STOPPED)
    assert test.outcome == "passed"
    assert test.unrecorded.startswith(NOT_FOLLOWED), test.unrecorded
    assert "did not report this stretch within 3 s" in test.unrecorded
    assert not test.complete


@pytest.mark.parametrize(
    "name", ["test_worker_replaces_its_profile_function", "test_after_the_worker_replaced_it"]
)
def test_a_live_worker_that_replaces_its_profile_function_is_unrecorded(recorded, name) -> None:
    # Its report thread sees only its own profile function: the replacement is noticed
    # where it is made, and every later stretch of that worker is unrecorded too.
    _, _, record = recorded
    test = recorded_test(record, "tests/test_profile.py", name)
    assert test.outcome == "passed"
    assert "replaced its profile function (sys.setprofile)" in test.unrecorded, test.unrecorded


def kept(repo: Path) -> dict[tuple[str, str], str]:
    selection = select_changes(Workspace.resolve(repo), None)
    assert not selection.run_everything, selection.everything
    matcher = ItemMatcher(selection)
    out = {}
    for file, tests in OPS.items():
        for name in [*tests, STOPPED[1]] if file == STOPPED[0] else tests:
            verdict = matcher.verdict(file, [name])
            if verdict.keep:
                out[(file, name)] = verdict.decided_by
    return out


@pytest.fixture
def repo(recorded, monkeypatch: pytest.MonkeyPatch):
    path, env, _ = recorded
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield path
    git(path, "checkout", "-q", "-f", "main")
    git(path, "reset", "-q", "--hard", "recorded")


@pytest.mark.parametrize("op", ["alpha", "delta"])
def test_a_change_to_one_op_selects_exactly_the_tests_whose_worker_ran_it(repo, op) -> None:
    ops = repo / "csrc" / "ops.cpp"
    body = {"alpha": "return x.cos();", "delta": "return x.abs();"}[op]
    ops.write_text(ops.read_text().replace(body, body.replace(";", " * 1;")))
    selected = kept(repo)
    by_record = {key for key, how in selected.items() if how == "record"}
    assert by_record == {(f, n) for f, tests in OPS.items() for n, o in tests.items() if o == op}
    assert selected.get(STOPPED) != "record"  # unrecorded: never decided by the record
