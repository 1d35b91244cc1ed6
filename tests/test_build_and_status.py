"""`torchtalk index build` and `status`: the database, atomic replacement, the build lock."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer.build import build_lock
from indexer.query.index import Index
from indexer.select import hub
from indexer.workspace import Workspace
from pytest_torchtalk.cli import main


def status_json(source: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    code = main(["status", "--source", str(source), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == (0 if report["index"] else 1)
    return report


def test_build_creates_database_and_status_reports_it(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = status_json(minitorch_repo, capsys)
    assert before["index"] is None
    assert main(["index", "build", "--source", str(minitorch_repo), "--quiet"]) == 0
    report = status_json(minitorch_repo, capsys)
    index = report["index"]
    assert Path(index["db_path"]).is_file()
    assert report["harness"] == "pytorch"
    assert report["harness_chosen_by"] == ".torchtalk.toml"
    assert index["git_commit"] and len(index["git_commit"]) == 40
    assert index["files"] > 20
    assert index["counts"]["nodes"]["file"] == index["files"]
    assert index["age_seconds"] is not None and index["age_seconds"] < 600
    # Every stored path is relative to the source root.
    paths = [row[0] for row in Index(Path(index["db_path"])).file_rows()]
    assert "aten/src/ATen/native/native_functions.yaml" in paths
    assert not any(p.startswith("/") or str(minitorch_repo) in p for p in paths)


def test_build_keeps_the_hubs_walk_for_selections(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A built index answers central changes at once: the walk from the package every
    test imports is made and kept by the build, not by the first selection."""
    assert main(["index", "build", "--source", str(minitorch_repo), "--quiet"]) == 0
    assert "prepared for test selection" in capsys.readouterr().out
    index = Index(Workspace.resolve(minitorch_repo).db_path)
    try:
        kept = hub.load(index)
        assert kept is not None and index.node(kept.hub).qualname == "minitorch"
        assert kept.size > 20
    finally:
        index.close()


