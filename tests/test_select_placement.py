"""Every row of the placement table, on the minitorch fixture: which entities a changed
line stands for, and what runs because of it."""

from __future__ import annotations

import pytest

from tests.select_support import IndexedTree, labels, members, selected, tree_fixtures

LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"
BLAS_CU = "aten/src/ATen/native/cuda/Blas.cu"
ADD_CU = "aten/src/ATen/native/cuda/BinaryAddKernel.cu"
CPUBLAS_H = "aten/src/ATen/native/CPUBlas.h"
RELU_CUH = "aten/src/ATen/native/cuda/Relu.cuh"
NATIVE = "aten/src/ATen/native/native_functions.yaml"
DERIVATIVES = "tools/autograd/derivatives.yaml"


shared, tree = tree_fixtures("minitorch")


def test_line_in_a_cpp_function_is_that_function(tree: IndexedTree) -> None:
    tree.replace(
        LINALG,
        "  return _matmul_impl(tensor1, tensor2);",
        "  return _matmul_impl(tensor1, tensor2.contiguous());",
    )
    selection = tree.select()
    assert labels(selection) == ["at::native::matmul"]
    entity = selection.entities[0]
    assert entity.kind == "cpp_function"
    assert entity.evidence == f"{LINALG}:{tree.line(LINALG, 'tensor2.contiguous()')}"
    assert "test/test_tensor.py" in selected(selection)  # a @ b -> aten::matmul
    assert "test/test_unrelated.py" not in selected(selection)
    assert not selection.run_everything


def test_line_in_a_global_kernel_is_that_kernel(tree: IndexedTree) -> None:
    tree.replace(ADD_CU, "  if (idx < n) {", "  if (idx < n && n > 0) {")
    selection = tree.select()
    assert [(e.label, e.kind) for e in selection.entities] == [
        ("at::native::add_kernel_cuda_impl", "cuda_kernel")
    ]
    assert selection.entities[0].cuda


def test_device_helper_reaches_the_kernels_that_call_it(tree: IndexedTree) -> None:
    tree.replace(ADD_CU, "  return a + alpha * b;", "  return alpha * b + a;")
    selection = tree.select()
    assert labels(selection) == ["at::native::add_with_alpha"]
    chain = selection.files["test/test_ops.py"].reasons[0].chain
    assert chain[0].src == "at::native::add_kernel_cuda_impl"
    assert chain[0].dst == "at::native::add_with_alpha"
    assert chain[0].evidence == f"{ADD_CU}:{tree.line(ADD_CU, 'out[idx] = add_with_alpha(')}"


def test_namespace_scope_constant_selects_the_functions_mentioning_it(tree: IndexedTree) -> None:
    tree.replace(BLAS_CU, "constexpr int kTile = 16;", "constexpr int kTile = 32;")
    selection = tree.select()
    names = members(selection)
    assert {
        "at::native::(anonymous)::gemm_kernel_tiled",
        "at::native::(anonymous)::gemm_cuda_launch",
    } <= names
    assert "at::native::(anonymous)::gemm_kernel" not in names  # does not mention kTile
    assert "at::native::mm_cuda" not in names
    assert "kTile" in selection.entities[0].reason


def test_macro_selects_the_functions_using_it(tree: IndexedTree) -> None:
    tree.replace(
        ADD_CU, "namespace at::native {\n", "namespace at::native {\n\n#define ADD_BLOCK 256\n"
    )
    tree.replace(ADD_CU, "const dim3 block(256);", "const dim3 block(ADD_BLOCK);")
    tree.commit("a block-size macro")
    tree.replace(ADD_CU, "#define ADD_BLOCK 256", "#define ADD_BLOCK 128")
    selection = tree.select()
    assert members(selection) == {"at::native::add_kernel_cuda"}
    assert "ADD_BLOCK" in selection.entities[0].reason


def test_macro_defined_before_an_include_takes_every_function(tree: IndexedTree) -> None:
    tree.replace(
        LINALG, "#define TORCH_ASSERT_ONLY_METHOD_OPERATORS", "#define TORCH_ASSERT_NO_OPERATORS"
    )
    selection = tree.select()
    assert labels(selection) == [f"every definition in {LINALG}"]
    assert "before an #include" in selection.entities[0].reason
    assert {"at::native::matmul", "at::native::mm_cpu"} <= members(selection)


def test_include_change_takes_every_function_of_the_file(tree: IndexedTree) -> None:
    tree.replace(LINALG, "#include <cmath>\n", "#include <cmath>\n#include <vector>\n")
    selection = tree.select()
    assert labels(selection) == [f"every definition in {LINALG}"]
    assert "#include" in selection.entities[0].reason
    assert {"at::native::linear", "at::native::addmm_cpu"} <= members(selection)


