"""Library Python that only looks like it runs an op: ``.add`` on a set or a trie, a class
constructed at import whose op-running method is not its constructor. On the minitorch
fixture, a change to the add CPU kernel must not select the tests that import such code,
and must still select a test that runs the op through it."""

from __future__ import annotations

import pytest

from tests.select_support import IndexedTree, indexed_tree, selected

ADD_KERNEL = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"


@pytest.fixture(scope="module")
def add_change(tmp_path_factory: pytest.TempPathFactory):
    shared = indexed_tree(tmp_path_factory, "minitorch")
    with pytest.MonkeyPatch.context() as patch:
        tree: IndexedTree = shared.use(patch)
        tree.replace(ADD_KERNEL, "      return a + alpha * b;", "      return alpha * b + a;")
        yield tree.select()


def test_add_on_sets_and_a_local_class_is_not_the_op(add_change) -> None:
    """_registry.py calls NAMES.add(...) (a NameTrie) and _SEEN_NAMES.add(...) (a set) at
    import, memo.add(...) (a set, or None replaced by one) in remember(), and
    tally.add(1) in a closure whose enclosing function made tally a Tally()."""
    assert "test/test_name_registry.py" not in selected(add_change)


def test_constructing_a_class_does_not_run_its_call(add_change) -> None:
    """distributions.py builds ComposeTransform([]) at import; the op runs in the base
    class's __call__, so importing EPS runs none of it, calling the transform does."""
    assert "test/test_eps.py" not in selected(add_change)
    assert "test/test_distributions.py" in selected(add_change)
    chain = add_change.files["test/test_distributions.py"].reasons[0].chain
    assert "minitorch.distributions.Transform.__call__" in [hop.dst for hop in chain]


def test_the_op_tests_are_still_selected(add_change) -> None:
    assert "test/test_ops.py" in selected(add_change)
    assert "test/test_binary_ufuncs.py" in selected(add_change)


def test_a_test_files_decorator_registers_nothing(add_change) -> None:
    """test_patched.py's helper is decorated with config.patch(...): pytest runs it, and
    no other test file can reach it through the config module that _settings.py names."""
    assert "test/test_patched.py" in selected(add_change)
    assert "test/test_settings.py" not in selected(add_change)