def test_a_build_that_cannot_be_prepared_still_succeeds(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preparing for selections is an extra: when it fails (here a disk error), the index
    stands, the build says so in one line, and selections walk the hub themselves."""
    from indexer.select import derived

    def disk_error(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(derived, "prepare", disk_error)
    assert main(["index", "build", "--source", str(minitorch_repo), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "not prepared for test selection" in err and "No space left" in err
    assert Workspace.resolve(minitorch_repo).db_path.is_file()


def test_a_second_build_is_a_no_op_an_edit_an_update_and_force_a_build(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = ["index", "build", "--source", str(minitorch_repo), "-q"]
    assert main(build) == 0
    assert capsys.readouterr().out.startswith("built (no index yet): ")
    db_path = Workspace.resolve(minitorch_repo).db_path
    built = db_path.stat().st_mtime_ns
    started = time.perf_counter()
    assert main(build) == 0
    out = capsys.readouterr().out
    assert time.perf_counter() - started < 5
    assert "is up to date: nothing to do" in out and "--force builds it again" in out
    assert "prepared" not in out  # the kept walk is this index's still
    assert db_path.stat().st_mtime_ns == built
    (minitorch_repo / "test" / "test_added.py").write_text("def test_new():\n    pass\n")
    assert main(build) == 0
    out = capsys.readouterr().out
    assert out.startswith("updated incrementally: 0 modified, 1 added, 0 removed since the index")
    assert "prepared for test selection" in out
    assert main([*build, "--force"]) == 0
    assert capsys.readouterr().out.startswith("built (--force): ")


def test_an_index_of_other_extraction_code_is_built_again(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    db_path = Workspace.resolve(minitorch_repo).db_path
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE meta SET value = 'older' WHERE key = 'extraction_code'")
    capsys.readouterr()
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("built (it was built by another version of TorchTalk's indexer): ")


def test_pytorch_source_is_an_alias(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", "build", "--pytorch-source", str(minitorch_repo), "-q"]) == 0
    assert status_json(minitorch_repo, capsys)["index"] is not None


def test_init_sets_default_source(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--source", str(minitorch_repo), "--harness", "torch-extension"]) == 0
    # The tree's own .torchtalk.toml outranks a configured harness, and init says so.
    assert "is used instead" in capsys.readouterr().err
    assert main(["index", "build", "-q"]) == 0
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"] == str(minitorch_repo.resolve())
    assert (report["harness"], report["harness_chosen_by"]) == ("pytorch", ".torchtalk.toml")
    (minitorch_repo / ".torchtalk.toml").unlink()
    assert main(["status", "--json"]) == 1  # no index for this harness yet
    report = json.loads(capsys.readouterr().out)
    assert report["index"] is None
    assert (report["harness"], report["harness_chosen_by"]) == (
        "torch-extension",
        "configured default",
    )


def test_missing_source_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", "build", "--source", str(tmp_path / "absent"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err == f"torchtalk: error: source {str(tmp_path / 'absent')!r} does not exist\n"


def test_rebuild_while_a_reader_holds_the_old_database(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    db_path = Workspace.resolve(minitorch_repo).db_path
    reader = Index(db_path)
    old_files = len(reader.file_rows())
    (minitorch_repo / "test" / "test_added.py").write_text("def test_new():\n    pass\n")
    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    # The open reader still sees its consistent (old) snapshot...
    assert len(reader.file_rows()) == old_files
    reader.close()
    # ...and a new reader sees the new index.
    assert len(Index(db_path).file_rows()) == old_files + 1


def test_no_wait_fails_while_another_build_holds_the_lock(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_path = Workspace.resolve(minitorch_repo).db_path
    with build_lock(db_path.parent):
        code = main(["index", "build", "--source", str(minitorch_repo), "--no-wait", "-q"])
    assert code == 1
    assert "another build" in capsys.readouterr().err


def test_killed_build_leaves_the_old_index_usable(tmp_path: Path) -> None:
    source = tmp_path / "big"
    tests = source / "tests"
    tests.mkdir(parents=True)
    for number in range(6000):
        (tests / f"test_{number}.py").write_text(
            f"def test_{number}():\n    assert {number} >= 0\n"
        )
    env = dict(os.environ)
    build = [
        sys.executable,
        "-m",
        "pytest_torchtalk",
        "index",
        "build",
        "--source",
        str(source),
        "-q",
        "-j",
        "1",
        "--force",  # each run builds the whole index again
    ]
    subprocess.run(build, check=True, env=env, capture_output=True)
    db_path = Workspace.resolve(source).db_path
    first_mtime = db_path.stat().st_mtime_ns
    with sqlite3.connect(db_path) as conn:
        first_files = conn.execute("SELECT COUNT(*) FROM files").fetchone()[0]

    process = subprocess.Popen(build, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(db_path.parent.glob("*.building-*")):
        assert process.poll() is None, "the build finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()

    assert db_path.stat().st_mtime_ns == first_mtime
    index = Index(db_path)
    assert len(index.file_rows()) == first_files == 6000
    # The next build clears the dead build's partial file and completes.
    subprocess.run(build, check=True, env=env, capture_output=True)
    assert not list(db_path.parent.glob("*.building-*"))


def test_commands_default_to_the_git_repository_of_the_current_directory(
    minitorch_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(minitorch_repo / "aten" / "src")
    assert main(["index", "build", "-q"]) == 0
    report = status_json(minitorch_repo, capsys)
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    from_cwd = json.loads(capsys.readouterr().out)
    assert from_cwd["source"] == report["source"] == str(minitorch_repo.resolve())
    assert from_cwd["source_from"] == "the git repository of the current directory"
    assert from_cwd["index"]["db_path"] == report["index"]["db_path"]
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert main(["status"]) == 2
    assert capsys.readouterr().err.startswith(
        "torchtalk: error: no source tree: the current directory is in no git repository"
    )


def test_status_piped_to_head_ends_quietly(minitorch_repo: Path) -> None:
    status = [sys.executable, "-m", "pytest_torchtalk", "status", "--source", str(minitorch_repo)]
    piped = subprocess.run(
        f"{' '.join(status)} | head -n1", shell=True, capture_output=True, text=True
    )
    assert piped.returncode == 0 and piped.stdout.startswith("source:")
    assert piped.stderr == ""
    # The reader gone before the first write: the command ends by SIGPIPE, as git's does.
    process = subprocess.Popen(status, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait() == -signal.SIGPIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err
