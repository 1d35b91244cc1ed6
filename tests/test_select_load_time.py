"""Load-time code on the torchvision-shaped fixture (tests/fixtures/visionext): a change to
what the extension's library runs when it loads (an op schema in a TORCH_LIBRARY_FRAGMENT
block, an m.impl line, a static RegisterOperators initializer) can stop the library
loading, which fails every test importing the package that loads it, whichever op the
line names (issue 38). A kernel's body runs only when its op is called."""

from __future__ import annotations

import pytest

from tests.select_support import selected, tree_fixtures

shared, tree = tree_fixtures("visionext")

NMS = "torchvision/csrc/ops/nms.cpp"
IMAGE = "torchvision/csrc/io/image/image.cpp"
CPU_KERNEL = "torchvision/csrc/ops/cpu/nms_kernel.cpp"
ONLY_IMPORTS = "test/test_transforms.py"  # imports torchvision, runs no op


def _loader_reason(selection, path: str) -> str:
    reason = selection.files[path].reasons[0]
    entity = next(e for e in selection.entities if e.label == reason.entity)
    return f"{entity.label} | {entity.reason}"


@pytest.mark.parametrize(
    ("rel", "old", "new", "what"),
    [
        (  # the schema the dispatcher parses at load
            NMS,
            '"torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"',
            '"torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor)"',
            "the registration block TORCH_LIBRARY_FRAGMENT(torchvision, m)",
        ),
        (  # a kernel registration, whose signature is checked against the schema at load
            CPU_KERNEL,
            'm.impl(TORCH_SELECTIVE_NAME("torchvision::nms"), TORCH_FN(nms_kernel));',
            'm.impl("nms", TORCH_FN(nms_kernel));',
            "the registration block TORCH_LIBRARY_IMPL(torchvision, CPU, m)",
        ),
        (  # a static initializer of the second library (loaded by io/image.py)
            IMAGE,
            '"image::decode_png(Tensor data, int mode) -> Tensor"',
            '"image::decode_png(Tensor data, int mode) -> Tensor data"',
            "the static initializer of registry",
        ),
    ],
    ids=["schema", "impl", "static-initializer"],
)
def test_load_time_code_reaches_every_importer_of_the_loading_package(
    tree, rel: str, old: str, new: str, what: str
) -> None:
    tree.replace(rel, old, new)
    selection = tree.select()
    assert not selection.everything
    files = selected(selection)
    assert "test/test_ops.py" in files
    assert ONLY_IMPORTS in files  # before: only the op's callers were selected
    reason = _loader_reason(selection, ONLY_IMPORTS)
    assert reason.startswith(f"load-time code of {rel} and what loads its library: ")
    # The module loading _C at import, and the function io/image.py loads `image` with.
    assert "torchvision.extension" in reason and "torchvision.extension._load_library" in reason
    line = tree.line(rel, new)
    assert f"{rel} line {line} is in {what}, which runs when the library loads" in reason
    assert "torch.ops.load_library(" in reason


def test_a_kernel_body_is_not_load_time_code_and_a_removed_schema_line_is(tree) -> None:
    """A kernel's body runs where its op is called; a line only the base holds (a schema
    removed) is read on the base side, and is load-time code there."""
    tree.replace(
        CPU_KERNEL,
        "return dets.index_select(0, scores.argsort());",
        "return dets.index_select(0, scores.argsort(/*descending=*/true));",
    )
    files = selected(tree.select())
    assert "test/test_ops.py" in files
    assert ONLY_IMPORTS not in files
    tree.replace("torchvision/csrc/vision.cpp", '  m.def("_cuda_version", &cuda_version);\n', "")
    selection = tree.select()
    assert not selection.everything
    assert ONLY_IMPORTS in selected(selection)
    assert "base line 9 is in the registration block TORCH_LIBRARY_FRAGMENT(torchvision, m)" in (
        _loader_reason(selection, ONLY_IMPORTS)
    )


def test_load_time_code_with_no_loader_in_the_tree_runs_everything(tree) -> None:
    """Nothing of the tree loads the library: who imports it is unknown."""
    tree.write(
        "torchvision/extension.py",
        "import torch\n\n\ndef _load_library(lib_name):\n    return lib_name\n",
    )
    tree.write("torchvision/io/image.py", "def decode_png(data, mode=0):\n    return data\n")
    tree.commit("the library is loaded from elsewhere")
    tree.replace(NMS, "float iou_threshold) -> Tensor", "float iou_threshold) -> Tensor[]")
    selection = tree.select(base="HEAD")
    (why,) = selection.everything
    assert "which runs when the library loads" in why
    assert "no Python of the tree loads a library" in why
