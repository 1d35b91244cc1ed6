"""TORCH_LIBRARY, RegisterOperators, stable-ABI and wrapper registrations; pybind11 and
PyMethodDef bindings; and the code the preprocessor or a comment removes."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.bindings.registrations import RegistrationExtractor
from indexer.extract.source import SourceFile
from indexer.graph.facts import FileFacts
from indexer.harness import load_harness
from indexer.query.index import Index
from tests.bindings_support import build_fixture, one, out_targets
from tests.helpers import line_of

CUSTOM_OPS = "minitorch/csrc/custom_ops.cpp"


@pytest.fixture(scope="module")
def minitorch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "minitorch")


@pytest.fixture(scope="module")
def miniext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "miniext")


def dispatches(index: Index, qualname: str, kind: str = "op") -> dict[str, list[dict]]:
    return out_targets(index, one(index, qualname, kind), "dispatches")


def test_torch_library_defs_with_any_variable_name(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    source = repo / CUSTOM_OPS
    gelu = one(index, "minitorch::fused_gelu", "op")
    assert (gelu.path, gelu.line) == (CUSTOM_OPS, line_of(source, 'lib.def("fused_gelu('))
    assert gelu.attrs["schema"] == "minitorch::fused_gelu(Tensor x) -> Tensor"
    assert {"torch.ops.minitorch.fused_gelu", "minitorch.ops.minitorch.fused_gelu"} <= set(
        gelu.attrs["python_names"]
    )
    # m.def(name, fn): the op and its catch-all kernel.
    scale = dispatches(index, "minitorch::scale")
    keys = sorted(a["key"] for a in scale["(anonymous)::scale_impl"])
    assert keys == ["CPU", "CompositeImplicitAutograd"]  # def(name, fn) + impl(torch::dispatch)


def test_torch_library_impl_forms(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    source = repo / CUSTOM_OPS
    gelu = dispatches(index, "minitorch::fused_gelu")
    cpu = gelu["(anonymous)::fused_gelu_cpu"][0]
    assert cpu["key"] == "CPU"
    impl_line = line_of(source, 'lib.impl("fused_gelu"')
    assert cpu["evidence"] == f"{CUSTOM_OPS}:{impl_line}"
    backward = dispatches(index, "minitorch::fused_gelu_backward")  # TORCH_FN(fn)
    assert backward["(anonymous)::fused_gelu_backward_cpu"][0]["key"] == "CPU"
    # A lambda registers the functions it calls (at::clamp_min is generated: a ref only).
    relu = one(index, "minitorch::fused_relu", "op")
    rows = index.conn.execute(
        "SELECT target, attrs FROM refs WHERE src_id = ? AND kind = 'dispatches' AND scheme = 'cpp'",
        (relu.id,),
    ).fetchall()
    assert [(target, '"via":"lambda"' in attrs) for target, attrs in rows] == [
        ("at::clamp_min", True)
    ]


def test_impl_in_another_file_is_a_registration_the_op_reaches(
    minitorch: tuple[Path, Index],
) -> None:
    repo, index = minitorch
    registration = one(index, "minitorch::fused_gelu", "registration")
    assert registration.path == "minitorch/csrc/custom_ops_cuda.cu"
    assert registration.attrs["impl_keys"] == ["CUDA"]
    kernel = out_targets(index, registration, "dispatches")["minitorch::fused_gelu_cuda"][0]
    assert kernel["key"] == "CUDA"
    cuda = one(index, "minitorch::fused_gelu_cuda", "cpp_function")
    assert cuda.line == line_of(repo / "minitorch/csrc/custom_ops_cuda.cu", "fused_gelu_cuda(")
    op_edges = dispatches(index, "minitorch::fused_gelu")
    assert op_edges["minitorch::fused_gelu"][0]["keys"] == ["CUDA"]  # op -> registration


def test_register_operators_chain_and_one_name_in_two_namespaces(
    minitorch: tuple[Path, Index],
) -> None:
    repo, index = minitorch
    source = repo / CUSTOM_OPS
    for name in ("clamp_all", "shift", "scale"):
        op = one(index, f"minitorch_legacy::{name}", "op")
        assert op.line == line_of(source, f'"minitorch_legacy::{name}"')
        assert op.attrs["source"] == "RegisterOperators"
        targets = dispatches(index, op.qualname)
        assert targets[f"(anonymous)::{name}_impl"][0]["key"] == "CompositeImplicitAutograd"
    ours = one(index, "minitorch::scale", "op")
    legacy = one(index, "minitorch_legacy::scale", "op")
    assert ours.id != legacy.id
    assert "torch.ops.minitorch.scale" in ours.attrs["python_names"]
    assert "torch.ops.minitorch.scale" not in legacy.attrs["python_names"]


def test_stable_abi_trio(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    square = one(index, "minitorch_stable::square", "op")
    assert square.attrs["source"] == "STABLE_TORCH_LIBRARY"
    assert (
        out_targets(index, square, "dispatches")["(anonymous)::boxed_stable_square"][0]["key"]
        == "CPU"
    )
    backward = one(index, "minitorch_stable::square_backward", "op")
    assert backward.attrs["source"] == "STABLE_TORCH_LIBRARY_FRAGMENT"


def test_preprocessed_out_and_commented_registrations_are_absent(
    minitorch: tuple[Path, Index],
) -> None:
    repo, index = minitorch
    names = {n.qualname for n in index.nodes_of_kind("op")} | {
        n.qualname for n in index.nodes_of_kind("registration")
    }
    assert not any("ghost" in name for name in names)
    real = one(index, "minitorch::real_op", "op")
    disabled = repo / "aten/src/ATen/native/Disabled.cpp"
    assert real.line == line_of(disabled, 'm.def("real_op(')
    # m.impl(name, c10::DispatchKey::CPU, TORCH_FN(fn)): the three-argument form.
    assert dispatches(index, "minitorch::real_op")["at::native::real_op_cpu"][0]["key"] == "CPU"


def test_pybind11_module_submodules_and_class_chain(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    source = repo / "minitorch/csrc/python_bindings.cpp"
    mm = one(index, "minitorch._C._mm", "binding")
    assert mm.line == line_of(source, 'mod.def("_mm"')
    assert "at::native::mm_cpu" in out_targets(index, mm, "binds")
    linear = one(index, "minitorch._C._nn.linear", "binding")  # def_submodule + lambda
    assert "at::native::linear" in out_targets(index, linear, "binds")
    norm = one(index, "minitorch._C._linalg.linalg_vector_norm", "binding")
    assert "at::native::linalg_vector_norm" in out_targets(index, norm, "binds")
    cls = one(index, "minitorch._C.Generator", "binding")
    assert "minitorch::Generator" in out_targets(index, cls, "binds")
    assert "minitorch::Generator::seed" in out_targets(
        index, one(index, "minitorch._C.Generator.seed", "binding"), "binds"
    )
    static = one(index, "minitorch._C.Generator.default", "binding")
    assert static.attrs["form"] == "pybind_static"
    assert "minitorch::Generator::default_generator" in out_targets(index, static, "binds")
    prop = out_targets(index, one(index, "minitorch._C.Generator.state", "binding"), "binds")
    assert {"minitorch::Generator::get_state", "minitorch::Generator::set_state"} <= set(prop)
    field = one(index, "minitorch._C.Generator.offset", "binding")
    assert field.attrs["form"] == "pybind_field"
    assert field.attrs["member"] == "Generator::offset"  # a data member: named, not linked
    assert field.attrs["python_names"] == ["minitorch._C.Generator.offset"]


def test_pymethoddef_table(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    binding = one(index, "minitorch._C._set_grad_enabled", "binding")
    assert binding.attrs["form"] == "pymethoddef" and binding.attrs["table"] == "TorchMethods"
    assert binding.line == line_of(repo / "minitorch/csrc/Module.cpp", '{"_set_grad_enabled"')
    target = one(index, "THPModule_setGradEnabled", "cpp_function")
    assert target.qualname in out_targets(index, binding, "binds")
    assert {
        "minitorch._C.is_grad_enabled",
        "minitorch._C.get_num_threads",
        "minitorch._C._crash_if_csrc_asan",
    } <= {n.qualname for n in index.nodes_of_kind("binding")}


def test_extension_wrapper_macro_alias_and_three_argument_impl(
    miniext: tuple[Path, Index],
) -> None:
    repo, index = miniext
    bindings = repo / "csrc/torch_bindings.cpp"
    rms = one(index, "_C::rms_norm", "op")
    assert rms.line == line_of(bindings, "ops.def(") and rms.path == "csrc/torch_bindings.cpp"
    assert "torch.ops._C.rms_norm" in rms.attrs["python_names"]
    host = out_targets(index, rms, "dispatches")["rms_norm"][0]
    assert host["key"] == "CUDA"
    impl_line = line_of(bindings, 'ops.impl("rms_norm"')
    assert host["evidence"] == f"csrc/torch_bindings.cpp:{impl_line}"
    definition = one(index, "rms_norm", "cpp_function")
    assert definition.path == "csrc/layernorm_kernels.cu"
    for name in ("silu_and_mul", "rotary_embedding"):
        assert name in out_targets(index, one(index, f"_C::{name}", "op"), "dispatches")
    quant = one(index, "_C::scaled_fp8_quant", "op")
    assert quant.attrs["source"] == "STABLE_TORCH_LIBRARY_FRAGMENT"
    assert "(anonymous)::boxed_scaled_fp8_quant" in out_targets(index, quant, "dispatches")


# --- forms the fixtures do not spell: the extractor on real snippets ---------------------


def extract(code: str, path: str = "torch/csrc/snippet.cpp", harness: str = "pytorch") -> FileFacts:
    data = code.encode()
    facts = FileFacts(path, "cpp", "", len(data))
    facts.add_node("file", path.rsplit("/", 1)[-1], path, 1, 1, None)
    extractor = RegistrationExtractor(load_harness(harness))
    source = SourceFile(path, data, "cpp")
    assert extractor.wants(source)
    extractor.extract(source, facts)
    return facts


def nodes(facts: FileFacts, kind: str) -> dict[str, int]:
    return {n.qualname: n.line for n in facts.nodes if n.kind == kind}


def refs(facts: FileFacts, kind: str) -> list[tuple[str, str, str | None]]:
    return [
        (facts.nodes[r.src].qualname, r.target or "", r.attrs.get("key"))
        for r in facts.refs
        if r.kind == kind and r.scheme == "cpp"
    ]


def test_preprocessor_branches_and_comments() -> None:
    facts = extract(
        """
