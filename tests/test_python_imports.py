"""Import edges: `import a.b`, `from a import b`, relative, lazy and dynamic imports,
`__init__` re-exports, and external_ref edges into a depended-on harness's package."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index
from indexer.query.status import index_status
from tests.helpers import line_of
from tests.pyindex import build_fixture, edges_to, node, targets


@pytest.fixture(scope="module")
def minitorch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch")


@pytest.fixture(scope="module")
def miniext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    # Symbol-level imports from torch, beside the fixture's `import torch` uses.
    compat = (
        '"""Shims over torch."""\n\n'
        "import torch.nn.functional as F\n"
        "from torch.nn import Linear, Module\n"
        "from miniext.math_utils import cdiv\n\n\n"
        "def halve(x):\n"
        "    from torch import nn  # lazy\n\n"
        "    return F.silu(x), nn, cdiv(x, 2)\n"
    )
    return build_fixture(tmp_path_factory, "miniext", {"miniext/compat.py": compat})


def test_import_dotted_module(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    cmi = node(index, "minitorch.testing._internal.common_methods_invocations", "python_module")
    edge = edges_to(index, cmi, "imports")["minitorch.nn.functional"]
    source = repo / "minitorch/testing/_internal/common_methods_invocations.py"
    assert edge.evidence == f"{cmi.path}:{line_of(source, 'import minitorch.nn.functional')}"


def test_from_import_symbol_and_submodule_relative(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    functional = node(index, "minitorch.functional", "python_module")
    imported = edges_to(index, functional, "imports")
    # `from .tensor import Tensor, _unwrap`: the module and each symbol.
    line = line_of(repo / "minitorch/functional.py", "from .tensor import Tensor")
    assert imported["minitorch.tensor"].line == line
    assert imported["minitorch.tensor.Tensor"].line == line
    assert index.node(imported["minitorch.tensor.Tensor"].dst).kind == "python_class"
    # `from . import functional` in a package __init__: the submodule.
    nn = node(index, "minitorch.nn", "python_module")
    assert index.node(edges_to(index, nn, "imports")["minitorch.nn.functional"].dst).kind == (
        "python_module"
    )
    # Three dots from minitorch/nn/modules/linear.py reach the top package.
    linear = node(index, "minitorch.nn.modules.linear", "python_module")
    assert {"minitorch.tensor.Tensor", "minitorch.nn.functional", "minitorch.nn.init"} <= targets(
        index, linear, "imports"
    )


def test_lazy_imports_inside_functions(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    matmul = node(index, "minitorch.linalg.matmul", "python_function")
    edge = edges_to(index, matmul, "imports")["minitorch.functional.matmul"]
    assert edge.attrs.get("lazy") is True
    assert edge.line == line_of(repo / "minitorch/linalg.py", "from .functional import matmul")
    erfcx = node(index, "minitorch.special.erfcx", "python_function")
    edge = edges_to(index, erfcx, "imports")["minitorch"]
    assert edge.attrs.get("lazy") is True
    assert edge.line == line_of(repo / "minitorch/special.py", "import minitorch  # lazy")
    # The module's own `from . import _backend` imports the package too, eagerly.
    eager = edges_to(index, node(index, "minitorch.special"), "imports")["minitorch"]
    assert "lazy" not in eager.attrs


def test_importlib_import_module_literal(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    gelu_erfcx = node(index, "minitorch.fused.gelu_erfcx", "python_function")
    edge = edges_to(index, gelu_erfcx, "imports")["minitorch.special"]
    assert edge.attrs.get("dynamic") is True and edge.attrs.get("lazy") is True
    source = repo / "minitorch/fused.py"
    assert edge.line == line_of(source, 'importlib.import_module("minitorch.special")')
    # The name it is assigned to stands for the module afterwards.
    used = edges_to(index, gelu_erfcx, "references")["minitorch.special.erfcx"]
    assert used.line == line_of(source, "return special.erfcx(gelu(x))")


def test_init_reexports_resolve_to_the_definition(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    # `minitorch.matmul(...)` is minitorch.functional.matmul, re-exported by __init__.
    test = node(index, "test/test_linalg.py::TestLinalg::test_matmul_2d", "test_function")
    edge = edges_to(index, test, "covers")["minitorch.functional.matmul"]
    assert edge.line == line_of(repo / "test/test_linalg.py", "minitorch.matmul(a, b)")
    # `from minitorch.nn import Linear, ReLU` reaches the classes through two __init__s.
    test_nn = node(index, "test/test_nn.py", "test_file")
    covered = targets(index, test_nn, "covers")
    assert {
        "minitorch.nn.modules.linear.Linear",
        "minitorch.nn.modules.activation.ReLU",
        "minitorch.nn",
    } <= covered
    package = node(index, "minitorch", "python_module")
    assert package.attrs["bindings"]["add"] == "minitorch.functional.add"


def test_stdlib_and_third_party_imports_make_no_refs(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    rows = index.conn.execute(
        "SELECT COUNT(*) FROM refs WHERE scheme = 'py' AND (target = 'math' OR target LIKE"
        " 'unittest%' OR target LIKE 'dataclasses%' OR target = 'pytest')"
    ).fetchone()
    assert rows[0] == 0


def test_external_refs_into_a_depended_on_package(miniext: tuple[Path, Index]) -> None:
    repo, index = miniext
    module = node(index, "miniext._custom_ops", "python_module")
    edge = edges_to(index, module, "external_ref")["torch"]
    assert edge.line == line_of(repo / "miniext/_custom_ops.py", "import torch")
    target = index.node(edge.dst)
    assert target.kind == "external_symbol" and target.path == "miniext/_custom_ops.py"
    # Symbols and submodules are named as imported; a lazy import is marked.
    compat = node(index, "miniext.compat", "python_module")
    external = edges_to(index, compat, "external_ref")
    assert set(external) == {
        "torch.nn.functional",
        "torch.nn.Linear",
        "torch.nn.Module",
        "torch.nn",  # `from torch import nn`, inside halve()
    }
    assert external["torch.nn"].attrs.get("lazy") is True
    assert "lazy" not in external["torch.nn.Linear"].attrs
    # An import of the package's own module is an import, not an external ref.
    assert "miniext.math_utils.cdiv" in targets(index, compat, "imports")
    # pytest.importorskip("torch") inside a test is a lazy, dynamic external ref.
    test_file = node(index, "tests/test_layernorm.py", "test_file")
    edge = edges_to(index, test_file, "external_ref")["torch"]
    assert edge.attrs.get("dynamic") is True
    # minitorch is not a package of the harness miniext depends on (pytorch: `torch`).
    assert not index.find("minitorch", ["external_symbol"])
    counts = index_status(index)["counts"]["edges"]
    assert counts["external_ref"] == len(index.nodes_of_kind("external_symbol")) >= 8


def test_no_external_refs_without_depends_on(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    assert not index.nodes_of_kind("external_symbol")
