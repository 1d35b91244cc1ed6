"""The test index: test files, unittest and pytest tests, parametrization, device-generic
classes, OpInfo entries and the @ops lists over them, test utilities, covers edges.

Where pytest itself can say what a test expands to, the index is checked against
``pytest --collect-only`` run on the same fixture copy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from indexer.query.index import Index
from tests.helpers import FIXTURES, line_of
from tests.pyindex import build_fixture, edges_to, node, targets

EXTRA_TESTS = '''"""Edge cases of @ops lists, kept out of the shared fixture."""

import copy

import minitorch
from minitorch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from minitorch.testing._internal.common_methods_invocations import OpInfo, op_db
from minitorch.testing._internal.common_utils import TestCase
from extra_op_db import extra_db


def make_list():
    return list(op_db)


only_add = [op for op in op_db if op.name == "add"]
generated_db = [
    *(OpInfo("relu", variant_test_name=f"shift_{n}", op=minitorch.relu) for n in (1, 2)),
]
looped = []
for entry in op_db:
    looped.append(entry)
derived = [copy.copy(op) for op in op_db]


class ScaledInfo(OpInfo):
    pass


class _ExampleModelInfo:  # a registry of something else, named like one
    def __init__(self, name):
        self.name = name


local_db = [ScaledInfo("mm", op=minitorch.mm)]


def make_info(name, **kwargs):
    return OpInfo(name=name, op=minitorch.relu, **kwargs)


def translate(op):
    return copy.copy(op)


factory_db = [make_info(name="relu")]
translated = [translate(op) for op in op_db]
model_examples = [_ExampleModelInfo("org/model-7b")]


class TestOpsEdgeCases(TestCase):
    class_list = list(filter(lambda op: op.name == "mm", op_db))

    def setUp(self):
        self.scale = 2

    @ops(generated_db)
    def test_generated(self, device, dtype, op):
        pass

    @ops(looped)
    def test_looped(self, device, dtype, op):
        pass

    @ops(derived)
    def test_derived(self, device, dtype, op):
        pass

    @ops(class_list)
    def test_class_list(self, device, dtype, op):
        pass

    @ops(factory_db)
    def test_factory(self, device, dtype, op):
        pass

    @ops(translated)
    def test_translated(self, device, dtype, op):
        pass

    @ops(extra_db)
    def test_sibling(self, device, dtype, op):
        pass

    @ops(make_list())
    def test_unknown_list(self, device, dtype, op):
        pass

    @ops(only_add)
    def test_filtered_by_name(self, device, dtype, op):
        pass

    @ops(op_db + [op_db[0]])
    def test_subscript_element(self, device, dtype, op):
        pass


instantiate_device_type_tests(TestOpsEdgeCases, globals(), only_for="cpu")
'''
BROKEN = "def test_broken(:\n    pass\n"
# A list in a test-directory module that tests import by its bare name.
SIBLING_DB = (
    "import minitorch\n"
    "from minitorch.testing._internal.common_methods_invocations import OpInfo\n\n"
    'extra_db = [OpInfo("relu", variant_test_name="sibling", op=minitorch.relu)]\n'
)


@pytest.fixture(scope="module")
def minitorch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(
        tmp_path_factory,
        "minitorch",
        {
            "test/test_ops_edge_cases.py": EXTRA_TESTS,
            "test/test_broken.py": BROKEN,
            "test/extra_op_db.py": SIBLING_DB,
        },
    )


@pytest.fixture(scope="module")
def miniext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    return build_fixture(tmp_path_factory, "miniext")


def collected(repo: Path, *paths: str) -> list[str]:
    """Node ids pytest collects from ``paths`` of ``repo``."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:torchtalk", *paths],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_test_files_and_what_they_contain(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    files = {n.qualname for n in index.nodes_of_kind("test_file")}
    assert {
        "test/test_linalg.py",
        "test/test_ops.py",
        "test/nn/test_init.py",
        "test/test_unrelated.py",
    } <= files
    assert "test/conftest.py" not in files  # a conftest holds fixtures, not tests
    in_fixture = len(list((FIXTURES / "minitorch" / "test").rglob("test_*.py")))
    assert len(files) == in_fixture + 2  # two added by this module
    test_file = node(index, "test/test_special.py", "test_file")
    assert test_file.attrs["module"] == "test.test_special"
    cls = node(index, "test/test_special.py::TestSpecial", "test_class")
    assert cls.id in {e.dst for e in index.out_edges(test_file.id, ["contains"])}
    methods = targets(index, cls, "contains")
    assert methods == {
        "test/test_special.py::TestSpecial::test_erfcx_small",
        "test/test_special.py::TestSpecial::test_erfcx_large_no_overflow",
    }


def test_unittest_and_pytest_tests_match_pytest_collection(
    minitorch: tuple[Path, Index],
) -> None:
    repo, index = minitorch
    ids = collected(repo, "test/test_nn.py", "test/test_special.py", "test/nn/test_init.py")
    expected = {node_id.split("[", 1)[0] for node_id in ids}
    indexed = {
        n.qualname
        for path in ("test/test_nn.py", "test/test_special.py", "test/nn/test_init.py")
        for n in index.nodes_in_file(path, ["test_function"])
    }
    assert expected and indexed == expected
    pytest_class = node(index, "test/test_nn.py::TestReluModule", "test_class")
    assert pytest_class.line == line_of(repo / "test/test_nn.py", "class TestReluModule")


def test_parametrized_ids_match_pytest(
    minitorch: tuple[Path, Index], miniext: tuple[Path, Index]
) -> None:
    for (repo, index), path, name in (
        (minitorch, "test/test_nn.py", "test_functional_relu"),
        (miniext, "tests/test_layernorm.py", "test_rms_norm"),
        (miniext, "tests/kernels/test_pos_encoding.py", "test_rotary_embedding"),
    ):
        test = node(index, f"{path}::{name}", "test_function")
        assert test.attrs["parametrized"] is True
        ids = [i.split("[", 1)[1][:-1] for i in collected(repo, path) if f"::{name}[" in i]
        assert ids and test.attrs["param_ids"] == ids, (path, ids)
    unparametrized = node(minitorch[1], "test/test_nn.py::test_linear_shape", "test_function")
    assert "parametrized" not in unparametrized.attrs


def test_device_generic_classes_record_their_variants(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    cls = node(index, "test/test_linalg.py::TestLinalg", "test_class")
    assert cls.attrs["device_generic"] is True
    classes = {i.split("::")[1] for i in collected(repo, "test/test_linalg.py")}
    assert set(cls.attrs["variants"]) == classes == {"TestLinalgCPU", "TestLinalgCUDA"}
    limited = node(index, "test/test_ops_edge_cases.py::TestOpsEdgeCases", "test_class")
    assert limited.attrs["variants"] == ["TestOpsEdgeCasesCPU"]
    plain = node(index, "test/test_special.py::TestSpecial", "test_class")
    assert "device_generic" not in plain.attrs


def test_opinfo_entries(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    entries = {n.qualname: n for n in index.nodes_of_kind("opinfo")}
    # Nine in op_db, three in opinfo/definitions/linalg.py, four added by this module (one
    # generated, one of a class derived from OpInfo, one from a factory function, one in
    # a sibling module); `_ExampleModelInfo(...)` is not one.
    assert len(entries) == 16
    assert entries["local_db:mm"].attrs["info_class"] == "ScaledInfo"
    assert not any("org/model" in qualname for qualname in entries)
    source = repo / "minitorch/testing/_internal/common_methods_invocations.py"
    sum_dim = entries["op_db:sum.dim"]
    assert sum_dim.line == line_of(source, "OpInfo('sum', variant_test_name='dim'")
    assert (sum_dim.attrs["name"], sum_dim.attrs["variant_test_name"]) == ("sum", "dim")
    assert sum_dim.attrs["aten_name"] == "sum"
    # The op an entry exercises: aten_name, or the name with dots made underscores.
    ops = {qualname: targets(index, entry, "references") for qualname, entry in entries.items()}
    assert "aten::linalg_vector_norm" in ops["op_db:linalg.vector_norm"]
    assert "aten::linear" in ops["op_db:nn.functional.linear"]
    assert "aten::special_erfcx" in ops["op_db:special.erfcx"]
    assert {"aten::sum", "aten::sum.dim_IntList"} <= ops["op_db:sum"]
    assert entries["op_db:add"].attrs["info_class"] == "BinaryUfuncInfo"
    linalg = entries["op_db:linalg.vector_norm.ord_1"]
    assert linalg.path == "minitorch/testing/_internal/opinfo/definitions/linalg.py"


def _opinfo_names(index: Index, test_qualname: str) -> set[str]:
    test = node(index, test_qualname, "test_function")
    edges = [e for e in index.out_edges(test.id, ["covers"]) if index.node(e.dst).kind == "opinfo"]
    assert all(e.attrs.get("fanout") and not e.ambiguous for e in edges)
    return {index.node(e.dst).qualname for e in edges}


def test_ops_tests_cover_the_entries_of_their_list(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    compare = node(index, "test/test_ops.py::TestCommon::test_compare_cpu", "test_function")
    assert compare.attrs["opinfo_list"] == "op_db"
    op_db = {n.qualname for n in index.nodes_of_kind("opinfo") if n.qualname.startswith("op_db:")}
    in_cmi = {
        n.qualname
        for n in index.nodes_in_file(
            "minitorch/testing/_internal/common_methods_invocations.py", ["opinfo"]
        )
    }
    assert _opinfo_names(index, compare.qualname) == in_cmi
    # An isinstance filter narrows the list to its class.
    binary = "test/test_binary_ufuncs.py::TestBinaryUfuncs::test_reference_numerics"
    assert _opinfo_names(index, binary) == {"op_db:add"}
    # A list imported under another name, from another module.
    linalg = "test/test_linalg.py::TestLinalg::test_linalg_reference"
    assert node(index, linalg, "test_function").attrs["opinfo_list"] == "linalg_op_db"
    assert _opinfo_names(index, linalg) == {
        "op_db:addmm",
        "op_db:linalg.vector_norm.ord_1",
        "op_db:linalg.matmul",
    }
    # Cross-check with the tests pytest generates (test_<name>_<op>_<device>_<dtype>).
    prefix = "test/test_ops.py::TestCommonCPU::test_compare_cpu_"
    generated = {
        i[len(prefix) :].rsplit("_cpu_", 1)[0]
        for i in collected(repo, "test/test_ops.py")
        if i.startswith(prefix)
    }
    formatted = set()
    for qualname in in_cmi:
        attrs = node(index, qualname, "opinfo").attrs
        variant = attrs["variant_test_name"]
        formatted.add(attrs["name"].replace(".", "_") + (f"_{variant}" if variant else ""))
    assert generated == formatted
    assert op_db >= in_cmi


def test_aliases_of_ops_are_ops_decorators(minitorch: tuple[Path, Index]) -> None:
    """``_gradcheck_ops = partial(ops, ...)`` then ``@_gradcheck_ops(op_db)``, and
    ``_float_ops = ops(op_db, ...)`` then ``@_float_ops``: both iterate op_db, and the
    evidence is the decorator's line."""
    repo, index = minitorch
    in_cmi = {
        n.qualname
        for n in index.nodes_in_file(
            "minitorch/testing/_internal/common_methods_invocations.py", ["opinfo"]
        )
    }
    for path, qualname, decorator in (
        ("test/test_ops_gradients.py", "TestBwdGradients::test_fn_grad", "@_gradcheck_ops(op_db)"),
        ("test/test_ops.py", "TestCommon::test_has_reference", "@_float_ops"),
    ):
        test = node(index, f"{path}::{qualname}", "test_function")
        assert test.attrs["opinfo_list"] == "op_db"
        assert _opinfo_names(index, test.qualname) == in_cmi
        lines = {
            e.line
            for e in index.out_edges(test.id, ["covers"])
            if index.node(e.dst).kind == "opinfo"
        }
        assert lines == {line_of(repo / path, decorator)}


def test_undeterminable_lists_cover_every_entry(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    everything = {n.qualname for n in index.nodes_of_kind("opinfo")}
    base = "test/test_ops_edge_cases.py::TestOpsEdgeCases"
    unknown = node(index, f"{base}::test_unknown_list", "test_function")
    assert _opinfo_names(index, unknown.qualname) == everything
    reasons = {
        e.attrs.get("all_opinfos") for e in index.out_edges(unknown.id, ["covers"]) if e.attrs
    }
    assert any(isinstance(reason, str) and "make_list" in reason for reason in reasons)
    assert _opinfo_names(index, f"{base}::test_subscript_element") == everything
    # A filter the index cannot evaluate keeps the whole source list (a superset).
    cmi = "minitorch/testing/_internal/common_methods_invocations.py"
    in_cmi = {n.qualname for n in index.nodes_in_file(cmi, ["opinfo"])}
    assert _opinfo_names(index, f"{base}::test_filtered_by_name") == in_cmi


def test_lists_built_by_loops_comprehensions_and_classes(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    base = "test/test_ops_edge_cases.py::TestOpsEdgeCases"
    cmi = "minitorch/testing/_internal/common_methods_invocations.py"
    in_cmi = {n.qualname for n in index.nodes_in_file(cmi, ["opinfo"])}
    # One node stands for the entries a generator expression makes from one call.
    generated = node(index, "generated_db:relu.shift_{n}", "opinfo")
    assert generated.attrs["generated"] is True
    assert generated.line == line_of(repo / "test/test_ops_edge_cases.py", 'OpInfo("relu"')
    assert "aten::relu" in targets(index, generated, "references")
    assert _opinfo_names(index, f"{base}::test_generated") == {generated.qualname}
    # Appends in a module-level loop, entries derived one by one, a class attribute.
    for test in ("test_looped", "test_derived", "test_class_list", "test_translated"):
        assert _opinfo_names(index, f"{base}::{test}") == in_cmi, test
    # A sibling module's list, imported by its bare name.
    assert _opinfo_names(index, f"{base}::test_sibling") == {"extra_db:relu.sibling"}
    # A factory whose parameter names the entry, called with a literal.
    assert _opinfo_names(index, f"{base}::test_factory") == {"factory_db:relu"}
    made = node(index, "factory_db:relu", "opinfo")
    assert made.line == line_of(repo / "test/test_ops_edge_cases.py", 'make_info(name="relu")')


def test_test_utilities_and_fixtures(minitorch: tuple[Path, Index]) -> None:
    repo, index = minitorch
    utilities = {n.qualname: n for n in index.nodes_of_kind("test_utility")}
    test_case = utilities["minitorch.testing._internal.common_utils.TestCase"]
    assert test_case.attrs["py_kind"] == "class"
    assert "minitorch.testing._internal.common_device_type.instantiate_device_type_tests" in (
        utilities
    )
    fixture = utilities["test.conftest.small_tensor"]
    assert fixture.attrs["fixture"] is True
    assert fixture.line == line_of(repo / "test/conftest.py", "def small_tensor")
    # A test taking the fixture covers it.
    test = node(index, "test/test_tensor.py::test_sum", "test_function")
    assert edges_to(index, test, "covers")["test.conftest.small_tensor"].line == test.line
    # A unittest class covers its helper methods (setUp runs for every test).
    cls = node(index, "test/test_ops_edge_cases.py::TestOpsEdgeCases", "test_class")
    assert "test.test_ops_edge_cases.TestOpsEdgeCases.setUp" in targets(index, cls, "covers")


def test_covers_from_file_class_and_function(minitorch: tuple[Path, Index]) -> None:
    _, index = minitorch
    test_file = node(index, "test/test_custom_ops.py", "test_file")
    assert "minitorch.fused" in targets(index, test_file, "covers")  # `import minitorch.fused`
    cls = node(index, "test/test_linalg.py::TestLinalg", "test_class")
    assert "minitorch.testing._internal.common_utils.TestCase" in targets(index, cls, "covers")
    test = node(index, "test/test_custom_ops.py::test_fused_gelu_op", "test_function")
    assert "minitorch::fused_gelu" in targets(index, test, "covers")
    unrelated = node(index, "test/test_unrelated.py::test_slugify", "test_function")
    assert all(
        index.node(e.dst).path == "test/test_unrelated.py"
        for e in index.out_edges(unrelated.id, ["covers"])
    )


def test_a_file_python_cannot_parse_is_reported_not_dropped(
    minitorch: tuple[Path, Index],
) -> None:
    _, index = minitorch
    rows = {row[0]: row for row in index.file_rows()}
    _, language, _, _, parse_errors, error = rows["test/test_broken.py"]
    assert language == "python" and parse_errors == 1
    assert error.startswith("Python syntax error at line 1")
    assert node(index, "test/test_broken.py", "test_file")