#if 0
TORCH_LIBRARY(dead, m) { m.def("a(Tensor x) -> Tensor"); }
#else
TORCH_LIBRARY(live, m) { m.def("b(Tensor x) -> Tensor"); }
#endif
#if 1
TORCH_LIBRARY_FRAGMENT(live, m) { m.def("c(Tensor x) -> Tensor"); }
#else
TORCH_LIBRARY_FRAGMENT(live, m) { m.def("dead_c(Tensor x) -> Tensor"); }
#endif
/* TORCH_LIBRARY(commented, m) { m.def("d(Tensor x) -> Tensor"); } */
TORCH_LIBRARY_FRAGMENT(live, m) {
  /* m.def("e(Tensor x) -> Tensor"); */
  const char* text = "TORCH_LIBRARY(in_string, m)";
  m.def("f(Tensor x) -> Tensor");
}
"""
    )
    assert set(nodes(facts, "op")) == {"live::b", "live::c", "live::f"}


def test_selective_names_key_forms_and_other_namespace_registrations() -> None:
    facts = extract(
        """
namespace at::native {
Tensor relu_quantized_cuda(const Tensor& x);
TORCH_LIBRARY_IMPL(aten, QuantizedCPU, m) {
  m.impl(TORCH_SELECTIVE_NAME("aten::relu"), TORCH_FN(relu_quantized_cpu));
  m.impl("add.Tensor", torch::CppFunction::makeFromBoxedFunction<&boxed_add>());
}
TORCH_LIBRARY_IMPL(quantized, CUDA, m) {
  m.impl("qrelu", at::kCUDA, relu_quantized_cuda);
}
TORCH_LIBRARY(quantized, m) {
  m.def(TORCH_SELECTIVE_SCHEMA("quantized::qrelu(Tensor x) -> Tensor"));
}
}
"""
    )
    assert set(nodes(facts, "registration")) == {"aten::relu", "aten::add.Tensor"}
    assert "quantized::qrelu" in nodes(facts, "op")
    found = refs(facts, "dispatches")
    assert ("aten::relu", "relu_quantized_cpu", "QuantizedCPU") in found
    assert ("aten::add.Tensor", "boxed_add", "QuantizedCPU") in found
    # The impl names an op this file defines: an edge from the op itself, key from kCUDA.
    assert ("quantized::qrelu", "relu_quantized_cuda", "CUDA") in found
    scopes = {r.target: r.attrs["scope"] for r in facts.refs if r.scheme == "cpp"}
    assert scopes["relu_quantized_cpu"] == ["at", "native"]


def test_pybind_module_obtained_from_a_pyobject_and_method_table_wrappers() -> None:
    facts = extract(
        """