def test_header_outside_functions_selects_its_includers(tree: IndexedTree) -> None:
    tree.replace(CPUBLAS_H, "  ConjTranspose,\n", "  ConjTranspose,\n  Hermitian,\n")
    selection = tree.select()
    group = selection.entities[-1]
    assert group.label.startswith("everything in 3 files including")
    assert set(group.members) == {
        LINALG,
        "aten/src/ATen/native/Activation.cpp",
        "aten/src/ATen/native/CPUBlas.cpp",
    }
    assert {"test/test_linalg.py", "test/test_nn.py"} <= selected(selection)


def test_header_function_body_is_that_function_only(tree: IndexedTree) -> None:
    tree.replace(
        RELU_CUH,
        "return x > scalar_t(0) ? x : scalar_t(0);",
        "return x > scalar_t(0) ? x : scalar_t(0.0);",
    )
    selection = tree.select()
    assert labels(selection)[0] == "at::native::relu_scalar"
    assert not any(e.label.startswith("everything in") for e in selection.entities)
    # The templated call relu_scalar<scalar_t>(...) is not resolved, so the fallback
    # widens to its possible users (the definitions of the files including the header);
    # in the fixture those reach no op either (relu_cuda_launch is registered nowhere),
    # so everything runs, naming them.
    widened = selection.entities[1]
    assert widened.label == "possible users of at::native::relu_scalar"
    assert "at::native::relu_kernel" in widened.members
    assert selection.everything == [
        "nothing in the index reaches possible users of at::native::relu_scalar (changed at "
        f"{RELU_CUH}:{tree.line(RELU_CUH, 'scalar_t(0.0)')}): its users are invisible to the "
        "index (generated code, function pointers, dynamic lookup), so any test may reach it"
    ]


def test_native_functions_entry_is_its_op(tree: IndexedTree) -> None:
    tree.replace(NATIVE, "QuantizedCPU: relu_quantized_cpu", "QuantizedCPU: relu_quantized_cpu_v2")
    selection = tree.select()
    assert [(e.label, e.kind) for e in selection.entities] == [("aten::relu", "op")]
    assert "test/test_nn.py" in selected(selection)  # ReLU -> F.relu -> _C.relu


def test_derivatives_entry_is_its_op(tree: IndexedTree) -> None:
    tree.replace(DERIVATIVES, "result: at::mm(self_t, mat2_p)", "result: at::mm(mat2_p, self_t)")
    selection = tree.select()
    assert [(e.label, e.kind) for e in selection.entities] == [("aten::mm", "derivative")]
    reason = selection.files["test/test_ops.py"].reasons[0]
    first = reason.chain[0]
    assert (first.src_kind, first.kind, first.dst_kind) == ("derivative", "derives", "op")


def test_python_function_is_that_function(tree: IndexedTree) -> None:
    tree.replace(
        "minitorch/linalg.py",
        "return _C._linalg.linalg_vector_norm(x, ord, dim, keepdim)",
        "return _C._linalg.linalg_vector_norm(x, float(ord), dim, keepdim)",
    )
    selection = tree.select()
    assert labels(selection) == ["minitorch.linalg.vector_norm"]
    assert "test/test_linalg.py" in selected(selection)
    assert "test/test_nn.py" not in selected(selection)


