"""The adjacency carried across an update equals one built from every edge.

Every kind of change of the update-equals-rebuild sequence is applied to the minitorch
fixture; after each update, the base index's sidecar with the update's touched nodes
spliced in is compared array for array with the adjacency built from the new index.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from indexer.build import build_index
from indexer.query import adjacency
from indexer.query.adjacency import splice
from indexer.query.adjacency_delta import deltas_of
from indexer.store.db import read_meta
from indexer.update import update_index
from indexer.workspace import Workspace
from tests.helpers import commit_all
from tests.test_update_equals_rebuild import STEPS


def _open(db: Path) -> tuple[sqlite3.Connection, dict[str, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    return conn, read_meta(conn)


def _arrays(adj: adjacency.Adjacency) -> dict:
    names = ("node_kinds", "edge_kinds", *adjacency._ARRAYS)
    return {name: list(getattr(adj, name)) for name in names}


def test_the_spliced_adjacency_equals_a_build_after_every_kind_of_change(
    minitorch_repo: Path,
) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False)
    for name, change, commit in STEPS:
        conn, meta = _open(workspace.db_path)
        base = adjacency.load(workspace.db_path, conn, meta)  # the sidecar the update starts from
        conn.close()
        change(minitorch_repo)
        if commit:
            commit_all(minitorch_repo, name)
        update_index(workspace, jobs=1, show_progress=False)
        conn, meta = _open(workspace.db_path)
        try:
            deltas = deltas_of(meta)
            assert deltas, name
            spliced = splice(base, conn, deltas[0].nodes)
            assert spliced is not None, name
            assert _arrays(spliced) == _arrays(adjacency.build(conn)), name
            # and what a reader gets: the sidecar written from the splice
            loaded = adjacency.load(workspace.db_path, conn, meta)
            assert _arrays(loaded) == _arrays(spliced), name
        finally:
            conn.close()


def test_a_sidecar_of_another_index_is_not_spliced_into(minitorch_repo: Path) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False)
    # no sidecar was made for the base: the delta names a key nothing on disk has
    adjacency.sidecar_path(workspace.db_path).unlink(missing_ok=True)
    _, change, _ = STEPS[0]
    change(minitorch_repo)
    update_index(workspace, jobs=1, show_progress=False)
    conn, meta = _open(workspace.db_path)
    try:
        assert adjacency._spliced(adjacency.sidecar_path(workspace.db_path), conn, meta) is None
        loaded = adjacency.load(workspace.db_path, conn, meta)
        assert _arrays(loaded) == _arrays(adjacency.build(conn))
    finally:
        conn.close()
