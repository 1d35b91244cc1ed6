"""Importing ``pkg.mod`` runs ``pkg/__init__.py`` first. A module-level change in a
module that the package's ``__init__`` imports therefore runs in every test importing any
module of the package, even one that names neither the package nor the changed module
(``from minitorch.tracing import trace_fn``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from indexer.build import build_index
from indexer.workspace import Workspace
from tests.helpers import commit_all, make_fixture_repo
from tests.select_support import IndexedTree, selected

BACKENDS = """\
DEFAULT_BACKEND = "fast"


def fast(model):
    return model
"""

COMPILER = """\
from minitorch.backends_impl import fast


def compile(model):
    return fast(model)
"""

TRACING = """\
def trace_fn(fn):
    return fn
"""

TEST_TRACING = """\
from minitorch.tracing import trace_fn


def test_trace_returns_the_function():
    assert trace_fn(len) is len
"""

TEST_COMPILER = """\
from minitorch.compiler import compile


def test_compile_returns_the_model():
    assert compile(1) == 1
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    base = tmp_path_factory.mktemp("parent-package")
    root = make_fixture_repo("minitorch", base / "minitorch")
    (root / "minitorch/backends_impl.py").write_text(BACKENDS, encoding="utf-8")
    (root / "minitorch/compiler.py").write_text(COMPILER, encoding="utf-8")
    (root / "test/test_compiler.py").write_text(TEST_COMPILER, encoding="utf-8")
    (root / "minitorch/tracing.py").write_text(TRACING, encoding="utf-8")
    (root / "test/test_tracing.py").write_text(TEST_TRACING, encoding="utf-8")
    with open(root / "minitorch/__init__.py", "a", encoding="utf-8") as init:
        init.write("from . import backends_impl\n")
    commit_all(root, "a module the package imports, and a test of another module")
    cache = base / "cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(cache))
        build_index(Workspace.resolve(root), show_progress=False)
    return IndexedTree(root, cache)


@pytest.fixture
def edit(tree: IndexedTree, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexedTree]:
    """The tree to edit and select on, restored afterwards."""
    yield tree.use(monkeypatch)
    tree.reset()


def test_module_level_change_under_the_package_init_reaches_every_submodule_importer(
    edit: IndexedTree,
) -> None:
    edit.replace("minitorch/backends_impl.py", '"fast"', '"eager"')
    selection = edit.select()
    assert not selection.run_everything, selection.everything
    assert "test/test_tracing.py" in selected(selection)
    hops = selection.files["test/test_tracing.py"].reasons[0].chain
    implicit = [hop for hop in hops if hop.src == "minitorch.tracing"]
    assert implicit and implicit[0].dst == "minitorch"
    assert implicit[0].evidence == "minitorch/tracing.py:1"


def test_a_body_change_does_not_run_at_import(edit: IndexedTree) -> None:
    """The parent-package edge carries what importing runs, nothing more: a change
    inside ``fast`` reaches its caller's test, not every importer of the package."""
    edit.replace("minitorch/backends_impl.py", "    return model", "    return model or model")
    selected_files = selected(edit.select())
    assert "test/test_compiler.py" in selected_files
    assert "test/test_tracing.py" not in selected_files
    assert "test/test_unrelated.py" not in selected_files
