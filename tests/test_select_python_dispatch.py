"""Python's run-time dispatch, followed by the impact walk on the miniext fixture (laid out
like vLLM): a quantization method called through the base class a layer sees, a Python
function registered as an op at import and called through ``torch.ops``, and a class
derived at import whose methods run only when called. A change to the fp8 kernel must
reach the tests that run it, and only those."""

from __future__ import annotations

from contextlib import closing

import pytest

from indexer.build import build_index
from indexer.select.impact import ImpactWalker
from tests.helpers import commit_all, make_fixture_repo
from tests.select_support import IndexedTree, indexed_tree, selected

FP8_KERNEL = "csrc/quantization/fp8_kernels.cu"
KERNEL_EDIT = ("clamp_fp8(input[i] * inv_scale)", "clamp_fp8(inv_scale * input[i])")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    return indexed_tree(tmp_path_factory, "miniext")


@pytest.fixture(scope="module")
def fp8_change(shared: IndexedTree):
    """The selection for a one-line change inside the fp8 quantization kernel."""
    with pytest.MonkeyPatch.context() as patch:
        tree = shared.use(patch)
        tree.replace(FP8_KERNEL, *KERNEL_EDIT)
        try:
            yield tree, tree.select()
        finally:
            shared.reset()


def _hops(selection, path: str) -> list[tuple[str, str, str]]:
    return [(h.src, h.kind, h.dst) for h in selection.files[path].reasons[0].chain]


def test_the_change_is_the_kernel(fp8_change) -> None:
    _, selection = fp8_change
    assert [e.label for e in selection.entities] == ["vllm::scaled_fp8_quant_kernel"]
    assert not selection.run_everything


def test_a_method_called_through_its_base_class_reaches_the_layer_test(fp8_change) -> None:
    """linear.py sees only QuantMethodBase; ``self.quant_method.apply(...)`` there may run
    Fp8Method.apply, which overrides it (evidence: the ``class Fp8Method(...)`` line)."""
    tree, selection = fp8_change
    path = "tests/quantization/test_quant_linear.py"
    assert path in selected(selection)
    hops = _hops(selection, path)
    override = (
        "miniext.layers.quantization.fp8.Fp8Method.apply",
        "overrides",
        "miniext.layers.quantization.base.QuantMethodBase.apply",
    )
    assert override in hops
    evidence = next(
        h.evidence for h in selection.files[path].reasons[0].chain if h.kind == "overrides"
    )
    fp8 = "miniext/layers/quantization/fp8.py"
    assert evidence == f"{fp8}:{tree.line(fp8, 'class Fp8Method(QuantMethodBase):')}"
    assert (
        "miniext.layers.linear.QuantLinear.forward",
        "calls",
        "miniext.layers.quantization.base.QuantMethodBase.apply",
    ) in hops


def test_a_function_registered_as_an_op_runs_where_the_op_is_called(fp8_change) -> None:
    tree, selection = fp8_change
    assert "tests/quantization/test_fused_quant.py" in selected(selection)
    hops = selection.files["tests/quantization/test_fused_quant.py"].reasons[0].chain
    call = next(h for h in hops if h.dst == "miniext.layers.fused.fused_quant")
    fused = "miniext/layers/fused.py"
    assert call.src == "miniext.layers.fused.quantize_blocks"
    assert call.evidence == f"{fused}:{tree.line(fused, 'torch.ops.miniext.fused_quant(')}"


def test_registering_at_import_does_not_make_importers_run_it(fp8_change) -> None:
    """fused.py passes fused_quant to direct_register_custom_op at import: a test importing
    only a constant from it runs none of the kernel."""
    _, selection = fp8_change
    assert "tests/quantization/test_fused_block.py" not in selected(selection)


def test_a_class_derived_at_import_runs_its_methods_only_when_called(fp8_change) -> None:
    """tiny.py calls as_quantized_model at import; the kernel call sits in a method of the
    class it makes: the users of that class are affected, the module's other users not."""
    _, selection = fp8_change
    assert "tests/test_models.py" in selected(selection)
    assert "tests/test_model_sizes.py" not in selected(selection)


def test_without_the_registrar_the_importers_count_as_affected(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unknown registration stays conservative: with no ``op_registrars`` in the manifest,
    passing fused_quant along at import may run it, so the importing test is kept."""
    base = tmp_path_factory.mktemp("no-registrar")
    root = make_fixture_repo("miniext", base / "miniext")
    manifest = root / ".torchtalk.toml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text.replace("op_registrars", "# op_registrars"), encoding="utf-8")
    commit_all(root, "drop the registrar")
    tree = IndexedTree(root, base / "cache").use(monkeypatch)
    build_index(tree.workspace, show_progress=False)
    tree.replace(FP8_KERNEL, *KERNEL_EDIT)
    assert "tests/quantization/test_fused_block.py" in selected(tree.select())


def test_unrelated_tests_stay_out(fp8_change) -> None:
    _, selection = fp8_change
    assert "tests/test_utils.py" not in selected(selection)
    assert "tests/test_layernorm.py" not in selected(selection)


def test_a_registration_counts_when_its_module_was_affected_first(shared, monkeypatch) -> None:
    """fused.py changed at module level too: the module is affected whole from the start,
    and the walk reaches fused_quant later. Its registration as an op still makes the op's
    callers (quantize_blocks, through torch.ops) users of the kernel: the walk's answer
    does not depend on which of the two it met first."""
    tree = shared.use(monkeypatch)
    shared.reset()  # the module's fp8_change, if it ran, left its edit
    try:
        tree.replace(FP8_KERNEL, *KERNEL_EDIT)
        tree.replace("miniext/layers/fused.py", "FUSED_BLOCK = 128", "FUSED_BLOCK = 256")
        selection = tree.select()
        with closing(tree.index()) as index:
            starts = {n: i for i, e in enumerate(selection.entities) for n in e.node_ids}
            reach = ImpactWalker(index).walk(starts)
            reached = {node.qualname for node in index.nodes(reach.steps)}
        assert "miniext.layers.fused.quantize_blocks" in reached
    finally:
        shared.reset()
