"""The refresh before a selection (indexer.refresh.current_index): one rebuild-or-update
policy, `torchtalk index build`'s; and the selection after it reads a current index and
writes nothing (docs/selection.md, "A current index")."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from indexer.code_key import extraction_code_key
from tests.select_support import IndexedTree, forget_derived, rederive, tree_fixtures

shared, tree = tree_fixtures("minitorch")

OPS = "minitorch/ops.py"
# Run at import (the package imports ops): the walk reaches the hub, minitorch.
AT_IMPORT = ("        self.name = name\n", "        self.name = name\n        self.kind = 'ns'\n")
LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"
KERNEL = ("check_dim_size(m1, 2);", "check_dim_size(m1, 2);\n  check_dim_size(m1.sizes(), 2);")


def _made_by_an_older_indexer(tree: IndexedTree) -> None:
    with closing(sqlite3.connect(tree.workspace.db_path)) as conn, conn:
        conn.execute("UPDATE meta SET value = 'older' WHERE key = 'extraction_code'")


def _extraction_code(tree: IndexedTree) -> str:
    with closing(tree.index()) as index:
        return index.meta["extraction_code"]


def test_a_selection_after_an_indexer_upgrade_builds_the_index_again(tree: IndexedTree) -> None:
    # An update would re-extract only the edited file: every other file's facts would
    # stay the old indexer's. `index build` builds again; so does the selection.
    _made_by_an_older_indexer(tree)
    tree.replace(LINALG, *KERNEL)
    selection = tree.select()
    assert selection.index["update"].startswith(
        "built again (it was built by another version of TorchTalk's indexer)"
    ), selection.index
    assert selection.index["updated"] and not selection.run_everything
    assert _extraction_code(tree) == extraction_code_key()
    assert "test/test_linalg.py" in selection.files


def test_an_unchanged_tree_indexed_by_an_older_indexer_is_built_again(tree: IndexedTree) -> None:
    _made_by_an_older_indexer(tree)
    tree.replace(LINALG, *KERNEL)
    tree.commit("a kernel change, committed: the index's files still match the tree")
    selection = tree.select("HEAD~1")
    assert selection.index["update"].startswith("built again"), selection.index
    assert _extraction_code(tree) == extraction_code_key()


def test_without_updates_an_index_of_an_older_indexer_runs_everything(tree: IndexedTree) -> None:
    _made_by_an_older_indexer(tree)
    tree.replace(LINALG, *KERNEL)
    selection = tree.select(update=False)
    assert selection.run_everything
    assert "another version of TorchTalk's indexer" in selection.everything[0]
    assert _extraction_code(tree) == "older"


def _folder(tree: IndexedTree) -> dict[str, tuple[bytes, int]]:
    folder = tree.workspace.db_path.parent
    return {
        path.name: (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != "build.lock"
    }


def test_a_selection_on_a_current_index_writes_nothing(tree: IndexedTree) -> None:
    # Nothing derived kept in the index: the selection walks the hub in memory, and
    # leaves the index's folder as it found it.
    tree.replace(OPS, *AT_IMPORT)
    first = tree.select()  # the refresh updates the index and prepares for selections
    forget_derived(tree.workspace, "adjacency", "hub", "hub_chains")
    before = _folder(tree)
    again = tree.select()
    assert "walked; no walk was kept" in again.index["hub_walk"]
    assert set(again.files) == set(first.files)
    assert _folder(tree) == before
    assert "walked, and kept" in str(rederive(tree.workspace))
    assert _folder(tree) != before  # index maintenance keeps it, in the index
    assert set(_folder(tree)) == {"index.sqlite"}
