"""Each propagation path, from a changed entity to the tests that reach it, with the
evidence chain (file:line at every hop) the selection carries."""

from __future__ import annotations

from tests.select_support import IndexedTree, chain_nodes, selected, tree_fixtures

LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"


shared, tree = tree_fixtures("minitorch")


def _hops(selection, path: str) -> list[tuple[str, str, str]]:
    return [(h.src, h.kind, h.dst) for h in selection.files[path].reasons[0].chain]


def test_every_hop_carries_file_and_line_evidence(tree: IndexedTree) -> None:
    tree.replace(
        LINALG, "check_dim_size(m1, 2);", "check_dim_size(m1, 2);\n  check_dim_size(m1.sizes(), 2);"
    )
    selection = tree.select()
    assert selection.files
    for selected_file in selection.files.values():
        for reason in selected_file.reasons:
            for hop in reason.chain:
                path, _, line = hop.evidence.rpartition(":")
                assert (tree.root / path).is_file() and int(line) > 0, hop


def test_cpp_call_chain_to_op_to_python_wrapper_to_test(tree: IndexedTree) -> None:
    """addmm_impl_cpu_ <- addmm_cpu <- aten::addmm <- at::native::linear (at::addmm)
    <- _C._nn.linear <- F.linear <- Linear <- test_nn."""
    tree.replace(LINALG, "const int64_t k = m1.sizes()[1];", "const int64_t k = m1.size(1);")
    selection = tree.select()
    nodes = chain_nodes(selection, "test/test_nn.py")
    assert nodes[0] == "at::native::addmm_impl_cpu_"
    assert "aten::addmm" in nodes and "at::native::linear" in nodes  # via at::addmm(...)
    assert "minitorch.nn.functional.linear" in nodes  # the Python wrapper
    hops = _hops(selection, "test/test_nn.py")
    assert hops[0] == ("at::native::addmm_cpu", "calls", "at::native::addmm_impl_cpu_")
    assert hops[-1][1] == "covers"  # the last hop is the test's own
    wrapper = [
        h
        for h in selection.files["test/test_nn.py"].reasons[0].chain
        if h.src == "minitorch.nn.functional.linear"
    ]
    line = tree.line("minitorch/nn/functional.py", "minitorch._C._nn.linear(")
    assert wrapper[0].evidence == f"minitorch/nn/functional.py:{line}"
    assert "test/test_unrelated.py" not in selected(selection)


def test_stub_kernel_to_op_to_opinfo_tests(tree: IndexedTree) -> None:
    kernel = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
    tree.replace(kernel, "      return a + alpha * b;", "      return alpha * b + a;")
    selection = tree.select()
    nodes = chain_nodes(selection, "test/test_ops.py")
    assert nodes[0] == "at::native::(anonymous)::add_kernel"
    assert "at::native::add_stub" in nodes
    assert "op_db:add" in nodes
    ops = selection.files["test/test_ops.py"]
    assert ops.tests is not None  # narrowed: only the @ops tests, only the add OpInfo
    assert {(t.cls, t.function) for t in ops.tests} == {
        ("TestCommon", "test_compare_cpu"),
        ("TestCommon", "test_aten_name"),
        ("TestCommon", "test_has_reference"),  # @_float_ops: an alias of ops(...)
    }
    assert all(t.opinfos == ["add"] for t in ops.tests)
    # Reached only through @_gradcheck_ops(op_db), an alias made with partial(ops, ...).
    gradients = selection.files["test/test_ops_gradients.py"]
    assert [(t.cls, t.function, t.opinfos) for t in gradients.tests or []] == [
        ("TestBwdGradients", "test_fn_grad", ["add"])
    ]
    assert ops.devices is None  # CPU code changed: every device runs
    # minitorch.add(...) is called directly there too: the whole file runs.
    assert selection.files["test/test_binary_ufuncs.py"].tests is None


def test_cuda_kernel_to_op_to_cuda_test_variants(tree: IndexedTree) -> None:
    kernel = "aten/src/ATen/native/cuda/BinaryAddKernel.cu"
    tree.replace(kernel, "  if (idx < n) {", "  if (idx < n && n > 0) {")
    selection = tree.select()
    assert all(e.cuda for e in selection.entities)
    nodes = chain_nodes(selection, "test/test_ops.py")
    assert nodes[0] == "at::native::add_kernel_cuda_impl"
    ops = selection.files["test/test_ops.py"]
    assert ops.devices == ["cuda"] and ops.device_classes == ["TestCommon"]
    assert all(t.opinfos == ["add"] for t in ops.tests or [])
    launches = [h for h in ops.reasons[0].chain if h.kind == "launches"]
    assert launches and launches[0].src == "at::native::add_kernel_cuda"


