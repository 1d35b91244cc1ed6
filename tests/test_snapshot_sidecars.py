"""A restored snapshot's first selection takes over the sidecars made for its index.

The nightly job's selections leave the adjacency, the hub's walk, kept chains and
judgments beside the index; a PR job restores the snapshot on another machine. What it
gets must be what it would make itself (array for array), without making it.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from indexer.query import adjacency
from indexer.query.index import Index
from indexer.select import hub
from indexer.select.derived import prepare
from indexer.snapshot.store import SIDECAR_FILES
from indexer.store.db import read_meta
from indexer.workspace import Workspace
from tests.test_snapshot_nearest import build_and_save, run


def _arrays(adj: adjacency.Adjacency) -> dict:
    return {name: list(getattr(adj, name)) for name in adjacency._ARRAYS}


def _walk(walk: hub.HubWalk) -> tuple:
    arrays = {name: list(values) for name, values in walk.arrays.items()}
    return walk.hub, walk.node_kinds, walk.step_kinds, walk.import_live, arrays


def _update_for_a_kernel_edit(workspace: Workspace) -> None:
    from indexer.update import update_index

    linalg = workspace.source / "aten/src/ATen/native/LinearAlgebra.cpp"
    text = linalg.read_text()
    linalg.write_text(
        text.replace("check_dim_size(m1, 2);", "check_dim_size(m1, 2);\n  (void)0;", 1)
    )
    update_index(workspace, show_progress=False)


def _assert_taken_over(workspace: Workspace) -> None:
    """The index's adjacency is spliced from a sidecar on disk, and equals a build."""
    conn = sqlite3.connect(f"file:{workspace.db_path}?mode=ro&immutable=1", uri=True)
    try:
        meta = read_meta(conn)
        spliced = adjacency._spliced(adjacency.sidecar_path(workspace.db_path), conn, meta)
        assert spliced is not None
        assert _arrays(spliced) == _arrays(adjacency.build(conn))
    finally:
        conn.close()


def test_sidecars_travel_with_an_exported_snapshot(
    minitorch_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)
    workspace = Workspace.resolve(repo)
    assert prepare(workspace) is not None  # as the nightly build does: hub, chains
    with closing(Index(workspace.db_path)) as index:
        made_adjacency = _arrays(adjacency.shared(index.db_path, index.conn, index.meta))
        made_walk = _walk(hub.load(index))
    present = [name for name in SIDECAR_FILES if workspace.db_path.with_name(name).is_file()]
    assert {"index.sqlite.adjacency", "index.sqlite.hub"} <= set(present)
    assert run(capsys, "snapshot", "save", "nightly", "--source", str(repo))[0] == 0
    archive = tmp_path / "nightly.tar.gz"
    assert run(capsys, "snapshot", "export", "nightly", "-o", str(archive))[0] == 0

    other = tmp_path / "elsewhere"
    shutil.copytree(repo, other)
    shutil.rmtree(workspace.db_path.parent.parent.parent)  # a new machine: the cache is empty
    code, _, err = run(capsys, "snapshot", "import", str(archive))
    assert code == 0, err
    code, _, err = run(capsys, "snapshot", "load", "--nearest", "--source", str(other))
    assert code == 0, err

    restored = Workspace.resolve(other)
    for name in present:
        assert restored.db_path.with_name(name).is_file(), name
    conn = sqlite3.connect(f"file:{restored.db_path}?mode=ro&immutable=1", uri=True)
    try:
        meta = read_meta(conn)
        sidecar = adjacency.sidecar_path(restored.db_path)
        taken_over = adjacency._spliced(sidecar, conn, meta)  # not built: taken over
        assert taken_over is not None
        assert _arrays(taken_over) == made_adjacency == _arrays(adjacency.build(conn))
    finally:
        conn.close()
    with closing(Index(restored.db_path)) as index:
        assert hub._kept_across_update(index) is not None
        assert _walk(hub.load(index)) == made_walk


def test_a_snapshot_without_sidecars_loads_as_before(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)
    db_path = Workspace.resolve(repo).db_path
    for name in SIDECAR_FILES:
        db_path.with_name(name).unlink(missing_ok=True)
    assert run(capsys, "snapshot", "save", "plain", "--source", str(repo))[0] == 0
    code, _, err = run(capsys, "snapshot", "load", "plain", "--source", str(repo))
    assert code == 0, err
    with closing(Index(db_path)) as index:
        assert "adjacency_delta" not in index.meta
        assert hub.load(index) is None


def test_a_loaded_snapshot_updated_before_any_selection_still_takes_them_over(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A PR job: load the nightly's snapshot, and its first selection updates the index
    # for the PR's change before anything read the sidecars made for the nightly's.
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)
    workspace = Workspace.resolve(repo)
    assert prepare(workspace) is not None
    with closing(Index(workspace.db_path)) as index:  # a walk of PyTorch's size makes it
        adjacency.keep(index.db_path, index.conn, index.meta)
    assert run(capsys, "snapshot", "save", "nightly", "--source", str(repo))[0] == 0
    assert run(capsys, "snapshot", "load", "nightly", "--source", str(repo))[0] == 0
    _update_for_a_kernel_edit(workspace)
    _assert_taken_over(workspace)  # through the delta from the nightly's index
    with closing(Index(workspace.db_path)) as index:
        assert hub._kept_across_update(index) is not None  # the kernel is not on its walk


def test_sidecars_of_the_index_before_an_update_are_taken_over_from_a_snapshot(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The nightly job updates its index and saves it before anything read the sidecars:
    # they are still the ones made for the index before the update.
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)
    workspace = Workspace.resolve(repo)
    with closing(Index(workspace.db_path)) as index:
        adjacency.keep(index.db_path, index.conn, index.meta)
    _update_for_a_kernel_edit(workspace)
    assert run(capsys, "snapshot", "save", "nightly", "--source", str(repo))[0] == 0
    assert run(capsys, "snapshot", "load", "nightly", "--source", str(repo))[0] == 0
    _assert_taken_over(workspace)
