"""Ops an extension's Python names without calling them on the line, registration
blocks, and a test's own subclasses, on the miniext fixture (laid out like vLLM): each
reaches the tests that run it, and only those."""

from __future__ import annotations

import pytest

from tests.select_support import IndexedTree, indexed_tree, selected


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    return indexed_tree(tmp_path_factory, "miniext")


def _hops(selection, path: str) -> list[tuple[str, str, str]]:
    return [(h.src, h.kind, h.dst) for h in selection.files[path].reasons[0].chain]


@pytest.fixture
def tree(shared: IndexedTree, monkeypatch: pytest.MonkeyPatch):
    yield shared.use(monkeypatch)
    shared.reset()


def test_an_op_handed_to_a_test_helper_is_run_by_the_test(tree: IndexedTree) -> None:
    """``opcheck(torch.ops._C.rotary_embedding, ...)`` in a test file's helper names the op
    without calling it on that line; the harness calls it, so the test runs the kernel."""
    tree.replace(
        "csrc/pos_encoding_kernels.cu",
        "dim3 block(std::min<int64_t>(num_heads * rot_dim / 2, 512));",
        "dim3 block(std::min<int64_t>(num_heads * rot_dim / 2, 256));",
    )
    selection = tree.select()
    files = selected(selection)
    assert "tests/kernels/test_pos_encoding.py" in files  # through the _custom_ops wrapper
    assert "tests/kernels/test_rotary_opcheck.py" in files
    helper = "tests.kernels.test_rotary_opcheck.rotary_embedding_opcheck"
    hops = _hops(selection, "tests/kernels/test_rotary_opcheck.py")
    assert (helper, "references", "_C::rotary_embedding") in hops


def test_an_op_kept_in_an_attribute_runs_where_the_layer_does(tree: IndexedTree) -> None:
    """``self.op = torch.ops._C.silu_and_mul`` in ``__init__``, called as ``self.op(...)``."""
    tree.replace(
        "csrc/activation_kernels.cu",
        "dim3 block(std::min(d, 1024));",
        "dim3 block(std::min(d, 512));",
    )
    selection = tree.select()
    files = selected(selection)
    assert "tests/kernels/test_activation.py" in files  # calls the op itself
    assert "tests/test_fused_activation.py" in files
    assert "tests/kernels/test_rotary_opcheck.py" not in files
    # get_act_fn returns an entry of _ACTIVATIONS, a registry of its own module.
    hops = _hops(selection, "tests/test_act_registry.py")
    assert (
        "miniext.layers.activation.get_act_fn",
        "references",
        "miniext.layers.activation",
    ) in hops


@pytest.mark.parametrize(
    "old, new",
    [
        (  # the impl line: its dispatch edge is made there
            'ops.impl("silu_and_mul", torch::kCUDA, &silu_and_mul);',
            'ops.impl("silu_and_mul", c10::DispatchKey::CUDA, &silu_and_mul);',
        ),
        (  # the schema line: the op is defined there
            'ops.def("silu_and_mul(Tensor! out, Tensor input) -> ()");',
            'ops.def("silu_and_mul(Tensor! out, Tensor  input) -> ()");',
        ),
    ],
)
def test_a_registration_line_is_its_op_and_what_loads_the_library(
    tree: IndexedTree, old: str, new: str
) -> None:
    """``TORCH_LIBRARY(...) { ... }`` parses as a function: a change to one of its lines is
    the op that line registers, not every op of the block; and, as load-time code
    (issue 38), what loads the library (miniext._custom_ops imports miniext._C), so every
    importer of the package runs."""
    tree.replace("csrc/torch_bindings.cpp", old, new)
    selection = tree.select()
    (entity,) = selection.entities
    assert entity.label.startswith("load-time code of csrc/torch_bindings.cpp and what loads")
    assert "_C::silu_and_mul" in entity.members
    assert "_C::rotary_embedding" not in entity.members  # another op of the block
    assert "miniext._custom_ops" in entity.members
    files = selected(selection)
    assert "tests/kernels/test_activation.py" in files
    assert "tests/kernels/test_pos_encoding.py" in files  # it imports the package
    assert not selection.everything