def test_python_module_to_importer_tests(tree: IndexedTree) -> None:
    path = "minitorch/nn/functional.py"
    tree.path(path).write_text(tree.path(path).read_text() + "\n_DEFAULT_EPS = 1e-6\n")
    selection = tree.select()
    assert selection.entities[0].label == "minitorch.nn.functional"
    hops = _hops(selection, "test/nn/test_init.py")
    assert ("minitorch.nn", "imports", "minitorch.nn.functional") in hops
    assert "test/test_unrelated.py" not in selected(selection)


def test_method_handed_out_as_a_value_reaches_its_class_users(tree: IndexedTree) -> None:
    """vLLM's CustomOp: ``forward`` runs what ``dispatch_forward`` returned, the bound
    ``self.forward_cuda``; a subclass's ``forward_cuda`` runs wherever that subclass does,
    though nothing calls it by name there."""
    path = "minitorch/nn/modules/custom_op.py"
    tree.replace(path, "return F.gelu(input)  # the fused kernel", "return F.gelu(input.data)")
    selection = tree.select()
    assert [e.label for e in selection.entities] == [
        "minitorch.nn.modules.custom_op.GELUTanh.forward_cuda"
    ]
    files = selected(selection)
    assert "test/nn/test_custom_op.py" in files  # GELUTanh()(x): no call names forward_cuda
    assert "test/nn/test_custom_op_direct.py" in files  # .forward_cuda(...) by name
    assert "test/nn/test_softplus.py" not in files  # another CustomOp
    assert not selection.everything


def test_yaml_entry_to_op_tests(tree: IndexedTree) -> None:
    yaml = "aten/src/ATen/native/native_functions.yaml"
    tree.replace(yaml, "QuantizedCPU: relu_quantized_cpu", "QuantizedCPU: relu_quantized_cpu_v2")
    selection = tree.select()
    assert chain_nodes(selection, "test/test_ops.py")[:2] == ["aten::relu", "op_db:relu"]
    assert [t.opinfos for t in selection.files["test/test_ops.py"].tests] == [["relu"]] * 3
    assert [t.opinfos for t in selection.files["test/test_ops_gradients.py"].tests] == [["relu"]]
    assert "test/test_nn.py" in selected(selection)  # ReLU module -> F.relu -> _C.relu
    assert "test/test_linalg.py" not in selected(selection)


def test_header_to_includers(tree: IndexedTree) -> None:
    header = "aten/src/ATen/native/CPUBlas.h"
    tree.replace(
        header,
        "void scale_(int64_t n, double alpha, double* x);",
        "void scale_(int64_t n, double alpha, double* x);\nvoid scale_(int64_t n, float alpha, float* x);",
    )
    selection = tree.select()
    group = selection.entities[-1]
    assert LINALG in group.members
    assert {"test/test_linalg.py", "test/test_nn.py", "test/test_tensor.py"} <= selected(selection)
    assert selection.files["test/test_linalg.py"].reasons[0].entity == group.label


def test_cycles_and_depth_are_not_capped(tree: IndexedTree) -> None:
    """A recursive helper (a cycle in the call graph) still reaches its tests."""
    tree.replace(
        LINALG,
        "static void check_dim_size(const Tensor& tensor, int64_t dim) {\n",
        "static void check_dim_size(const Tensor& tensor, int64_t dim) {\n  if (dim < 0) { check_dim_size(tensor, -dim); return; }\n",
    )
    tree.commit("a recursive helper")
    tree.replace(
        LINALG, "check_dim_size(tensor, -dim); return;", "check_dim_size(tensor, 0 - dim); return;"
    )
    selection = tree.select()
    assert [e.label for e in selection.entities] == ["at::native::check_dim_size"]
    assert {"test/test_linalg.py", "test/test_nn.py"} <= selected(selection)


def test_function_no_resolved_call_reaches_widens_to_its_possible_users(tree: IndexedTree) -> None:
    """A method called through a template parameter (``counter.count(t)``) is a call the
    resolver cannot type: the selection widens to the calls naming it and the file's other
    definitions, and runs their tests rather than everything."""
    tree.replace(
        LINALG,
        "Tensor mm_cpu(const Tensor& self, const Tensor& mat2) {\n",
        "struct RowCounter {\n"
        "  int64_t count(const Tensor& t) const { return t.size(0); }\n"
        "};\n\n"
        "template <typename Counter>\n"
        "static int64_t rows_of(const Counter& counter, const Tensor& t) {\n"
        "  return counter.count(t);\n"
        "}\n\n"
        "Tensor mm_cpu(const Tensor& self, const Tensor& mat2) {\n"
        "  (void)rows_of(RowCounter{}, self);\n",
    )
    tree.commit("a helper called through a template")
    tree.replace(LINALG, "return t.size(0); }", "return t.size(0) + 0; }")
    selection = tree.select()
    assert [e.label for e in selection.entities] == [
        "at::native::RowCounter::count",
        "possible users of at::native::RowCounter::count",
    ]
    assert "at::native::mm_cpu" in selection.entities[1].members
    assert not selection.run_everything
    assert {"test/test_linalg.py", "test/test_tensor.py"} <= selected(selection)
    assert "test/test_unrelated.py" not in selected(selection)