namespace torch::jit {
static PyObject* THPModule_foo(PyObject* self, PyObject* args, PyObject* kwargs);
static PyMethodDef methods[] = {
    {"_foo", castPyCFunctionWithKeywords(THPModule_foo), METH_VARARGS | METH_KEYWORDS, nullptr},
    {"_bar", (PyCFunction)(void (*)(void))THPModule_bar, METH_NOARGS, nullptr},
#if 0
    {"_ghost", THPModule_ghost, METH_NOARGS, nullptr},
#endif
    {nullptr}};
void initJitBindings(PyObject* module) {
  auto m = py::handle(module).cast<py::module>();
  auto jit = m.def_submodule("_jit");
  jit.def("_run", [](int x) { return run_graph(x); });
  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
      .def("dump", &Graph::dump)
      .def_property_readonly("name", &Graph::name);
  m.def("_compile", py::overload_cast<int>(&compile));
}
}
"""
    )
    bindings = nodes(facts, "binding")
    assert {
        "torch._C._foo",
        "torch._C._bar",
        "torch._C._jit._run",
        "torch._C.Graph",
        "torch._C.Graph.dump",
        "torch._C.Graph.name",
        "torch._C._compile",
    } <= set(bindings)
    assert "torch._C._ghost" not in bindings
    found = {(src, target) for src, target, _ in refs(facts, "binds")}
    assert {
        ("torch._C._foo", "THPModule_foo"),
        ("torch._C._bar", "THPModule_bar"),
        ("torch._C._jit._run", "run_graph"),
        ("torch._C.Graph", "Graph"),
        ("torch._C.Graph.dump", "Graph::dump"),
        ("torch._C._compile", "compile"),
    } <= found


def test_wrapper_macros_from_the_manifest_and_the_file() -> None:
    code = """
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("rms_norm(Tensor! out, Tensor input) -> ()");
  ops.impl("rms_norm", torch::kCUDA, &rms_norm);
}
"""
    assert "_C::rms_norm" not in nodes(extract(code, "csrc/b.cpp", "torch-extension"), "op")
    assert "_C::rms_norm" in nodes(extract(code, "csrc/b.cpp", "vllm"), "op")
    local = "#define MY_LIB(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)\n" + code.replace(
        "TORCH_LIBRARY_EXPAND", "MY_LIB"
    )
    assert "_C::rms_norm" in nodes(extract(local, "csrc/b.cpp", "torch-extension"), "op")


def test_method_table_of_a_python_type_binds_under_the_type_name() -> None:
    facts = extract(
        """
