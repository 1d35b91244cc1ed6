"""`torchtalk index update`: atomic replacement, the build lock, fallbacks to a full build."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from indexer import update as update_module
from indexer.build import build_lock
from indexer.query.index import Index
from indexer.update import update_index
from indexer.workspace import Workspace
from pytest_torchtalk.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def built(minitorch_repo: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert run(capsys, "index", "build", "--source", str(minitorch_repo), "-q")[0] == 0
    return minitorch_repo


def test_update_reports_what_it_did(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (built / "test" / "test_unrelated.py").unlink()
    (built / "test" / "test_more.py").write_text("def test_more():\n    assert 1\n")
    functional = built / "minitorch" / "functional.py"
    functional.write_text(functional.read_text() + "\n\ndef extra():\n    return 1\n")
    code, out, _ = run(capsys, "index", "update", "--source", str(built), "--json")
    assert code == 0
    result = json.loads(out)
    assert result["added"] == ["test/test_more.py"]
    assert result["removed"] == ["test/test_unrelated.py"]
    assert result["modified"] == ["minitorch/functional.py"]
    assert not result["full_build"] and not result["up_to_date"]
    code, out, _ = run(capsys, "index", "update", "--source", str(built))
    assert code == 0 and out.startswith("index is up to date")
    index = Index(Workspace.resolve(built).db_path)
    paths = {row[0] for row in index.file_rows()}
    assert "test/test_more.py" in paths and "test/test_unrelated.py" not in paths
    assert json.loads(index.meta["updated_from"])["added"] == 1


def test_reader_keeps_its_snapshot_during_update(built: Path) -> None:
    workspace = Workspace.resolve(built)
    reader = Index(workspace.db_path)
    before = len(reader.file_rows())
    (built / "test" / "test_more.py").write_text("def test_more():\n    assert 1\n")
    update_index(workspace, show_progress=False)
    assert len(reader.file_rows()) == before
    reader.close()
    assert len(Index(workspace.db_path).file_rows()) == before + 1
    assert not list(workspace.db_path.parent.glob("*.building-*"))


def test_no_wait_fails_while_a_build_holds_the_lock(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Workspace.resolve(built).db_path
    with build_lock(db.parent):
        code, _, err = run(capsys, "index", "update", "--source", str(built), "--no-wait")
    assert code == 1 and "another build" in err


def test_failed_update_leaves_the_index_as_it_was(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = Workspace.resolve(built)
    before = workspace.db_path.read_bytes()
    (built / "minitorch" / "extra.py").write_text("def extra():\n    return 1\n")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(update_module, "insert_file_facts", broken)
    with pytest.raises(OSError):
        update_index(workspace, show_progress=False)
    assert workspace.db_path.read_bytes() == before
    assert not list(workspace.db_path.parent.glob("*.building-*"))


def test_manifest_change_means_a_full_build(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = built / ".torchtalk.toml"
    manifest.write_text(manifest.read_text().replace('python = ["minitorch"]', 'python = ["."]'))
    code, out, _ = run(capsys, "index", "update", "--source", str(built))
    assert code == 0 and "full build (the harness manifest changed" in out


def test_corrupt_index_means_a_full_build(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = Workspace.resolve(built).db_path
    db.write_bytes(b"not a database" * 100)
    code, out, _ = run(capsys, "index", "update", "--source", str(built))
    assert code == 0 and "full build (the index is unreadable" in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM files").fetchone()[0] > 20
