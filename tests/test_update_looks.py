"""An update hashes only the files whose look (size, times, inode) changed since their
content was last found to be the index's (``indexer.store.tree_stats``); every change
is still found, whatever its size."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from indexer import changes as changes_module
from indexer.update import update_index
from indexer.workspace import Workspace

SETTLE_S = 2.2  # past indexer.store.tree_stats.RACY_S: files older than that are kept


def _hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every content hash the change detection takes from now on (the real one runs)."""
    taken: list[int] = []
    real = changes_module.content_hash
    monkeypatch.setattr(
        changes_module, "content_hash", lambda data: taken.append(len(data)) or real(data)
    )
    return taken


def _same_size_edit(path: Path) -> None:
    text = path.read_text()
    changed = text.replace("return", "RETURN", 1).replace("RETURN", "return ", 1)[:-1]
    assert changed != text and len(changed) == len(text)
    path.write_text(changed)


def test_an_update_hashes_only_what_was_written_since(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    update_index(workspace, jobs=1, show_progress=False)  # builds
    time.sleep(SETTLE_S)  # the files settle: their looks can be kept
    functional = minitorch_repo / "minitorch" / "functional.py"
    functional.write_text(functional.read_text() + "\n\ndef first_edit():\n    return 1\n")
    first = update_index(workspace, jobs=1, show_progress=False)
    assert first.modified == ["minitorch/functional.py"]

    hashed = _hashes(monkeypatch)
    time.sleep(SETTLE_S)
    _same_size_edit(functional)  # the size alone would not tell
    second = update_index(workspace, jobs=1, show_progress=False)
    assert second.modified == ["minitorch/functional.py"]
    assert len(hashed) == 1  # the others look as they did: not read again

    hashed.clear()
    again = update_index(workspace, jobs=1, show_progress=False)
    assert again.up_to_date
    assert len(hashed) <= 1  # the edited file, if it changed too recently to be kept

    from indexer.store.tree_stats import RACY_S

    assert RACY_S < SETTLE_S