static PyObject* THPGenerator_seed(PyObject* self, PyObject* noargs);
static PyMethodDef THPGenerator_methods[] = {
    {"seed", THPGenerator_seed, METH_NOARGS, nullptr},
    {nullptr}};
PyTypeObject THPGeneratorType = {
    PyVarObject_HEAD_INIT(nullptr, 0)
    "torch._C.Generator", /* tp_name */
    sizeof(THPGenerator), /* tp_basicsize */
    THPGenerator_methods, /* tp_methods */
};
"""
    )
    assert "torch._C.Generator.seed" in nodes(facts, "binding")
    assert ("torch._C.Generator.seed", "THPGenerator_seed", None) in refs(facts, "binds")


def test_method_and_attribute_tables_as_pytorch_spells_them() -> None:
    # PyTorch writes (char*)"name", `static struct PyMethodDef`, and attributes in a
    # PyGetSetDef table the type lists as its tp_getset (getter, then setter).
    facts = extract(
        """
static PyObject* THCPEvent_from_ipc_handle(PyObject* type, PyObject* args, PyObject* kwargs);
static PyObject* THPVariable_get_grad_fn(THPVariable* self, void* unused);
static int THPVariable_set_grad_fn(THPVariable* self, PyObject* obj, void* unused);
static PyObject* THPVariable_is_cpu(THPVariable* self, void* unused);
static struct PyMethodDef THCPEvent_methods[] = {
    {(char*)"from_ipc_handle",
     castPyCFunctionWithKeywords(THCPEvent_from_ipc_handle),
     METH_CLASS | METH_VARARGS | METH_KEYWORDS,
     nullptr},
    {nullptr}};