def test_a_line_replaced_inside_a_python_function_needs_no_base_extraction(
    tree: IndexedTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its base line lies between the same unchanged lines, deeper than the def: the
    same function, without re-extracting the base version of the module."""
    from indexer.select.placement import OldSide

    extracted: list[str] = []
    original = OldSide.extract
    monkeypatch.setattr(
        OldSide,
        "extract",
        lambda self, path, *a: extracted.append(path) or original(self, path, *a),
    )
    tree.replace(
        "minitorch/linalg.py",
        "return _C._linalg.linalg_vector_norm(x, ord, dim, keepdim)",
        "return _C._linalg.linalg_vector_norm(x, float(ord), dim, keepdim)",
    )
    assert labels(tree.select()) == ["minitorch.linalg.vector_norm"]
    assert extracted == []
    # A hunk reaching out to the module's depth is not surely inside: the base is read.
    tree.replace(
        "minitorch/linalg.py",
        "    return Tensor(_backend.norm(_unwrap(x), ord))",
        "    return Tensor(_backend.norm(_unwrap(x), float(ord)))\n_NORM = 1",
    )
    tree.select()
    assert extracted == ["minitorch/linalg.py"]


def test_python_module_level_change_selects_importers(tree: IndexedTree) -> None:
    tree.path("minitorch/special.py").write_text(
        tree.path("minitorch/special.py").read_text() + "\n_CACHE = {}\n"
    )
    selection = tree.select()
    assert labels(selection) == ["minitorch.special"]
    assert "importers" in selection.entities[0].reason
    assert "test/test_special.py" in selected(selection)
    assert "test/test_unrelated.py" not in selected(selection)
    # No import names minitorch.special there, but it imports every module by walking.
    bindings = selection.files["test/test_public_bindings.py"].reasons[0]
    assert bindings.note == (
        "it imports every module (manifest import_every_module), and the import-time code "
        f"at {selection.entities[0].evidence} changed"
    )


def test_function_body_change_leaves_out_tests_importing_every_module(
    tree: IndexedTree,
) -> None:
    tree.replace(
        "minitorch/linalg.py",
        "return _C._linalg.linalg_vector_norm(x, ord, dim, keepdim)",
        "return _C._linalg.linalg_vector_norm(x, float(ord), dim, keepdim)",
    )
    assert "test/test_public_bindings.py" not in selected(tree.select())


def test_a_doc_a_test_reads_by_path_selects_that_test(tree: IndexedTree) -> None:
    """never_affects covers docs, yet test_docs.py executes docs/source/examples.rst."""
    tree.replace("docs/source/examples.rst", "minitorch.add(x, x)", "minitorch.add(x, y)")
    selection = tree.select()
    assert selected(selection) == {"test/test_docs.py"}
    line = tree.line("test/test_docs.py", '"docs/source/examples.rst"')
    [entity] = selection.entities
    assert entity.evidence == f"test/test_docs.py:{line}"
    reason = selection.files["test/test_docs.py"].reasons[0]
    assert reason.note == f"test/test_docs.py:{line} names docs/source/examples.rst, which changed"
    assert selection.changed_files[0].category == "never-affects"


def test_a_doc_runs_everything_when_its_readers_cannot_be_looked_for(
    tree: IndexedTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If git grep fails, a test may read the changed doc for all the selection knows."""
    import subprocess

    from indexer.select import placement

    def failing(source, *args, check=True):
        return subprocess.CompletedProcess(["git", *args], 128, b"", b"fatal: grep broke\n")

    monkeypatch.setattr(placement, "run_git", failing)
    tree.replace("docs/source/examples.rst", "minitorch.add(x, x)", "minitorch.add(x, y)")
    selection = tree.select()
    assert selection.run_everything
    assert selection.everything == [
        "docs/source/examples.rst changed and code reading it could not be looked for "
        "(git grep failed: fatal: grep broke): any test may read it"
    ]


def test_test_file_selects_itself(tree: IndexedTree) -> None:
    tree.replace(
        "test/test_unrelated.py",
        'assert _slugify("Hello  Mini World")',
        'assert _slugify("Hello Mini  World")',
    )
    selection = tree.select()
    assert selected(selection) == {"test/test_unrelated.py"}
    assert (
        selection.files["test/test_unrelated.py"]
        .reasons[0]
        .note.startswith("test/test_unrelated.py changed")
    )


@pytest.mark.parametrize("path", ["CMakeLists.txt", "setup.py", "test/conftest.py"])
def test_run_everything_paths(tree: IndexedTree, path: str) -> None:
    tree.path(path).write_text(tree.path(path).read_text() + "\n# touched\n")
    selection = tree.select()
    assert selection.run_everything
    assert selection.everything[0].startswith(f"{path} matches the run-everything pattern")


@pytest.mark.parametrize("path", ["docs/index.md", "README.md"])
def test_never_affects_paths_select_nothing(tree: IndexedTree, path: str) -> None:
    tree.path(path).write_text(tree.path(path).read_text() + "\nMore prose.\n")
    selection = tree.select()
    assert not selection.run_everything and not selection.files
    assert selection.changed_files[0].category == "never-affects"
    assert (
        selection.empty_reason
        == "the changes touch no code that tests run (comments, docs, whitespace)"
    )


def test_any_other_file_runs_everything_naming_it(tree: IndexedTree) -> None:
    tree.write("tools/codegen/gen.sh", "#!/bin/sh\necho generating\n")
    selection = tree.select()
    assert selection.run_everything
    assert selection.everything == [
        "tools/codegen/gen.sh changed and is not a file the index reads: it may affect any test"
    ]


def test_comment_and_whitespace_only_changes_select_nothing(tree: IndexedTree) -> None:
    tree.replace(
        LINALG,
        "  return _matmul_impl(tensor1, tensor2);",
        "  // The helper handles every rank.\n  return _matmul_impl( tensor1,  tensor2 );",
    )
    tree.replace(
        "minitorch/linalg.py",
        "return _C._linalg.linalg_vector_norm(",
        "# compiled path\n        return _C._linalg.linalg_vector_norm(",
    )
    selection = tree.select()
    assert selection.entities == [] and selection.files == {} and not selection.run_everything
    assert {c.path: (c.code_hunks, c.skipped_hunks) for c in selection.changed_files} == {
        LINALG: (0, 1),
        "minitorch/linalg.py": (0, 1),
    }


def test_commenting_code_out_is_a_change(tree: IndexedTree) -> None:
    tree.replace(LINALG, "  if (dim1 == 1 && dim2 == 2) {", "  /*\n  if (dim1 == 1 && dim2 == 2) {")
    tree.replace(LINALG, "  return tensor1.mm(tensor2);", "  */\n  return tensor1.mm(tensor2);")
    selection = tree.select()
    assert labels(selection) == ["at::native::(anonymous)::_matmul_impl"]


def test_a_type_comment_is_code(tree: IndexedTree) -> None:
    """TorchScript compiles a function by its ``# type:`` comment: changing one is a
    change to the function (an ordinary comment beside it is not)."""
    tree.replace(
        "minitorch/linalg.py",
        "def vector_norm(x, ord=2, dim=None, keepdim=False):",
        "def vector_norm(x, ord=2, dim=None, keepdim=False):  # type: (Tensor, float) -> Tensor",
    )
    selection = tree.select()
    assert labels(selection) == ["minitorch.linalg.vector_norm"]
    assert "test/test_linalg.py" in selected(selection)


def test_unparsable_region_takes_the_whole_file_with_the_reason(tree: IndexedTree) -> None:
    broken = "aten/src/ATen/native/Broken.cpp"
    text = tree.path(broken).read_text()
    damaged = next(
        i
        for i, line in enumerate(text.splitlines(), 1)
        if i > tree.line(broken, "int still_parsed(") and line.strip()
    )
    lines = text.splitlines(keepends=True)
    lines[damaged - 1] = lines[damaged - 1].rstrip("\n") + " /* edited */ ;\n"
    tree.path(broken).write_text("".join(lines))
    selection = tree.select()
    reasons = " ".join(e.reason for e in selection.entities) + " ".join(selection.everything)
    assert "parse" in reasons
    assert selection.run_everything or any(
        e.label == f"every definition in {broken}" for e in selection.entities
    )


def test_deleted_function_selects_what_still_names_it(tree: IndexedTree) -> None:
    start = tree.line(BLAS_CU, "Tensor mm_cuda(const Tensor& self")
    lines = tree.path(BLAS_CU).read_text().splitlines(keepends=True)
    del lines[start - 1 : start + 3]  # the whole definition: signature, two lines, brace
    tree.path(BLAS_CU).write_text("".join(lines))
    selection = tree.select()
    entity = selection.entities[0]
    assert entity.label == "users of removed at::native::mm_cuda"
    assert "aten::mm" in entity.members  # the dispatch table still names it
    assert "test/test_ops.py" in selected(selection)


def test_renamed_file_counts_both_sides(tree: IndexedTree) -> None:
    from tests.helpers import git

    git(tree.root, "mv", "aten/src/ATen/native/ReduceOps.cpp", "aten/src/ATen/native/Reduce.cpp")
    selection = tree.select()
    change = selection.changed_files[0]
    assert (change.status, change.old_path) == ("renamed", "aten/src/ATen/native/ReduceOps.cpp")
    assert change.code_hunks == 1  # the same text under a new path still counts
    assert {"at::native::sum", "at::native::sum_dim"} <= members(selection)
    assert not selection.run_everything
    assert "test/test_tensor.py" in selected(selection)


def test_deleted_test_file_selects_nothing_and_says_why(tree: IndexedTree) -> None:
    tree.path("test/test_unrelated.py").unlink()
    selection = tree.select()
    assert not selection.files and not selection.run_everything
    assert selection.empty_reason.startswith("nothing that changed is used by a test")
    assert "test/test_unrelated.py: test file deleted: nothing left to run in it" in selection.notes


def test_blank_lines_around_a_new_function_are_not_module_level_code(tree: IndexedTree) -> None:
    path = "minitorch/linalg.py"
    tree.path(path).write_text(tree.path(path).read_text() + "\n\ndef _unused():\n    return 1\n")
    selection = tree.select()
    assert labels(selection)[0] == "minitorch.linalg._unused"
    assert not any("module-level" in e.reason for e in selection.entities)
