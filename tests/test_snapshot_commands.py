"""`torchtalk snapshot save|load|list|delete|diff|export|import` and `index update --since`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from indexer.locations import cache_dir
from indexer.store.db import SCHEMA_VERSION
from indexer.workspace import Workspace
from pytest_torchtalk.cli import main
from tests.helpers import commit_all, git


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def meta_of(db: Path) -> dict[str, str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT key, value FROM meta"))


@pytest.fixture
def built(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert run(capsys, "index", "build", "--source", str(minitorch_repo), "-q")[0] == 0
    return minitorch_repo


def test_save_list_delete(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = ("--source", str(built))
    code, out, _ = run(capsys, "snapshot", "save", "main/abc1234/v1", *src)
    assert code == 0 and "saved snapshot main/abc1234/v1" in out
    assert (cache_dir() / "snapshots" / "main" / "abc1234" / "v1" / "index.sqlite").is_file()
    assert run(capsys, "snapshot", "save", "nightly", *src)[0] == 0

    code, out, _ = run(capsys, "snapshot", "list", "--json")
    listed = {item["name"]: item for item in json.loads(out)}
    assert set(listed) == {"main/abc1234/v1", "nightly"}
    info = listed["nightly"]
    head = git(built, "rev-parse", "HEAD").strip()
    assert info["git_commit"] == head[:12] and info["git_commit_full"] == head
    assert info["harness"] == "pytorch" and info["schema_version"] == SCHEMA_VERSION
    assert len(info["content_fingerprint"]) == 40 and len(info["source_fingerprint"]) == 32
    assert info["counts"]["files"] > 20 and info["created_at"]
    code, out, _ = run(capsys, "snapshot", "list")
    assert code == 0 and "main/abc1234/v1" in out and "nightly" in out

    # A name cannot nest inside a snapshot, nor be a group of snapshots.
    code, _, err = run(capsys, "snapshot", "save", "nightly/x", *src)
    assert code == 2 and "would nest inside snapshot 'nightly'" in err
    code, _, err = run(capsys, "snapshot", "save", "main/abc1234", *src)
    assert code == 2 and "is a group of snapshots" in err

    assert run(capsys, "snapshot", "delete", "main/abc1234/v1")[0] == 0
    assert not (cache_dir() / "snapshots" / "main").exists()  # empty groups go too
    code, _, err = run(capsys, "snapshot", "delete", "main/abc1234/v1")
    assert code == 1 and err.startswith("torchtalk: error: no snapshot named 'main/abc1234/v1'")
    code, out, _ = run(capsys, "snapshot", "list", "--json")
    assert [item["name"] for item in json.loads(out)] == ["nightly"]


@pytest.mark.parametrize(
    "name",
    ["a/b/c/d", "../x", "a/../b", "a//b", "/abs", "a b", "x;rm", "a/.hidden", "", "a\\b", "é"],
)
def test_bad_names_are_refused(built: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, _, err = run(capsys, "snapshot", "save", name, "--source", str(built))
    assert code == 2
    assert err.startswith("torchtalk: error: snapshot name") and err.count("\n") == 1
    assert not (cache_dir() / "snapshots").exists() or not any(
        p for p in (cache_dir() / "snapshots").rglob("index.sqlite")
    )


def test_save_refuses_a_stale_index_unless_forced(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (built / "minitorch" / "extra.py").write_text("def extra():\n    return 1\n")
    code, _, err = run(capsys, "snapshot", "save", "s", "--source", str(built))
    assert code == 1 and "is stale" in err and "index update" in err
    code, _, err = run(capsys, "snapshot", "save", "s", "--source", str(built), "--force")
    assert code == 0 and "no content fingerprint" in err
    code, out, _ = run(capsys, "snapshot", "list", "--json")
    assert json.loads(out)[0]["content_fingerprint"] is None


def test_save_without_an_index_is_an_error(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "snapshot", "save", "s", "--source", str(minitorch_repo))
    assert code == 1 and "no index" in err and "index build" in err


def test_load_by_name_checks_content_or_path(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = ("--source", str(built))
    assert run(capsys, "snapshot", "save", "base", *src)[0] == 0
    db = Workspace.resolve(built).db_path
    db.unlink()
    code, out, _ = run(capsys, "snapshot", "load", "base", *src)
    assert code == 0 and "same content" in out and db.is_file()
    assert meta_of(db)["loaded_snapshot"] == "base"

    # Same checkout, new commit: accepted by path, with a hint to update.
    (built / "minitorch" / "extra.py").write_text("def extra():\n    return 1\n")
    commit_all(built, "extra")
    code, out, err = run(capsys, "snapshot", "load", "base", *src)
    assert code == 0 and "same checkout path" in out and "index update" in err

    # Another checkout of other code: refused, unless forced.
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(built), str(other))
    (other / "minitorch" / "more.py").write_text("X = 1\n")
    commit_all(other, "more")
    code, _, err = run(capsys, "snapshot", "load", "base", "--source", str(other))
    assert code == 1 and "matches neither" in err and "--force" in err
    assert not Workspace.resolve(other).db_path.exists()
    code, _, err = run(capsys, "snapshot", "load", "base", "--source", str(other), "--force")
    assert code == 0 and err.startswith("warning: snapshot 'base' matches neither")
    assert meta_of(Workspace.resolve(other).db_path)["source_path"] == str(other.resolve())


def test_load_refuses_another_harness(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "snapshot", "save", "base", "--source", str(built))[0] == 0
    code, _, err = run(
        capsys, "snapshot", "load", "base", "--source", str(built), "--harness", "torch-extension"
    )
    assert code == 1 and "is of harness 'pytorch'" in err
    code, _, err = run(capsys, "snapshot", "load", "--source", str(built))
    assert code == 2 and "NAME or --nearest" in err


def test_diff_json(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = ("--source", str(built))
    assert run(capsys, "snapshot", "save", "before", *src)[0] == 0
    (built / "test" / "test_unrelated.py").unlink()
    (built / "test" / "test_new.py").write_text("def test_new():\n    assert True\n")
    native = built / "aten" / "src" / "ATen" / "native" / "native_functions.yaml"
    native.write_text(
        native.read_text() + "\n- func: brand_new(Tensor self) -> Tensor\n  variants: function\n"
    )
    assert run(capsys, "index", "update", *src, "-q")[0] == 0
    assert run(capsys, "snapshot", "save", "after", *src)[0] == 0
    code, out, _ = run(capsys, "snapshot", "diff", "before", "after", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["files_added"] == ["test/test_new.py"]
    assert report["files_removed"] == ["test/test_unrelated.py"]
    assert report["files_modified"] == ["aten/src/ATen/native/native_functions.yaml"]
    assert report["nodes"]["added"].get("file") == 1
    assert report["nodes"]["removed"].get("file") == 1
    assert report["changed"] is True
    op_nodes = sum(
        json.loads(meta_of(Workspace.resolve(built).db_path)["counts"])["nodes"].values()
    )
    if op_nodes and report["nodes"]["added"].get("op") is not None:
        assert report["nodes"]["added"]["op"] >= 1
    code, out, _ = run(capsys, "snapshot", "diff", "after", "after", "--json")
    same = json.loads(out)
    assert not same["changed"] and same["nodes"] == {"added": {}, "removed": {}}
    code, out, _ = run(capsys, "snapshot", "diff", "before", "after")
    assert code == 0 and "+ test/test_new.py" in out and "- test/test_unrelated.py" in out
    code, _, err = run(capsys, "snapshot", "diff", "before", "nope")
    assert code == 1 and "no snapshot named 'nope'" in err


def test_export_import_roundtrip(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "snapshot", "save", "main/v1", "--source", str(built))[0] == 0
    archive = tmp_path / "out" / "snap.tar.gz"
    code, out, _ = run(capsys, "snapshot", "export", "main/v1", "-o", str(archive))
    assert code == 0 and archive.is_file() and str(archive) in out
    assert not list(archive.parent.glob(".*tmp*"))
    code, _, err = run(capsys, "snapshot", "import", str(archive))
    assert code == 2 and "exists" in err  # same name, no --force
    code, out, _ = run(capsys, "snapshot", "import", str(archive), "--name", "ci/copy")
    assert code == 0 and "imported snapshot ci/copy" in out
    code, out, _ = run(capsys, "snapshot", "diff", "main/v1", "ci/copy", "--json")
    assert json.loads(out)["changed"] is False
    assert run(capsys, "snapshot", "import", str(archive), "--force")[0] == 0
    # Default output name, in the current directory.
    code, out, _ = run(capsys, "snapshot", "export", "ci/copy", "-o", str(tmp_path))
    assert code == 0 and (tmp_path / "torchtalk-snapshot-ci_copy.tar.gz").is_file()


def test_update_since_snapshot(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = ("--source", str(built))
    assert run(capsys, "snapshot", "save", "nightly", *src)[0] == 0
    db = Workspace.resolve(built).db_path
    db.unlink()  # a fresh CI machine: only the snapshot
    (built / "minitorch" / "extra.py").write_text("def extra():\n    return 1\n")
    commit_all(built, "extra")
    code, out, _ = run(capsys, "index", "update", "--since", "nightly", *src, "--json")
    assert code == 0
    result = json.loads(out)
    assert result["added"] == ["minitorch/extra.py"] and result["base"] == "snapshot nightly"
    assert not result["full_build"]
    meta = meta_of(db)
    assert meta["git_commit"] == git(built, "rev-parse", "HEAD").strip()
    assert json.loads(meta["updated_from"])["base"] == "snapshot nightly"
    code, out, _ = run(capsys, "index", "update", *src)
    assert code == 0 and "up to date" in out
    code, _, err = run(capsys, "index", "update", "--since", "missing", *src)
    assert code == 1 and "no snapshot named 'missing'" in err


def test_update_without_index_builds(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "index", "update", "--source", str(minitorch_repo), "-q")
    assert code == 0 and "full build (no index yet)" in out
    assert Workspace.resolve(minitorch_repo).db_path.is_file()