static struct PyGetSetDef THPVariable_properties[] = {
    {"_grad_fn", (getter)THPVariable_get_grad_fn, (setter)THPVariable_set_grad_fn, nullptr, nullptr},
    {"is_cpu", (getter)THPVariable_is_cpu, nullptr, nullptr, nullptr},
    {nullptr}};
PyTypeObject THCPEventType = {
    PyVarObject_HEAD_INIT(nullptr, 0)
    "torch._C._CudaEventBase", /* tp_name */
    THCPEvent_methods, /* tp_methods */
};
PyTypeObject THPVariableType = {
    PyVarObject_HEAD_INIT(&THPVariableMetaType, 0)
    "torch._C.TensorBase", /* tp_name */
    nullptr, /* tp_methods */
    THPVariable_properties, /* tp_getset */
};
"""
    )
    bindings = nodes(facts, "binding")
    assert {
        "torch._C._CudaEventBase.from_ipc_handle",
        "torch._C.TensorBase._grad_fn",
        "torch._C.TensorBase.is_cpu",
    } <= set(bindings)
    assert "torch._C.TensorBase.nullptr" not in bindings
    found = {(src, target) for src, target, _ in refs(facts, "binds")}
    assert {
        ("torch._C._CudaEventBase.from_ipc_handle", "THCPEvent_from_ipc_handle"),
        ("torch._C.TensorBase._grad_fn", "THPVariable_get_grad_fn"),
        ("torch._C.TensorBase._grad_fn", "THPVariable_set_grad_fn"),
        ("torch._C.TensorBase.is_cpu", "THPVariable_is_cpu"),
    } <= found


def test_op_resolver_overloads_fan_out_and_namespaces_are_ambiguous(
    minitorch: tuple[Path, Index],
) -> None:
    import sqlite3

    from indexer.bindings.resolve import resolve
    from indexer.link.symbols import Ref, SymbolTable

    _, index = minitorch
    symbols = SymbolTable(sqlite3.connect(index.db_path))

    def targets(target: str, **attrs: object) -> list[tuple[str, bool]]:
        ref = Ref(1, 0, -1, "references", "op", target, 1, dict(attrs))
        return sorted(
            (symbols.qualname[res.dst_id], bool((res.attrs or {}).get("fanout")))
            for res in resolve([ref], symbols)
        )

    assert targets("aten::add") == [
        ("aten::add.Tensor", True),
        ("aten::add.out", True),
    ]
    assert targets("aten::add.Tensor") == [("aten::add.Tensor", False)]
    assert targets("aten::matmul", exact=True) == [("aten::matmul", False)]
    assert targets("torch.ops.minitorch.scale") == [("minitorch::scale", False)]
    # One name in two namespaces: both, and not a fan-out (the linker marks it ambiguous).
    assert targets("scale") == [("minitorch::scale", False), ("minitorch_legacy::scale", False)]
    assert targets("no_such_op") == []
