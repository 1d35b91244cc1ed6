"""An extension keeping its C++ inside its Python package (``extension_cpp/csrc/``, as
PyTorch's extension-cpp tutorial and torchvision do) is indexed like one with a top-level
``csrc/``: a change to a kernel there selects the tests that call its op, not every test
(it did, as "cpp outside the harness's source directories", before the torch-extension
harness read C++ anywhere in the tree)."""

from __future__ import annotations

from indexer.select.placement import categorize
from tests.select_support import IndexedTree, selected, tree_fixtures

FILES = {
    "setup.py": "from setuptools import setup\nsetup(name='extpkg')\n",
    "extpkg/__init__.py": "from extpkg import ops\n",
    "extpkg/ops.py": (
        "import torch\n\n\n"
        "def muladd(a, b, c):\n"
        "    return torch.ops.extpkg.muladd.default(a, b, c)\n\n\n"
        "def plain(a):\n"
        "    return a + 1\n"
    ),
    "extpkg/csrc/muladd.cpp": (
        "#include <torch/library.h>\n\n"
        "namespace extpkg {\n\n"
        "at::Tensor muladd_cpu(const at::Tensor& a, const at::Tensor& b, double c) {\n"
        "  at::Tensor product = a * b;\n"
        "  return product + c;\n"
        "}\n\n"
        "TORCH_LIBRARY(extpkg, m) {\n"
        '  m.def("muladd(Tensor a, Tensor b, float c) -> Tensor");\n'
        "}\n\n"
        "TORCH_LIBRARY_IMPL(extpkg, CPU, m) {\n"
        '  m.impl("muladd", &muladd_cpu);\n'
        "}\n\n"
        "}  // namespace extpkg\n"
    ),
    "test/test_muladd.py": (
        "from extpkg.ops import muladd\n\n\n"
        "def test_muladd():\n"
        "    assert muladd(1, 2, 3) is not None\n"
    ),
    "test/test_plain.py": (
        "from extpkg.ops import plain\n\n\ndef test_plain():\n    assert plain(1) == 2\n"
    ),
}


shared, tree = tree_fixtures("extpkg-tree", FILES)


def test_the_package_csrc_is_indexed_cpp(tree: IndexedTree) -> None:
    manifest = tree.workspace.manifest
    assert manifest.name == "torch-extension"
    assert categorize("extpkg/csrc/muladd.cpp", manifest)[0] == "cpp"
    index = tree.index()
    try:
        kernels = [(node.path, node.kind) for node in index.find("muladd_cpu")]
    finally:
        index.close()
    assert kernels == [("extpkg/csrc/muladd.cpp", "cpp_function")]


def test_a_kernel_change_in_the_package_csrc_selects_its_ops_tests(tree: IndexedTree) -> None:
    tree.replace("extpkg/csrc/muladd.cpp", "return product + c;", "return product - c;")
    selection = tree.select("HEAD")
    assert selection.everything == []
    assert selected(selection) == {"test/test_muladd.py"}
    chain = selection.files["test/test_muladd.py"].reasons[0].chain
    # the kernel's registration, then the op its Python wrapper calls
    assert "extpkg::muladd" in {hop.dst for hop in chain} | {hop.src for hop in chain}


def test_vendored_cpp_stays_out_of_the_index() -> None:
    """Reading C++ anywhere must not pull in vendored code: third_party stays excluded
    (a change there runs everything, as before: the index cannot see its users)."""
    from indexer.harness import load_harness

    manifest = load_harness("torch-extension")
    assert categorize("third_party/lib/src/x.cpp", manifest)[0] == "other"
    assert categorize("build/temp.linux/x.cpp", manifest)[0] == "other"