def test_an_impl_line_in_a_block_apart_from_the_schema_is_its_op(tree: IndexedTree) -> None:
    """``STABLE_TORCH_LIBRARY_IMPL`` registers an op its ``..._FRAGMENT`` block defines:
    both sides of the changed impl line are that op, not the impl block (and the line is
    load-time code, as above)."""
    tree.replace(
        "csrc/torch_bindings.cpp",
        'm.impl("scaled_fp8_quant", &boxed_scaled_fp8_quant);',
        'm.impl("scaled_fp8_quant", TORCH_BOX(&boxed_scaled_fp8_quant));',
    )
    selection = tree.select()
    (entity,) = selection.entities
    assert "_C::scaled_fp8_quant" in entity.members
    assert not [m for m in entity.members if m.startswith("STABLE_TORCH_LIBRARY_IMPL")]
    assert not selection.everything


def test_an_override_made_in_a_test_file_reaches_no_library_caller(tree: IndexedTree) -> None:
    """HalvingMethod.apply (a test's own class) overrides QuantMethodBase.apply, which
    linear.py calls; only the test makes a HalvingMethod, so only it runs the change."""
    tree.replace("miniext/math_utils.py", "return -(a // -b)", "return -(-a // b)")
    selection = tree.select()
    files = selected(selection)
    assert "tests/quantization/test_custom_method.py" in files
    assert "tests/test_utils.py" in files  # calls cdiv itself
    assert "tests/quantization/test_quant_linear.py" not in files


def test_a_factory_classmethod_constructs_its_class(tree: IndexedTree) -> None:
    """``return cls(...)`` in Engine.from_config runs Engine.__init__: the front end calling
    the factory (LLM) reaches a change there, not only code naming Engine."""
    tree.replace("miniext/engine.py", "self.hidden = hidden", "self.hidden = int(hidden)")
    selection = tree.select()
    files = selected(selection)
    assert "tests/test_engine_direct.py" in files
    assert "tests/test_engine.py" in files
    hops = _hops(selection, "tests/test_engine.py")
    assert ("miniext.engine.Engine.from_config", "references", "miniext.engine.Engine") in hops


def test_a_model_named_in_a_string_registry_reaches_the_registry_users(
    tree: IndexedTree,
) -> None:
    """``"TinyModel": ("tiny", "TinyModel")`` is loaded with importlib: the class's users
    include whoever loads models through the registry (through _ALL_MODELS, then
    ModelRegistry, bound from it at import)."""
    tree.replace("miniext/models/tiny.py", "    scale = 1.0", "    scale = 1.0\n    bias = 0.0")
    selection = tree.select()
    files = selected(selection)
    assert "tests/test_model_registry.py" in files
    hops = _hops(selection, "tests/test_model_registry.py")
    assert ("miniext.models.registry", "references", "miniext.models.tiny.TinyModel") in hops


def test_a_lambda_in_a_registry_runs_when_called_not_at_import(tree: IndexedTree) -> None:
    """``{"silu_and_mul": lambda: FusedSiluAndMul()}`` at module level builds nothing
    at import: a change in FusedSiluAndMul.__init__ reaches the users of the registry and
    of the class, not every importer of the module (test_silu_native.py)."""
    tree.replace(
        "miniext/layers/activation.py",
        "self.op = torch.ops._C.silu_and_mul",
        "self.op = torch.ops._C.silu_and_mul if torch else None",
    )
    selection = tree.select()
    files = selected(selection)
    assert "tests/test_fused_activation.py" in files
    assert "tests/test_silu_native.py" not in files


def test_a_table_of_imported_classes_reaches_the_functions_reading_it(
    tree: IndexedTree,
) -> None:
    """``FUSED_MODULES = {SiluAndMul: FusedSiluAndMul}`` names imported classes;
    ``fused_for`` hands its entries out, so it is a user of what they hold."""
    tree.replace(
        "miniext/layers/activation.py",
        "self.op = torch.ops._C.silu_and_mul",
        "self.op = torch.ops._C.silu_and_mul if torch else None",
    )
    files = selected(tree.select())
    assert "tests/test_mappings.py" in files
