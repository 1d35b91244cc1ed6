"""A selection from an updated index is the selection from a rebuilt one (issue 38): on the
torchvision-shaped fixture (tests/fixtures/visionext), after a history of edits each
selected on the index the selections before them updated, and after `torchtalk index
update` over an index another version of the extraction code made, the selection equals
the one a fresh build of the same tree gives. tests/test_update_equals_rebuild.py compares
the graphs; this compares what users see."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.workspace import Workspace
from pytest_torchtalk.cli import main
from tests.helpers import git
from tests.select_support import IndexedTree, tree_fixtures

shared, tree = tree_fixtures("visionext")

NMS = "torchvision/csrc/ops/nms.cpp"
SCHEMA = '"torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"'
EDITS = [
    (NMS, SCHEMA, SCHEMA.replace("-> Tensor", "-> Tensor)")),
    (
        "torchvision/csrc/ops/cpu/nms_kernel.cpp",
        "return dets.index_select(0, scores.argsort());",
        "return dets.index_select(0, scores.argsort(/*descending=*/true));",
    ),
    ("torchvision/ops/boxes.py", "iou_threshold)\n", "float(iou_threshold))\n"),
    ("torchvision/transforms.py", "return img.flip(-1)", "return img.flip(-1).clone()"),
    (
        "torchvision/csrc/ops/nms.h",
        "namespace ops {",
        "namespace ops {\nconstexpr int kUnused = 1;",
    ),
    (NMS, SCHEMA, SCHEMA.replace("-> Tensor", "-> Tensor)")),
]


def _seen(selection) -> tuple:
    """What a user reads: the files, why each (its first chain), everything's reasons,
    the changed entities."""
    files = {
        path: [(hop.src, hop.kind, hop.dst) for hop in chosen.reasons[0].chain]
        for path, chosen in selection.files.items()
    }
    entities = [(entity.label, entity.reason) for entity in selection.entities]
    return files, list(selection.everything), entities


def _rebuilt(tree: IndexedTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """The selection of the tree's change from an index built afresh at its commit."""
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(tmp_path / "rebuilt"))
    git(tree.root, "stash", "-q")
    try:
        build_index(Workspace.resolve(tree.root), show_progress=False)
    finally:
        git(tree.root, "stash", "pop", "-q")
    seen = _seen(tree.select())
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(tree.cache))
    return seen


def test_an_updated_index_selects_what_a_rebuilt_one_does(
    tree: IndexedTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for step, (rel, old, new) in enumerate(EDITS):
        tree.replace(rel, old, new)
        updated = _seen(tree.select())
        assert not updated[1], updated[1]
        assert updated == _rebuilt(tree, tmp_path / str(step), monkeypatch), (step, rel)
        git(tree.root, "checkout", "-q", ".")

    # An index another version of the indexer made: its facts are that code's (here it
    # read no op registrations). Selection does not read it as describing the tree: not
    # refreshed, it runs everything; refreshed, it is built again (the one refresh policy,
    # `index update`'s too) rather than updated, mixing the old facts with new ones.
    db_path = tree.workspace.db_path
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE meta SET value = 'older' WHERE key = 'extraction_code'")
        conn.execute("DELETE FROM edges WHERE kind = 'dispatches'")
    rel, old, new = EDITS[1]
    tree.replace(rel, old, new)
    stale = tree.select(update=False)
    assert stale.index["stale"] is True
    assert stale.everything and "another version of TorchTalk's indexer" in stale.everything[0]
    refreshed = tree.select()
    assert refreshed.index["stale"] is True and refreshed.index["updated"] is True
    assert "built again" in refreshed.index["update"], refreshed.index
    assert "another version of TorchTalk's indexer" in refreshed.index["update"]
    assert main(["index", "update", "--source", str(tree.root), "-q"]) == 0
    updated = _seen(tree.select())
    assert "test/test_ops.py" in updated[0]
    assert updated == _rebuilt(tree, tmp_path / "other-code", monkeypatch)
