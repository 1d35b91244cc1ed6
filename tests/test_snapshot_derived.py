"""A restored snapshot carries what was derived for its index inside the index itself.

The nightly job's refresh keeps the adjacency, the hub's walk, chains to it and judgments
in the index; a PR job restores the snapshot on another machine and updates it for its
change. What it gets must be what it would make itself (array for array), without
making it: the update splices the adjacency and carries the hub's walk over. Nothing but
the index (and the record) lies beside it.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from indexer.query import adjacency
from indexer.query.index import Index
from indexer.refresh import refresh_index
from indexer.select import derived, hub
from indexer.store.db import read_meta
from indexer.store.derived import index_key
from indexer.workspace import Workspace
from tests.test_snapshot_nearest import build_and_save, run

# What may lie beside an index: the build lock and a record, nothing derived.
BESIDE = {"index.sqlite", "build.lock", "record.ttr"}


def _arrays(adj: adjacency.Adjacency) -> dict:
    names = ("node_kinds", "edge_kinds", "node_kind", "node_file")
    names += tuple(
        f"{side}_{c}" for side in ("in", "out") for c in ("offsets", *adjacency._COLUMNS)
    )
    return {name: list(getattr(adj, name)) for name in names}


def _walk(walk: hub.HubWalk) -> tuple:
    arrays = {name: list(values) for name, values in walk.arrays.items()}
    return walk.hub, walk.node_kinds, walk.step_kinds, walk.import_live, arrays


def _kept_adjacency(db_path: Path) -> adjacency.Adjacency | None:
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)) as conn:
        kept = adjacency.read(conn, index_key(read_meta(conn)))
        assert kept is None or _arrays(kept) == _arrays(adjacency.build(conn))
        return kept


def _edit_a_kernel(workspace: Workspace) -> None:
    linalg = workspace.source / "aten/src/ATen/native/LinearAlgebra.cpp"
    text = linalg.read_text()
    linalg.write_text(
        text.replace("check_dim_size(m1, 2);", "check_dim_size(m1, 2);\n  (void)0;", 1)
    )


def _no_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    builds: list[int] = []
    real = adjacency.build
    monkeypatch.setattr(adjacency, "build", lambda conn: builds.append(1) or real(conn))
    return builds


def test_derived_data_travels_inside_an_exported_snapshot(
    minitorch_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)  # the build derives what selections read
    workspace = Workspace.resolve(repo)
    made_adjacency = _kept_adjacency(workspace.db_path)
    assert made_adjacency is not None
    with closing(Index(workspace.db_path)) as index:
        assert derived.is_prepared(index)
        made_walk = _walk(hub.load(index))
    assert {path.name for path in workspace.db_path.parent.iterdir()} <= BESIDE
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
    assert {path.name for path in restored.db_path.parent.iterdir()} <= BESIDE
    assert _arrays(_kept_adjacency(restored.db_path)) == _arrays(made_adjacency)
    with closing(Index(restored.db_path)) as index:
        assert derived.is_prepared(index)  # loaded as saved: nothing to derive again
        assert _walk(hub.load(index)) == made_walk


def test_a_loaded_snapshot_updated_for_a_change_splices_and_carries(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A PR job: load the nightly's snapshot, and its first selection updates the index
    # for the PR's change.
    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)
    workspace = Workspace.resolve(repo)
    assert run(capsys, "snapshot", "save", "nightly", "--source", str(repo))[0] == 0
    assert run(capsys, "snapshot", "load", "nightly", "--source", str(repo))[0] == 0
    _edit_a_kernel(workspace)
    builds = _no_builds(monkeypatch)
    done = refresh_index(workspace, show_progress=False)
    assert done.how == "updated" and done.prepare_problem is None
    assert builds == []  # spliced into the nightly's, not built
    assert _kept_adjacency(workspace.db_path) is not None
    assert "kept from the index before" in str(done.prepared)  # the kernel is not on its walk
    assert {path.name for path in workspace.db_path.parent.iterdir()} <= BESIDE


def test_an_index_updated_without_deriving_is_derived_from_what_it_holds(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An update by code that does not derive (``update_index`` alone) leaves what was
    # derived for the index before it; the next refresh derives from that, through the
    # update's delta, even after a snapshot's save and load.
    from indexer.update import update_index

    repo = minitorch_repo
    build_and_save(repo, "bare", capsys)
    workspace = Workspace.resolve(repo)
    _edit_a_kernel(workspace)
    update_index(workspace, show_progress=False)
    with closing(Index(workspace.db_path)) as index:
        assert not derived.is_prepared(index)
    assert run(capsys, "snapshot", "save", "nightly", "--source", str(repo))[0] == 0
    assert run(capsys, "snapshot", "load", "nightly", "--source", str(repo))[0] == 0
    builds = _no_builds(monkeypatch)
    done = refresh_index(workspace, show_progress=False)
    assert done.how == "up to date" and done.prepare_problem is None
    assert builds == [] and _kept_adjacency(workspace.db_path) is not None
    with closing(Index(workspace.db_path)) as index:
        assert derived.is_prepared(index)
