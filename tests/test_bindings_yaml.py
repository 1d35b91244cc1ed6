"""native_functions.yaml and derivatives.yaml -> op and derivative nodes and their edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.bindings.schema import parse_schema
from indexer.bindings.yaml_entries import RegistryFormatError, read_entries
from indexer.query.index import Index
from tests.bindings_support import build_fixture, one, out_targets
from tests.helpers import line_of

NATIVE = "aten/src/ATen/native/native_functions.yaml"
DERIVATIVES = "tools/autograd/derivatives.yaml"


@pytest.fixture(scope="module")
def minitorch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch")


def test_every_entry_is_an_op_at_its_line(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    ops = {n.qualname: n for n in index.nodes_of_kind("op") if n.path == NATIVE}
    assert set(ops) == {
        "aten::add.Tensor",
        "aten::add_.Tensor",
        "aten::add.out",
        "aten::matmul",
        "aten::mm",
        "aten::addmm",
        "aten::relu",
        "aten::linear",
        "aten::linalg_vector_norm",
        "aten::special_erfcx",
        "aten::sum",
        "aten::sum.dim_IntList",
        "aten::sub.Tensor",
        "aten::sub.out",
        "aten::hypot.out",
    }
    yaml_path = repo / NATIVE
    assert ops["aten::add.out"].line == line_of(yaml_path, "- func: add.out(")
    assert ops["aten::matmul"].line == line_of(yaml_path, "- func: matmul(")
    add_out = ops["aten::add.out"]
    assert add_out.name == "add" and add_out.attrs["overload"] == "out"
    assert add_out.attrs["structured"] is True
    assert add_out.attrs["structured_inherits"] == "TensorIteratorBase"
    # Comma-joined keys are split into one entry per key.
    assert add_out.attrs["dispatch"] == {"CPU": "add_out", "CUDA": "add_out"}
    assert ops["aten::relu"].attrs["dispatch"] == {
        "CPU": "relu",
        "CUDA": "relu",
        "QuantizedCPU": "relu_quantized_cpu",
    }
    assert ops["aten::add.Tensor"].attrs["structured_delegate"] == "add.out"
    assert ops["aten::add.Tensor"].attrs["tags"] == ["core", "pointwise"]
    assert ops["aten::add_.Tensor"].attrs["tags"] == ["pointwise"]
    assert ops["aten::add_.Tensor"].attrs["variants"] == ["method"]
    args = {a["name"]: a for a in ops["aten::add.Tensor"].attrs["arguments"]}
    assert args["alpha"] == {"name": "alpha", "type": "Scalar", "default": "1", "kwarg_only": True}


def test_python_names_follow_variants_and_python_module(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    names = {n.qualname: set(n.attrs["python_names"]) for n in index.nodes_of_kind("op")}
    assert {"torch.add", "torch.Tensor.add", "minitorch.add", "torch.ops.aten.add.Tensor"} <= names[
        "aten::add.Tensor"
    ]
    # method-only: no torch.add_ function spelling
    assert "torch.Tensor.add_" in names["aten::add_.Tensor"]
    assert "torch.add_" not in names["aten::add_.Tensor"]
    assert {
        "torch.nn.functional.linear",
        "torch._C._nn.linear",
        "minitorch.nn.functional.linear",
    } <= names["aten::linear"]
    assert "torch.linear" not in names["aten::linear"]
    assert {"torch.linalg.vector_norm", "minitorch.linalg.vector_norm"} <= names[
        "aten::linalg_vector_norm"
    ]
    assert "torch.special.erfcx" in names["aten::special_erfcx"]
    assert "torch.ops.aten.matmul.default" in names["aten::matmul"]


def test_dispatch_edges_reach_definitions_with_keys(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    native = repo / "aten/src/ATen/native"
    mm = out_targets(index, one(index, "aten::mm", "op"), "dispatches")
    assert mm["at::native::mm_cpu"][0]["key"] == "CPU"
    assert mm["at::native::mm_cuda"][0]["key"] == "CUDA"
    mm_cpu = one(index, "at::native::mm_cpu", "cpp_function")
    assert mm_cpu.line == line_of(native / "LinearAlgebra.cpp", "Tensor mm_cpu(")
    # Structured: the dispatch name add_out is TORCH_IMPL_FUNC(add_out); the meta function
    # comes from the functional overload that delegates to it.
    add_out = out_targets(index, one(index, "aten::add.out", "op"), "dispatches")
    impl = add_out["at::native::structured_add_out::impl"]
    assert sorted(a["key"] for a in impl) == ["CPU", "CUDA"]
    assert one(index, "at::native::structured_add_out::impl", "cpp_function").line == line_of(
        native / "BinaryOps.cpp", "TORCH_IMPL_FUNC(add_out)"
    )
    assert add_out["at::meta::structured_add_Tensor::meta"][0]["key"] == "Meta"
    # structured_delegate: the functional and in-place overloads dispatch to the out op.
    for name in ("aten::add.Tensor", "aten::add_.Tensor"):
        delegate = out_targets(index, one(index, name, "op"), "dispatches")
        assert delegate["aten::add.out"][0]["structured_delegate"] is True
    # No dispatch table: CompositeImplicitAutograd at::native::<name>.
    matmul = out_targets(index, one(index, "aten::matmul", "op"), "dispatches")
    assert matmul["at::native::matmul"][0]["key"] == "CompositeImplicitAutograd"
    assert one(index, "at::native::matmul", "cpp_function").line == line_of(
        native / "LinearAlgebra.cpp", "Tensor matmul("
    )
    relu = out_targets(index, one(index, "aten::relu", "op"), "dispatches")
    assert sorted(a["key"] for a in relu["at::native::relu"]) == ["CPU", "CUDA"]
    assert relu["at::native::relu_quantized_cpu"][0]["key"] == "QuantizedCPU"
    sum_dim = out_targets(index, one(index, "aten::sum.dim_IntList", "op"), "dispatches")
    assert sum_dim["at::native::sum_dim"][0]["key"] == "CompositeExplicitAutograd"


def test_ufunc_inner_loop_edges_to_stub_and_loops(minitorch: tuple[Path, Index]) -> None:
    """torchgen generates a ufunc op's CPU/CUDA kernels: the edges go to what the source
    holds, the stub the generated CPU kernel calls and the inner loops, from the YAML line."""
    repo, index = minitorch
    native = repo / "aten/src/ATen/native"
    loop_line = line_of(native / "native_functions.yaml", "Generic: sub (") - 1
    sub_out = out_targets(index, one(index, "aten::sub.out", "op"), "dispatches")
    [stub] = sub_out["at::native::sub_stub"]
    assert stub["key"] == "CPU"  # the generated CUDA kernel does not go through the stub
    assert stub["evidence"] == f"aten/src/ATen/native/native_functions.yaml:{loop_line}"
    loops = sub_out["at::native::ufunc::sub"]
    assert sorted(a["key"] for a in loops) == ["CPU", "CPU", "CUDA", "CUDA"]  # 2 overloads
    assert one(index, "at::native::sub_stub", "dispatch_stub").line == line_of(
        native / "Subtraction.h", "DECLARE_DISPATCH(structured_binary_fn_alpha, sub_stub)"
    )
    assert "at::meta::structured_sub_Tensor::meta" in sub_out
    # add.out names its CPU/CUDA kernel explicitly: no generated kernel, no ufunc edges.
    add_out = out_targets(index, one(index, "aten::add.out", "op"), "dispatches")
    assert not any("ufunc" in target or target.endswith("_stub") for target in add_out)


def test_derivatives_link_to_op_and_formula_calls(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    entries = {n.qualname: n for n in index.nodes_of_kind("derivative")}
    assert set(entries) == {"aten::add.Tensor", "aten::mm", "aten::relu", "aten::sum"}
    assert "aten::matmul" not in entries  # deliberately absent
    mm = entries["aten::mm"]
    assert mm.line == line_of(repo / DERIVATIVES, "- name: mm(")
    assert mm.attrs["formulas"]["self"].startswith("mm_mat1_backward(")
    derives = out_targets(index, mm, "derives")
    assert "aten::mm" in derives  # the op, exact overload
    add = out_targets(index, entries["aten::add.Tensor"], "derives")
    assert "aten::add.Tensor" in add and "aten::add.out" not in add
    # The functions formulas call are refs (they live in FunctionsManual.cpp, absent here).
    rows = index.conn.execute(
        "SELECT target FROM refs WHERE src_id = ? AND kind = 'derives' AND scheme = 'cpp'",
        (mm.id,),
    ).fetchall()
    assert {"mm_mat1_backward", "mm_mat2_backward", "at::mm"} <= {row[0] for row in rows}


def test_schema_parsing() -> None:
    schema = parse_schema(
        "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"
    )
    assert schema is not None
    assert (schema.name, schema.overload, schema.returns) == ("sum", "dim_IntList", "Tensor")
    assert [a.name for a in schema.arguments] == ["self", "dim", "keepdim", "dtype"]
    assert schema.arguments[3].kwarg_only and not schema.arguments[2].kwarg_only
    out = parse_schema(
        "add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"
    )
    assert out is not None and out.is_out
    string_default = parse_schema('f(str kv="auto", Tensor!? key=None) -> ()')
    assert string_default is not None
    assert string_default.arguments[0].default == '"auto"'
    bare = parse_schema("minitorch_legacy::scale")
    assert bare is not None and bare.namespace == "minitorch_legacy" and not bare.has_signature
    assert parse_schema("not a schema (") is None


def test_entries_keep_lines_and_bad_yaml_is_a_clear_error() -> None:
    entries = read_entries("# c\n- func: a(Tensor x) -> Tensor\n  dispatch:\n    CPU, CUDA: a\n")
    assert entries[0].line == 2
    assert entries[0].nested_lines["dispatch"]["CPU, CUDA"] == 4
    with pytest.raises(RegistryFormatError, match="line 2"):
        read_entries("- func: a(\n  - : : [\n")
    with pytest.raises(RegistryFormatError, match="list of entries"):
        read_entries("func: a\n")


def test_malformed_registry_is_reported_not_fatal(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.mktemp("broken-yaml")
    from tests.helpers import commit_all, make_fixture_repo

    repo = make_fixture_repo("minitorch", base / "minitorch")
    (repo / DERIVATIVES).write_text("- name: [unclosed\n")
    commit_all(repo, "break derivatives.yaml")
    from indexer.build import build_index
    from indexer.workspace import Workspace

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(base / "cache"))
        result = build_index(Workspace.resolve(repo), show_progress=False)
    index = Index(result.db_path)
    errors = {path: error for path, _, _, _, _, error in index.file_rows()}
    assert "invalid YAML" in (errors[DERIVATIVES] or "")
    assert index.nodes_of_kind("op")  # the other registry is still indexed
