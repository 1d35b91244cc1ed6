"""Recording what a test runs in the processes it starts, and recording only what it ran.

The childext fixture's tests run its op in a subprocess, spawn and fork pools, a fork,
torch.multiprocessing and DataLoader workers: each child's ops and Python functions are
credited to the test, or, where a child cannot be followed, the test is unrecorded (never
recorded as running only what the parent did). Also: only dispatcher ops are recorded as
ops, and a test that starts torch's profiler with Python tracing passes when recorded.
Everything runs for real: the op library and the recorder are compiled, pytest records
in a child process, the selection reads the index built from the sources.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from indexer.record import storage
from indexer.record.children import NOT_FOLLOWED
from indexer.record.model import Record
from indexer.record.observer import STOOD_ASIDE
from indexer.select.matching import ItemMatcher
from indexer.select_changes import select_changes
from indexer.workspace import Workspace
from tests.helpers import FIXTURES, commit_all, environment, git
from tests.record_support import build_fixture_library, run_pytest

pytestmark = pytest.mark.xdist_group("recorded-runs")
CHILDREN = "tests/test_children.py"
FOLLOWED = [
    "test_subprocess", "test_spawn_pool", "test_fork_pool", "test_fork",
    "test_torch_multiprocessing", "test_dataloader_workers",
]  # fmt: skip
NOT_FOLLOWABLE = {
    "test_a_shell_that_is_not_python": "(sh)",
    "test_python_without_the_start_up_hook": "(python",
    "test_a_child_without_the_environment": "(python",
}
ALL_TESTS = ["test_in_process", *FOLLOWED, *NOT_FOLLOWABLE, "test_a_labelled_region"]


def build_library(cache: Path) -> Path:
    return build_fixture_library(cache, "childext")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    """(repo, env, record): the childext repo, indexed, recorded once."""
    base = tmp_path_factory.mktemp("children")
    library = build_library(base / "lib")
    repo = base / "childext"
    shutil.copytree(FIXTURES / "childext", repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "childext fixture")
    git(repo, "tag", "recorded")
    env = {
        "CHILDEXT_LIBRARY": str(library),
        "PYTHONPATH": str(repo),
        "TORCHTALK_CACHE_DIR": str(base / "cache"),
        "TORCHTALK_CONFIG_DIR": str(base / "config"),
    }
    with environment(env):
        from indexer.build import build_index

        build_index(Workspace.resolve(repo), show_progress=False)
        run_pytest(repo, "--torchtalk-record", "-p", "no:randomly", env=env)
        from indexer.query.recorded import record_path_for

        record = storage.read(record_path_for(Workspace.resolve(repo).db_path))
        yield repo, env, record


def recorded_test(record: Record, name: str, file: str = CHILDREN):
    return next(t for t in record.tests if t.nodeid == f"{file}::{name}")


def executed(record: Record, name: str, file: str = CHILDREN) -> set[tuple[str, str]]:
    return {record.names[n] for n in record.names_of(recorded_test(record, name, file))}


@pytest.mark.parametrize("name", FOLLOWED)
def test_what_a_child_ran_is_credited_to_its_test(recorded, name: str) -> None:
    _, _, record = recorded
    test = recorded_test(record, name)
    assert test.outcome == "passed" and not test.unrecorded, test.unrecorded
    ran = executed(record, name)
    # The parent never runs the op or tasks.in_python in these tests: only a child does.
    assert ("op", "childext::work") in ran
    assert ("function", "childext/tasks.py:in_python") in ran
    assert ("function", "childext/tasks.py:run_work") in ran or name == "test_dataloader_workers"
    assert not recorded_test(record, "test_in_process").unrecorded


@pytest.mark.parametrize("name", sorted(NOT_FOLLOWABLE))
def test_a_child_that_cannot_be_followed_leaves_its_test_unrecorded(recorded, name) -> None:
    _, _, record = recorded
    test = recorded_test(record, name)
    assert test.outcome == "passed"
    assert test.unrecorded.startswith(NOT_FOLLOWED) and NOT_FOLLOWABLE[name] in test.unrecorded
    assert not test.complete


def test_only_dispatcher_ops_are_recorded_as_ops(recorded) -> None:
    # childext::labelled opens a RecordFunction of FUNCTION scope with no schema, as
    # torch.compile's "Torch-Compiled Region: 0/0" does: a label, not an op.
    _, _, record = recorded
    ops = {text for kind, text in executed(record, "test_a_labelled_region") if kind == "op"}
    assert "childext::labelled" in ops and "aten::sin" in ops
    assert not [op for op in ops if "labelled region" in op]
    assert not [text for kind, text in record.names if kind == "op" and "::" not in text]


def test_a_profiler_tracing_python_passes_and_its_test_is_unrecorded(recorded) -> None:
    _, _, record = recorded
    traced = recorded_test(record, "test_a_profiler_tracing_python", "tests/test_profiling.py")
    assert traced.outcome == "passed" and traced.unrecorded == STOOD_ASIDE
    ops_only = recorded_test(record, "test_a_profiler_of_ops_only", "tests/test_profiling.py")
    assert ops_only.outcome == "passed" and not ops_only.unrecorded
    assert ("op", "childext::work") in executed(
        record, "test_a_profiler_of_ops_only", "tests/test_profiling.py"
    )


def kept(repo: Path) -> dict[str, str]:
    selection = select_changes(Workspace.resolve(repo))
    assert not selection.run_everything, selection.everything
    matcher = ItemMatcher(selection)
    out = {}
    for name in ALL_TESTS:
        verdict = matcher.verdict(CHILDREN, [name])
        if verdict.keep:
            out[name] = verdict.decided_by
    return out


@pytest.fixture
def repo(recorded, monkeypatch: pytest.MonkeyPatch):
    path, env, _ = recorded
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield path
    git(path, "checkout", "-q", "-f", "main")
    git(path, "reset", "-q", "--hard", "recorded")


def test_a_change_to_the_op_a_child_ran_selects_the_test(repo: Path) -> None:
    ops = repo / "csrc" / "ops.cpp"
    ops.write_text(ops.read_text().replace("return x.cos();", "return x.cos() * 1.0;"))
    selected = kept(repo)
    for name in ["test_in_process", *FOLLOWED]:
        assert selected.get(name) == "record", (name, selected)
    for name in NOT_FOLLOWABLE:  # unrecorded: the static walk decides them
        assert selected.get(name) in (None, "static"), (name, selected)
        assert selected.get(name) != "record"
    assert "test_a_labelled_region" not in selected


def test_a_change_to_python_only_a_child_ran_selects_the_test(repo: Path) -> None:
    tasks = repo / "childext" / "tasks.py"
    tasks.write_text(tasks.read_text().replace("return n + 1", "return n + 1 + 0"))
    selected = kept(repo)
    for name in ["test_in_process", *FOLLOWED]:
        assert selected.get(name) == "record", (name, selected)


def test_children_of_xdist_workers_are_followed(recorded) -> None:
    # Each worker records its own tests, and follows their children, on its own.
    repo, env, _ = recorded
    run_pytest(
        repo, "-n", "2", "tests/test_children.py", "-k", "subprocess or fork or shell or dataloader",
        "--torchtalk-record-to=xdist.ttr", "-p", "no:randomly", env=env,
    )  # fmt: skip
    record = storage.read(repo / "xdist.ttr")
    assert {t.nodeid.split("::")[1] for t in record.tests} == {
        "test_subprocess", "test_fork_pool", "test_fork", "test_dataloader_workers",
        "test_a_shell_that_is_not_python",
    }  # fmt: skip
    for test in record.tests:
        ran = {record.names[n] for n in record.names_of(test)}
        if test.nodeid.endswith("test_a_shell_that_is_not_python"):
            assert test.unrecorded.startswith(NOT_FOLLOWED)
        else:
            assert not test.unrecorded and ("op", "childext::work") in ran, test.nodeid


def test_recording_keeps_no_object_of_a_test_alive(recorded) -> None:
    # The profile function is handed a bound method (holding its object) for each C
    # method call; a record keeps what names it, never the method.
    _, _, record = recorded
    test = recorded_test(
        record, "test_an_object_whose_c_method_ran_is_freed", "tests/test_lifetimes.py"
    )
    assert test.outcome == "passed"


def test_hooks_left_by_killed_recordings_are_removed(tmp_path: Path) -> None:
    """A recording killed before its end (SIGKILL, an OOM kill) leaves its start-up hook
    in site-packages; the next recording removes those whose process is gone, and leaves
    a running one's alone."""
    from indexer.record.children import remove_stale_hooks

    gone = tmp_path / "torchtalk-record-children-999999999.pth"  # above any pid_max
    running = tmp_path / f"torchtalk-record-children-{os.getpid()}.pth"
    other = tmp_path / "someone-elses.pth"
    for hook in (gone, running, other):
        hook.write_text("import os\n")
    assert remove_stale_hooks(tmp_path) == [gone]
    assert not gone.exists() and running.exists() and other.exists()
