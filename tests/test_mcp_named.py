"""Tests named for what is asked rank as dedicated to it, in `tests` and `affected` alike:
before OpInfo harness tests, for a C++ function through the ops it implements, and tests
written once on a template class (inductor's CommonTemplate) among them."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.answers.affected import affected
from indexer.query.index import Index
from indexer.query.tests import tests as find_tests
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo

# As test/inductor/test_torchinductor.py: tests are methods of a template class, copied
# into the device test classes when the module runs; each calls the op inside a function
# handed to a harness, so no edge leads from the test to the op.
TEMPLATE_TESTS = """\
from minitorch.testing._internal.common_utils import TestCase


def copy_tests(template, target):
    for name, value in vars(template).items():
        if name.startswith("test_"):
            setattr(target, name, value)


class CommonTemplate:
    def test_matmul_through_the_template(self):
        def fn(a, b):
            return (a, b)

        self.common(fn, (1, 2))

    def test_addmm_through_the_template(self):
        self.common(lambda a: a, (1,))


class TestTemplatesCPU(TestCase):
    def common(self, fn, args):
        fn(*args)


copy_tests(CommonTemplate, TestTemplatesCPU)
"""

# test_addmm_via_a_helper reaches addmm two hops away; test_calls_it calls it itself.
HELPER_TESTS = """\
import minitorch


def _through(a, b, c):
    return minitorch.addmm(a, b, c)


def test_addmm_via_a_helper():
    _through(1, 2, 3)


def test_calls_it():
    minitorch.addmm(1, 2, 3)
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("named")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    (repo / "test/test_templates.py").write_text(TEMPLATE_TESTS, encoding="utf-8")
    (repo / "test/test_helpers_named.py").write_text(HELPER_TESTS, encoding="utf-8")
    commit_all(repo, "tests written on a template class")
    return repo, build_private_index(repo, base)


def at(repo: Path, path: str, text: str) -> str:
    return f"{path}:{line_of(repo / path, text)}"


TEMPLATE = "test/test_templates.py"


def test_a_template_test_named_for_the_op_ranks_before_opinfo_harness_tests(built) -> None:
    repo, index = built
    answer = find_tests(index, "matmul", limit=100)
    labels = [item.label for item in answer.items]
    template = next(
        (i for i, label in enumerate(labels) if label.endswith("test_matmul_through_the_template")),
        None,
    )
    assert template is not None, answer.to_text()
    assert "named for it" in answer.items[template].detail
    assert answer.items[template].evidence == at(repo, TEMPLATE, "def test_matmul_through")
    opinfo = labels.index("test/test_ops.py::TestCommon::test_compare_cpu")
    assert template < opinfo, answer.to_text()


def test_a_cpp_function_s_tests_are_named_for_the_ops_it_implements(built) -> None:
    """addmm_cpu is aten::addmm's CPU kernel: test_addmm_* are its tests too."""
    repo, index = built
    answer = find_tests(index, "at::native::addmm_cpu", limit=100)
    assert at(repo, TEMPLATE, "def test_addmm_through") in answer.to_text(), answer.to_text()


def test_affected_ranks_the_file_of_a_test_named_for_it_before_opinfo_files(built) -> None:
    repo, index = built
    answer = affected(index, ["at::native::addmm_cpu"])
    files = [item.label for item in answer.items if not item.data.get("minor")]
    assert TEMPLATE in files, answer.to_text()
    named = next(item for item in answer.items if item.label == TEMPLATE)
    assert named.evidence == at(repo, TEMPLATE, "def test_addmm_through")
    if "test/test_ops.py" in files:
        assert files.index(TEMPLATE) < files.index("test/test_ops.py"), answer.to_text()


def test_a_test_named_for_it_ranks_before_one_that_merely_calls_it(built) -> None:
    """Dedicated first: a test named for the op, though its path is two hops long, before
    a test calling the op whose name says nothing of it."""
    _, index = built
    answer = find_tests(index, "minitorch.functional.addmm", limit=100)
    labels = [item.label for item in answer.items]
    named = labels.index("test/test_helpers_named.py::test_addmm_via_a_helper")
    calling = labels.index("test/test_helpers_named.py::test_calls_it")
    assert named < calling, answer.to_text()
