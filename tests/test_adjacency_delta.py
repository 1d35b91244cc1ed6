"""The adjacency carried across an update equals one built from every edge.

Every kind of change of the update-equals-rebuild sequence is applied to the minitorch
fixture; after each update, the adjacency kept in the index (the base's, with the
update's touched nodes spliced in and only their blocks rewritten) is compared array for
array with the adjacency built from the new index.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.query import adjacency, adjacency_delta
from indexer.store import derived
from indexer.store.db import read_meta
from indexer.update import update_index
from indexer.workspace import Workspace
from tests.helpers import commit_all
from tests.test_update_equals_rebuild import STEPS


def _open(db: Path) -> tuple[sqlite3.Connection, dict[str, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    return conn, read_meta(conn)


def _arrays(adj: adjacency.Adjacency) -> dict:
    names = ("node_kinds", "edge_kinds", "node_kind", "node_file")
    names += tuple(
        f"{side}_{column}" for side in ("in", "out") for column in ("offsets", *adjacency._COLUMNS)
    )
    return {name: list(getattr(adj, name)) for name in names}


class KeepAdjacency:
    """A ``derive`` for a build or an update that keeps the adjacency alone (what
    ``indexer.select.derived.prepare`` does first), noting which blocks it wrote."""

    def __init__(self, edge_rows: bool = True) -> None:
        self.blocks: list[set[int] | None] = []
        self.edge_rows = edge_rows  # False: as if the update kept no edge rows

    def __call__(self, db_path: Path, conn: sqlite3.Connection) -> None:
        derived.ensure(conn)
        if not self.edge_rows:
            derived.drop(conn, (adjacency_delta.EDGE_ROWS,))
        with closing(sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)) as ro:
            meta = read_meta(ro)
            made = adjacency.derive(ro, meta)
        conn.execute("BEGIN")
        adjacency.store(conn, meta, made)
        conn.execute("COMMIT")
        self.blocks.append(made.blocks)


@pytest.mark.parametrize("edge_rows", [True, False], ids=["edge rows", "touched nodes read"])
def test_the_spliced_adjacency_equals_a_build_after_every_kind_of_change(
    minitorch_repo: Path, monkeypatch: pytest.MonkeyPatch, edge_rows: bool
) -> None:
    """Spliced from the update's own edge rows, or (an update that kept none) from
    every row of the nodes it touched, read again."""
    monkeypatch.setattr(adjacency, "BLOCK", 16)  # many blocks, so that some are kept as they are
    reread: list[int] = []
    real_splice = adjacency.splice
    monkeypatch.setattr(adjacency, "splice", lambda *args: reread.append(1) or real_splice(*args))
    workspace = Workspace.resolve(minitorch_repo)
    keep = KeepAdjacency(edge_rows)
    build_index(workspace, jobs=1, show_progress=False, derive=keep)
    assert keep.blocks == [None]  # built: every block written
    narrow = []
    for name, change, commit in STEPS:
        change(minitorch_repo)
        if commit:
            commit_all(minitorch_repo, name)
        update_index(workspace, jobs=1, show_progress=False, derive=keep)
        conn, meta = _open(workspace.db_path)
        try:
            assert keep.blocks[-1] is not None, name  # spliced into the base's
            kept = adjacency.read(conn, derived.index_key(meta))
            assert kept is not None, name
            built = adjacency.build(conn)
            assert _arrays(kept) == _arrays(built), name
            narrow.append(len(keep.blocks[-1]) < -(-built.node_count // 16))
        finally:
            conn.close()
    assert any(narrow)  # a narrow change rewrote only the blocks of what it touched
    assert len(reread) == (0 if edge_rows else len(STEPS))


def test_an_index_without_the_bases_adjacency_builds_it(minitorch_repo: Path) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False)  # nothing derived for the base
    _, change, _ = STEPS[0]
    change(minitorch_repo)
    keep = KeepAdjacency()
    update_index(workspace, jobs=1, show_progress=False, derive=keep)
    assert keep.blocks == [None]
    conn, meta = _open(workspace.db_path)
    try:
        kept = adjacency.read(conn, derived.index_key(meta))
        assert kept is not None and _arrays(kept) == _arrays(adjacency.build(conn))
        assert adjacency.read(conn, "another index") is None
    finally:
        conn.close()


def test_a_stored_kind_code_out_of_range_is_rebuilt_not_walked(minitorch_repo: Path) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False, derive=KeepAdjacency())
    with closing(sqlite3.connect(workspace.db_path)) as conn:
        data = conn.execute(
            "SELECT data FROM derived_arrays WHERE name = ? AND array = 'node_kind' AND block = 0",
            (adjacency.NAME,),
        ).fetchone()[0]
        conn.execute(
            "UPDATE derived_arrays SET data = ? WHERE name = ? AND array = 'node_kind' AND block = 0",
            (bytes([120]) + data[1:], adjacency.NAME),  # no node kind has code 120
        )
        conn.commit()
    conn, meta = _open(workspace.db_path)
    try:
        assert adjacency.read(conn, derived.index_key(meta)) is None
        assert _arrays(adjacency.load(conn, meta)) == _arrays(adjacency.build(conn))
    finally:
        conn.close()
