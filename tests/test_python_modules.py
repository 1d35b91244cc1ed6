"""Python modules, classes and functions: names from paths, file:line, signatures, docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.query.index import Index
from indexer.workspace import Workspace
from tests.helpers import line_of
from tests.pyindex import build_fixture, edges_to, node, targets


@pytest.fixture
def minitorch_index(minitorch_repo: Path) -> Index:
    return Index(build_index(Workspace.resolve(minitorch_repo), show_progress=False).db_path)


def one(index: Index, qualname: str, kind: str):
    found = [n for n in index.find(qualname, [kind]) if n.qualname == qualname]
    assert len(found) == 1, (qualname, found)
    return found[0]


def test_modules_are_named_from_the_package_root(minitorch_index: Index) -> None:
    package = one(minitorch_index, "minitorch", "python_module")
    assert package.path == "minitorch/__init__.py" and package.attrs["package"]
    linear = one(minitorch_index, "minitorch.nn.modules.linear", "python_module")
    assert linear.path == "minitorch/nn/modules/linear.py" and not linear.attrs["package"]
    # A conftest outside every package gets a path-based name.
    one(minitorch_index, "test.conftest", "python_module")


def test_class_with_bases_methods_signatures_and_doc(
    minitorch_index: Index, minitorch_repo: Path
) -> None:
    source = minitorch_repo / "minitorch/nn/modules/linear.py"
    cls = one(minitorch_index, "minitorch.nn.modules.linear.Linear", "python_class")
    assert cls.line == line_of(source, "class Linear(Module)")
    assert cls.attrs["bases"] == ["minitorch.nn.modules.module.Module"]
    assert cls.attrs["doc"] == "Applies an affine transformation: ``y = x A^T + b``."
    forward = one(minitorch_index, "minitorch.nn.modules.linear.Linear.forward", "python_function")
    assert forward.line == line_of(source, "def forward(self, input)")
    assert forward.parent_id == cls.id and forward.attrs["method"]
    assert forward.attrs["signature"] == "(self, input)"
    init = one(minitorch_index, "minitorch.nn.modules.linear.Linear.__init__", "python_function")
    assert init.attrs["signature"] == "(self, in_features, out_features, bias=True)"
    contained = {
        minitorch_index.node(e.dst).name for e in minitorch_index.out_edges(cls.id, ["contains"])
    }
    assert {"__init__", "reset_parameters", "forward", "extra_repr"} <= contained


def test_functions_have_file_line_and_doc(minitorch_index: Index, minitorch_repo: Path) -> None:
    add = one(minitorch_index, "minitorch.functional.add", "python_function")
    assert (
        add.evidence
        == f"minitorch/functional.py:{line_of(minitorch_repo / 'minitorch/functional.py', 'def add(')}"
    )
    assert add.attrs["doc"].startswith("Adds ``other``")
    assert add.attrs["signature"] == "(input, other, alpha=1)"


def test_src_layout_modules_start_below_src(tmp_path_factory: pytest.TempPathFactory) -> None:
    extra = {
        "src/minisrc/__init__.py": "from .core import scale\n",
        "src/minisrc/core.py": "def scale(x):\n    return x\n",
        "tools/use_src.py": "import minisrc\n\n\ndef run():\n    return minisrc.scale(1)\n",
    }
    _, index = build_fixture(tmp_path_factory, "miniext", extra)
    core = node(index, "minisrc.core", "python_module")
    assert core.path == "src/minisrc/core.py"
    # A package the harness does not declare still links within itself.
    package = node(index, "minisrc", "python_module")
    assert "minisrc.core.scale" in targets(index, package, "imports")
    # Outside it, a declared-packages harness records no refs to it.
    run = node(index, "tools.use_src.run", "python_function")
    assert not targets(index, run, "references")


def test_stub_files_do_not_shadow_bindings(tmp_path_factory: pytest.TempPathFactory) -> None:
    stub = "def _mm(input: object, mat2: object) -> object: ...\n"
    _, index = build_fixture(tmp_path_factory, "minitorch", {"minitorch/_C/__init__.pyi": stub})
    assert not index.find("minitorch._C", ["python_module"])
    mm = node(index, "minitorch.functional.mm", "python_function")
    reached = edges_to(index, mm, "references")["minitorch._C._mm"]
    assert index.node(reached.dst).kind == "binding"
