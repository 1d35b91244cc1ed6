"""Shared by the selection tests: one indexed fixture repository per test module, edited
by each test and restored after it (the engine updates the index when it is stale)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.query.index import Index
from indexer.select.model import Selection
from indexer.select_changes import select_changes
from indexer.store import derived as derived_store
from indexer.workspace import Workspace
from tests.helpers import commit_all, git, line_of, make_fixture_repo


class IndexedTree:
    """A fixture repository with a built index, edited in place by tests."""

    def __init__(self, root: Path, cache: Path) -> None:
        self.root = root
        self.cache = cache
        self.initial = git(root, "rev-parse", "HEAD").strip()

    def use(self, monkeypatch: pytest.MonkeyPatch) -> IndexedTree:
        monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(self.cache))
        return self

    def reset(self) -> None:
        git(self.root, "checkout", "-q", "-f", "main")
        git(self.root, "reset", "-q", "--hard", self.initial)
        git(self.root, "clean", "-fdqx")
        for branch in git(self.root, "branch", "--format=%(refname:short)").split():
            if branch != "main":
                git(self.root, "branch", "-q", "-D", branch)

    def path(self, rel: str) -> Path:
        return self.root / rel

    def line(self, rel: str, text: str, occurrence: int = 1) -> int:
        return line_of(self.root / rel, text, occurrence)

    def replace(self, rel: str, old: str, new: str) -> None:
        path = self.root / rel
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {rel}"
        path.write_text(text.replace(old, new), encoding="utf-8")

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def commit(self, message: str = "change") -> str:
        return commit_all(self.root, message)

    @property
    def workspace(self) -> Workspace:
        return Workspace.resolve(self.root)

    def select(self, base: str | None = None, **options) -> Selection:
        return select_changes(self.workspace, base, **options)

    def index(self) -> Index:
        return Index(self.workspace.db_path)

    def pytest(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``python -m pytest`` in the tree, the plugin loaded from its entry point."""
        full_env = {**os.environ, "TORCHTALK_CACHE_DIR": str(self.cache), **(env or {})}
        full_env.pop("PYTEST_ADDOPTS", None)
        full_env.pop("PYTEST_XDIST_WORKER", None)
        return subprocess.run(
            [sys.executable, "-m", "pytest", *args],
            cwd=self.root,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=300,
        )


def indexed_tree(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    prepare: Callable[[Path], None] | None = None,
) -> IndexedTree:
    """The fixture repository ``name``, edited by ``prepare`` (committed) before its index
    is built."""
    base = tmp_path_factory.mktemp(f"select-{name}")
    root = make_fixture_repo(name, base / name)
    if prepare is not None:
        prepare(root)
        commit_all(root, f"{name} prepared")
    cache = base / "cache"
    previous = os.environ.get("TORCHTALK_CACHE_DIR")
    os.environ["TORCHTALK_CACHE_DIR"] = str(cache)
    try:
        build_index(Workspace.resolve(root), show_progress=False)
    finally:
        if previous is None:
            os.environ.pop("TORCHTALK_CACHE_DIR", None)
        else:
            os.environ["TORCHTALK_CACHE_DIR"] = previous
    return IndexedTree(root, cache)


def indexed_files(
    tmp_path_factory: pytest.TempPathFactory, name: str, files: dict[str, str]
) -> IndexedTree:
    """A repository made of ``files`` (repo-relative path -> text), committed on main and
    indexed: for a test whose tree is small enough to be written out in the test."""
    base = tmp_path_factory.mktemp(f"files-{name}")
    root = base / name
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    commit_all(root, f"{name}, written by the test")
    cache = base / "cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(cache))
        build_index(Workspace.resolve(root), show_progress=False)
    return IndexedTree(root, cache)


def tree_fixtures(name: str, files: dict[str, str] | None = None):
    """The fixtures of a test module selecting on one fixture repository (``files``, when
    given, written out as ``indexed_files`` does): ``shared``, its indexed tree (built once
    for the module), and ``tree``, the same tree for one test, which may edit it freely and
    finds it restored after."""

    @pytest.fixture(scope="module")
    def shared(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
        if files is not None:
            return indexed_files(tmp_path_factory, name, files)
        return indexed_tree(tmp_path_factory, name)

    @pytest.fixture
    def tree(shared: IndexedTree, monkeypatch: pytest.MonkeyPatch):
        yield shared.use(monkeypatch)
        shared.reset()

    return shared, tree


def selected(selection: Selection) -> set[str]:
    return set(selection.files)


def labels(selection: Selection) -> list[str]:
    return [entity.label for entity in selection.entities]


def members(selection: Selection) -> set[str]:
    """Every qualname the changed entities stand for (singles and group members)."""
    names: set[str] = set()
    for entity in selection.entities:
        names.update(entity.members or [entity.label])
    return names


def chain_nodes(selection: Selection, path: str) -> list[str]:
    """The nodes along the first reason chain of a selected file, changed entity first."""
    reason = selection.files[path].reasons[0]
    nodes = [reason.entity]
    for hop in reason.chain:
        nodes.append(hop.src)
    return nodes


# --- what is derived inside the index (indexer.store.derived) -------------------------


def forget_derived(workspace: Workspace, *names: str) -> None:
    """Drop derived items from the index in place, as an index made without them (a
    test's stand-in: nothing reads it meanwhile)."""
    with closing(sqlite3.connect(workspace.db_path)) as conn:
        derived_store.ensure(conn)  # an index built without deriving has no tables yet
        derived_store.drop(conn, names)
        conn.commit()


def derived_rows(workspace: Workspace, name: str) -> tuple[list, list]:
    """The rows of one derived item, as they are stored."""
    with closing(sqlite3.connect(workspace.db_path)) as conn:
        head = conn.execute("SELECT * FROM derived WHERE name = ?", (name,)).fetchall()
        arrays = conn.execute("SELECT * FROM derived_arrays WHERE name = ?", (name,)).fetchall()
    return head, arrays


def put_derived_rows(workspace: Workspace, name: str, rows: tuple[list, list]) -> None:
    """Put back rows of ``derived_rows`` in place of what the index holds for ``name``."""
    with closing(sqlite3.connect(workspace.db_path)) as conn:
        derived_store.ensure(conn)
        derived_store.drop(conn, [name])
        conn.executemany("INSERT INTO derived VALUES (?, ?, ?)", rows[0])
        conn.executemany(
            "INSERT INTO derived_arrays(name, array, block, data) VALUES (?, ?, ?, ?)",
            [row[-4:] for row in rows[1]],
        )
        conn.commit()


def store_derived(workspace: Workspace, store: Callable[[sqlite3.Connection, Index], None]) -> None:
    """Write a derived item into the index in place, ``store(conn, index)``."""
    with (
        closing(Index(workspace.db_path)) as index,
        closing(sqlite3.connect(workspace.db_path)) as conn,
    ):
        store(conn, index)
        conn.commit()


def rederive(workspace: Workspace, *names: str) -> str | None:
    """Forget ``names`` and derive again what the index lacks, as the refresh before a
    selection does for an index made without it; what was done."""
    from indexer.refresh import Refresh, prepare_for_selection
    from indexer.select.derived import PREPARED

    forget_derived(workspace, PREPARED, *names)
    done = Refresh("built", "", None)
    prepare_for_selection(workspace, done)
    assert done.prepare_problem is None
    return done.prepared
