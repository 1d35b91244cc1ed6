"""`snapshot load --nearest` tiers, and loading a snapshot into another checkout (relocation)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.workspace import Workspace
from pytest_torchtalk.cli import main
from tests.helpers import commit_all, git
from tests.test_update_equals_rebuild import assert_same_graph


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def build_and_save(repo: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "index", "update", "--source", str(repo), "-q")[0] == 0
    code, _, err = run(capsys, "snapshot", "save", name, "--source", str(repo))
    assert code == 0, err


def loaded(repo: Path) -> str:
    db = Workspace.resolve(repo).db_path
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT key, value FROM meta"))["loaded_snapshot"]


def test_nearest_tiers(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = minitorch_repo
    src = ("--source", str(repo))
    build_and_save(repo, "c0", capsys)
    (repo / "minitorch" / "one.py").write_text("ONE = 1\n")
    commit_all(repo, "one")
    build_and_save(repo, "c1", capsys)
    # A snapshot of the same commit with uncommitted changes: same commit, other content.
    (repo / "minitorch" / "dirty.py").write_text("DIRTY = 1\n")
    build_and_save(repo, "c1-dirty", capsys)
    (repo / "minitorch" / "dirty.py").unlink()
    # A branch the current line of history does not contain.
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "minitorch" / "side.py").write_text("SIDE = 1\n")
    commit_all(repo, "side")
    build_and_save(repo, "side", capsys)
    git(repo, "checkout", "-q", "main")

    # Tier 1: exact content (c1 and the tree agree; c1-dirty has the same commit but not content).
    code, out, _ = run(capsys, "snapshot", "load", "--nearest", *src)
    assert code == 0 and "nearest snapshot: c1, by exact content match" in out
    assert loaded(repo) == "c1"

    # Tier 2: same commit, different content; the newest of that commit wins.
    (repo / "minitorch" / "wip.py").write_text("WIP = 1\n")
    code, out, err = run(capsys, "snapshot", "load", "--nearest", *src)
    assert code == 0 and "nearest snapshot: c1-dirty, by exact commit match" in out
    assert "index update" in err
    (repo / "minitorch" / "wip.py").unlink()

    # Tier 3: nearest ancestor (c1 is 1 commit back, c0 2; 'side' is not an ancestor).
    (repo / "minitorch" / "two.py").write_text("TWO = 2\n")
    commit_all(repo, "two")
    code, out, _ = run(capsys, "snapshot", "load", "--nearest", *src)
    assert code == 0 and "by nearest ancestor commit" in out
    assert out.startswith("nearest snapshot: c1-dirty") or out.startswith("nearest snapshot: c1,")
    assert "1 commit(s) behind" in out
    run(capsys, "snapshot", "delete", "c1")
    run(capsys, "snapshot", "delete", "c1-dirty")
    code, out, _ = run(capsys, "snapshot", "load", "--nearest", *src)
    assert code == 0 and out.startswith("nearest snapshot: c0, by nearest ancestor commit")
    assert "2 commit(s) behind" in out

    # Nothing fits: only a snapshot of a non-ancestor commit is left.
    run(capsys, "snapshot", "delete", "c0")
    code, out, err = run(capsys, "snapshot", "load", "--nearest", *src)
    assert code == 1 and out == ""
    assert err.startswith("torchtalk: error: no snapshot fits") and err.count("\n") == 1
    assert loaded(repo) == "c0"  # the index in place is untouched


def test_nearest_ignores_other_harnesses(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_and_save(minitorch_repo, "mine", capsys)
    code, _, err = run(
        capsys,
        "snapshot",
        "load",
        "--nearest",
        "--source",
        str(minitorch_repo),
        "--harness",
        "torch-extension",
    )
    assert code == 1 and "no snapshot fits" in err and "'torch-extension'" in err


def test_snapshot_relocates_to_another_checkout(
    minitorch_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build_and_save(minitorch_repo, "nightly/v1", capsys)
    archive = tmp_path / "nightly.tar.gz"
    assert run(capsys, "snapshot", "export", "nightly/v1", "-o", str(archive))[0] == 0
    original = Workspace.resolve(minitorch_repo).db_path
    kept = tmp_path / "original.sqlite"
    shutil.copyfile(original, kept)

    # A CI machine: another path, a fresh cache, the same commit.
    clone = tmp_path / "ci" / "checkout"
    git(tmp_path, "clone", "-q", str(minitorch_repo), str(clone))
    shutil.rmtree(minitorch_repo)
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(tmp_path / "ci-cache"))
    assert run(capsys, "snapshot", "import", str(archive))[0] == 0
    code, out, _ = run(capsys, "snapshot", "load", "--nearest", "--source", str(clone))
    assert code == 0 and "exact content match" in out

    db = Workspace.resolve(clone).db_path
    index = Index(db)
    assert index.meta["source_path"] == str(clone.resolve())
    assert_same_graph(db, kept, "relocation")
    # Every node's evidence resolves in the new checkout.
    for path, *_ in index.file_rows():
        assert (clone / path).is_file(), path
    nodes = [
        node
        for kind in ("cpp_function", "op", "python_function")
        for node in index.nodes_of_kind(kind)
    ]
    for node in nodes:
        lines = (clone / node.path).read_text(errors="replace").splitlines()
        word = re.match(r"~?\w+", node.name)
        assert word and word.group(0) in "\n".join(lines[node.line - 1 : node.end_line]), node
    # No rebuild needed: the update finds nothing to do.
    code, out, _ = run(capsys, "index", "update", "--source", str(clone))
    assert code == 0 and "up to date" in out
    code, out, _ = run(capsys, "status", "--source", str(clone), "--json")
    assert code == 0 and json.loads(out)["index"]["source_path"] == str(clone.resolve())
