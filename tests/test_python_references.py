"""References from Python code to what it names: ops through torch.ops, bindings through
_C, Python definitions through aliases and re-exports, Tensor methods."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Index
from tests.helpers import line_of
from tests.pyindex import build_fixture, edges_to, node, targets

ALIASES = '''"""Aliases of every kind, and names that are not the index's."""

import numpy as np
import minitorch.nn.functional as F
from minitorch.functional import add as plus
from minitorch import ops

fused_ops = ops.minitorch


def combine(x):
    y = np.asarray(x)
    return plus(F.relu(x), fused_ops.fused_relu(y))


def shadowed(F):
    return F.relu(1)


def methods(t):
    t.add_(t)
    return t.format(1), t @ t
'''


@pytest.fixture(scope="module")
def minitorch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch", {"minitorch/aliases.py": ALIASES})


@pytest.fixture(scope="module")
def miniext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "miniext")


def test_torch_ops_namespace_reaches_the_op(miniext: tuple[Path, Index]) -> None:
    repo, index = miniext
    rms_norm = node(index, "miniext._custom_ops.rms_norm", "python_function")
    edge = edges_to(index, rms_norm, "references")["_C::rms_norm"]
    assert index.node(edge.dst).kind == "op"
    assert edge.line == line_of(repo / "miniext/_custom_ops.py", "torch.ops._C.rms_norm(")
    forward = node(index, "miniext.layers.activation.SiluAndMul.forward", "python_function")
    assert "_C::silu_and_mul" in targets(index, forward, "references")


def test_module_level_alias_of_an_ops_namespace(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    gelu = node(index, "minitorch.fused.gelu", "python_function")
    edge = edges_to(index, gelu, "references")["minitorch::fused_gelu"]
    assert edge.line == line_of(repo / "minitorch/fused.py", "_ops.fused_gelu(x)")
    scaled = node(index, "minitorch.fused.scaled_gelu", "python_function")
    assert {"minitorch::scale", "minitorch.fused.gelu"} <= targets(index, scaled, "references")


def test_bindings_through_the_c_extension(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    mm = node(index, "minitorch.functional.mm", "python_function")
    edge = edges_to(index, mm, "references")["minitorch._C._mm"]
    assert index.node(edge.dst).kind == "binding"
    assert edge.line == line_of(repo / "minitorch/functional.py", "_C._mm(input, mat2)")
    linear = node(index, "minitorch.nn.functional.linear", "python_function")
    assert "aten::linear" in targets(index, linear, "references")
    # A lazy `from . import _C` binds _C inside the function only.
    norm = node(index, "minitorch.linalg.vector_norm", "python_function")
    assert "aten::linalg_vector_norm" in targets(index, norm, "references")
    # _C.relu is the generated binding of the function variant: the op torch.relu is.
    relu = node(index, "minitorch.nn.functional.relu", "python_function")
    assert "aten::relu" in targets(index, relu, "references")


def test_import_as_and_from_import_as_are_expanded(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    combine = node(index, "minitorch.aliases.combine", "python_function")
    used = edges_to(index, combine, "references")
    source = repo / "minitorch/aliases.py"
    line = line_of(source, "return plus(F.relu(x)")
    assert used["minitorch.functional.add"].line == line
    assert used["minitorch.nn.functional.relu"].line == line
    assert used["minitorch::fused_relu"].line == line  # through `fused_ops = ops.minitorch`
    # numpy is not part of the index: no ref was even recorded.
    assert not index.conn.execute(
        "SELECT 1 FROM refs WHERE target LIKE 'numpy%' OR target LIKE 'np.%'"
    ).fetchall()


def test_a_parameter_hides_a_module_alias(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    shadowed = node(index, "minitorch.aliases.shadowed", "python_function")
    assert "minitorch.nn.functional.relu" not in targets(index, shadowed, "references")


def test_tensor_method_calls_reach_method_ops_only(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    methods = node(index, "minitorch.aliases.methods", "python_function")
    used = edges_to(index, methods, "references")
    assert used["aten::add_.Tensor"].attrs.get("method") is True
    assert used["aten::add_.Tensor"].line == line_of(repo / "minitorch/aliases.py", "t.add_(t)")
    assert used["aten::matmul"].attrs.get("operator") == "@"
    # add_ exists only as a method: the function-only spellings of other ops do not match.
    for target in used:
        op = node(index, target)
        if op.kind == "op":
            names = op.attrs.get("python_names", [])
            assert any(".Tensor." in name for name in names), target
    # A builtin-only method name is not recorded at all.
    assert not index.conn.execute("SELECT 1 FROM refs WHERE target = '.format'").fetchall()


def test_test_code_uses_become_covers_edges(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    test = node(index, "test/test_tensor.py::test_add_inplace_returns_self", "test_function")
    covered = edges_to(index, test, "covers")
    assert covered["aten::add_.Tensor"].line == line_of(
        repo / "test/test_tensor.py", "small_tensor.add_("
    )
    assert "minitorch.tensor.Tensor" in covered
    # self.<method> in a unittest class resolves through the bases to the helper.
    special = node(index, "test/test_special.py::TestSpecial::test_erfcx_small", "test_function")
    assert {
        "minitorch.testing._internal.common_utils.TestCase.assertClose",
        "minitorch.special.erfcx",
    } <= targets(index, special, "covers")


def test_opinfo_op_functions_are_references(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    add = node(index, "op_db:add", "opinfo")
    assert "minitorch.functional.add" in targets(index, add, "references")
    # A lambda's body counts: `op=lambda x: minitorch.sum(x, dim=0)`.
    sum_dim = node(index, "op_db:sum.dim", "opinfo")
    assert "minitorch.functional.sum" in targets(index, sum_dim, "references")


def test_classes_record_the_methods_they_hand_out_as_values(
    minitorch: tuple[Path, Index],
) -> None:
    """``return self.forward_cuda`` (read, not called) is recorded on the class; an
    attribute the class assigns (``self._forward_method = ...``) is data, not a method."""
    _, index = minitorch
    custom_op = node(index, "minitorch.nn.modules.custom_op.CustomOp", "python_class")
    assert custom_op.attrs["value_methods"] == ["forward_cuda", "forward_native"]
    gelu = node(index, "minitorch.nn.modules.custom_op.GELUTanh", "python_class")
    assert "value_methods" not in gelu.attrs  # it only defines them


def test_ops_named_through_torch_ops_module_are_ops(minitorch: tuple[Path, Index]) -> None:
    """``aten = torch._ops.ops.aten`` then ``@register_decomposition(aten.relu)``: the
    decorator names the op (the module torch._ops exists, yet the op is what is meant)."""
    repo, index = minitorch
    relu = node(index, "minitorch._refs.relu", "python_function")
    line = line_of(repo / "minitorch/_refs.py", "@register_decomposition(aten.relu)")
    assert ("aten::relu", line) in {
        (index.node(e.dst).qualname, e.line) for e in index.out_edges(relu.id, ["references"])
    }
