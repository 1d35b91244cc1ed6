"""The static blind spots of issue 18 on the ``blindext`` fixture: a change behind each
entry point selects the test that runs it, by a chain through the graph (not by the
fallback's widening to a file, a module, or everything).

Cases that already held before the issue are kept as regression tests and say so."""

from __future__ import annotations

import pytest

from tests.select_support import IndexedTree, chain_nodes, selected, tree_fixtures

shared, tree = tree_fixtures("blindext")


def _change(tree: IndexedTree, rel: str, old: str, new: str):
    tree.replace(rel, old, new)
    selection = tree.select()
    assert not selection.everything, selection.everything
    return selection


def _chain(tree: IndexedTree, rel: str, old: str, new: str, test: str) -> list[str]:
    """The chain by which the change selects ``test`` (which it must)."""
    selection = _change(tree, rel, old, new)
    assert test in selected(selection), sorted(selected(selection))
    nodes = chain_nodes(selection, test)
    assert not any(node.startswith(("module of", "possible users of")) for node in nodes), nodes
    return nodes


# --- Python reflection -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "test", "via"),
    [
        ("return x + 1", "return x + 5", "tests/test_reflect.py", "blindext.reflect.kernel_for"),
        ("return x + 2", "return x + 6", "tests/test_reflect_fstring.py", "blindext.reflect.kernel_fstring"),
        ("return 3", "return 4", "tests/test_globals.py", "blindext.reflect._local_one"),
    ],
    ids=["concatenation", "f-string", "globals"],
)  # fmt: skip
def test_a_name_computed_at_run_time_reaches_the_definitions_it_can_match(
    tree: IndexedTree, old: str, new: str, test: str, via: str
) -> None:
    """``getattr(kernels, "run_" + kind)``, ``getattr(kernels, f"fmt_{kind}")``,
    ``globals()["_local_" + name]``: the module's definitions the written parts match."""
    selection = _change(tree, "blindext/kernels.py", old, new)
    assert test in selected(selection)
    assert not selected(selection) & {"tests/test_reflect.py", "tests/test_reflect_fstring.py"} - {
        test
    }
    assert via in chain_nodes(selection, test)


def test_a_variable_holding_a_built_name_is_read_as_its_pattern(tree: IndexedTree) -> None:
    """``name = "run_" + kind; getattr(kernels, name)``: the functions ``run_*``; a name
    bound twice in its scope (a loop rebinding it) may be anything of the module."""
    run = _change(tree, "blindext/kernels.py", "return x + 1", "return x + 5")
    assert {"tests/test_reflect_named.py", "tests/test_reflect_rebound.py"} <= selected(run)
    tree.reset()
    other = _change(tree, "blindext/kernels.py", "return 3", "return 4")
    assert "tests/test_reflect_rebound.py" in selected(other)
    assert "tests/test_reflect_named.py" not in selected(other)


def test_getattr_on_an_op_namespace_reaches_every_op_it_can_name(tree: IndexedTree) -> None:
    """``getattr(torch.ops.blind, name)`` may be any op of the namespace; before, the
    line was judged not to call ``legacy`` and ``test_op_for.py`` was missed."""
    nodes = _chain(
        tree, "csrc/legacy.cpp", "return x - 1;", "return x - 2;", "tests/test_op_for.py"
    )
    assert "blindext.reflect.op_for" in nodes


@pytest.mark.parametrize(
    ("rel", "old", "new", "test"),
    [
        ("blindext/plugins/alpha.py", "return 1", "return 5", "tests/test_load.py"),
        ("blindext/dunder_beta.py", "return 2", "return 5", "tests/test_load_dunder.py"),
    ],
    ids=["import_module", "__import__"],
)
def test_a_module_imported_by_a_computed_name_is_imported_by_the_function(
    tree: IndexedTree, rel: str, old: str, new: str, test: str
) -> None:
    """``importlib.import_module("blindext.plugins." + name)``, ``__import__("blindext.dunder_"
    + name)``: before, nothing imported those modules and everything ran."""
    assert test in selected(_change(tree, rel, old, new))


# --- Autograd functions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "member"),
    [("return x * 2;", "return x * 4;", "ScaleFn::forward"),
     ("return x + 1;", "return x + 2;", "ScaleFn::backward")],
    ids=["forward", "backward"],
)  # fmt: skip
def test_a_cpp_autograd_functions_apply_runs_its_forward_and_backward(
    tree: IndexedTree, old: str, new: str, member: str
) -> None:
    nodes = _chain(tree, "csrc/autograd_fn.cpp", old, new, "tests/test_scale_autograd.py")
    assert member in nodes


@pytest.mark.parametrize(
    ("helper", "method"),
    [("def fwd_helper(x):\n    return x", "forward"),  # held before the issue: a regression test
     ("def bwd_helper(g):\n    return g", "backward"),
     ("def ctx_helper(ctx):\n    return ctx", "setup_context"),
     ("def jvp_helper(t):\n    return t", "jvp")],
    ids=["forward", "backward", "setup_context", "jvp"],
)  # fmt: skip
def test_a_python_autograd_functions_methods_run_through_apply(
    tree: IndexedTree, helper: str, method: str
) -> None:
    nodes = _chain(tree, "blindext/autograd_py.py", helper, helper + " + 1", "tests/test_myfn.py")
    assert f"blindext.autograd_py.MyFn.{method}" in nodes


def test_register_autograd_runs_the_backward_where_the_op_is_called(tree: IndexedTree) -> None:
    """``torch.library.register_autograd("blind::frag", _backward)``: before, missed."""
    nodes = _chain(
        tree, "blindext/autograd_py.py", "return reg_bwd_helper(grad)",
        "return reg_bwd_helper(grad) + 1", "tests/test_frag.py",
    )  # fmt: skip
    assert "blindext.autograd_py._backward" in nodes and "blind::frag" in nodes


# --- Op registration in every form -------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "old", "new", "test", "op"),
    [("csrc/legacy.cpp", "return x - 1;", "return x - 2;", "tests/test_legacy.py", "blind::legacy"),
     ("csrc/fragment.cpp", "return x * 3;", "return x * 4;", "tests/test_frag.py", "blind::frag"),
     ("csrc/fragment.cpp", "return x * 5;", "return x * 6;", "tests/test_lam_impl.py", "blind::lam_impl"),
     ("csrc/fragment.cpp", "return x * 7;", "return x * 8;", "tests/test_lam_def.py", "blind::lam_def")],
    ids=["RegisterOperators", "FRAGMENT-TORCH_FN", "lambda-impl", "lambda-def"],
)  # fmt: skip
def test_cpp_registration_forms_reach_the_ops_callers(
    tree: IndexedTree, rel: str, old: str, new: str, test: str, op: str
) -> None:
    """Held before the issue: regression tests."""
    assert op in _chain(tree, rel, old, new, test)


def test_a_python_custom_op_runs_where_the_op_is_called(tree: IndexedTree) -> None:
    """``@torch.library.custom_op("blind::pyop")``: before, nothing reached it and
    everything ran."""
    nodes = _chain(
        tree, "blindext/custom.py", "def custom_helper(x):\n    return x",
        "def custom_helper(x):\n    return x + 1", "tests/test_custom.py",
    )  # fmt: skip
    assert "blind::pyop" in nodes


def test_a_kernel_registered_with_library_impl_runs_where_the_op_is_called(
    tree: IndexedTree,
) -> None:
    """``lib.impl("frag", _frag_meta, "Meta")`` on ``Library("blind", "FRAGMENT")``:
    before, everything ran."""
    nodes = _chain(
        tree, "blindext/custom.py", "def impl_helper(x):\n    return x",
        "def impl_helper(x):\n    return x + 1", "tests/test_frag.py",
    )  # fmt: skip
    assert "blindext.custom._frag_meta" in nodes


def test_the_python_registrations_are_nodes_of_the_graph(tree: IndexedTree) -> None:
    index = tree.index()
    kinds = {(node.kind, node.qualname) for node in index.find("pyop")}
    assert ("op", "blind::pyop") in kinds
    registrations = {n.path for n in index.find("frag") if n.kind == "registration"}
    assert {"blindext/custom.py", "blindext/autograd_py.py"} <= registrations


# --- C++ calls ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "via"),
    [("static T get(T x) { return x; }", "static T get(T x) { return x + 1; }", "templ_body"),
     ("U conv(U u) const { return u; }", "U conv(U u) const { return u + 1; }", "templ_body"),
     ("int64_t dispatch_helper(int64_t x) { return x; }",
      "int64_t dispatch_helper(int64_t x) { return x + 1; }", "templ_kernel")],
    ids=["Info<scalar_t>::get", "obj.template-conv", "AT_DISPATCH-lambda"],
)  # fmt: skip
def test_template_qualified_and_dispatch_lambda_calls_resolve(
    tree: IndexedTree, old: str, new: str, via: str
) -> None:
    """Held before the issue: regression tests."""
    assert via in _chain(tree, "csrc/templ.cpp", old, new, "tests/test_templ.py")


# --- Same-name redefinitions -------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "old", "new", "via"),
    [("csrc/legacy.cpp", "return x - 1;", "return x - 2;", "blindext.overloads.over"),
     ("csrc/fragment.cpp", "return x * 3;", "return x * 4;", "blindext.overloads.jit_over"),
     ("csrc/templ.cpp", "int64_t dispatch_helper(int64_t x) { return x; }",
      "int64_t dispatch_helper(int64_t x) { return x + 1; }", "blindext.overloads.cond")],
    ids=["typing.overload", "jit._overload", "conditional"],
)  # fmt: skip
def test_every_body_of_a_redefined_name_counts(
    tree: IndexedTree, rel: str, old: str, new: str, via: str
) -> None:
    """The implementation after ``@overload`` stubs, and both branches of ``if FLAG: def``;
    held before the issue: regression tests."""
    assert via in _chain(tree, rel, old, new, "tests/test_over.py")


# --- A "run everything" the index can remove ---------------------------------------------


def test_code_behind_an_op_nothing_in_the_tree_names_selects_nothing(tree: IndexedTree) -> None:
    """``elsewhere::outside_only`` is registered for users outside the tree: no test can run
    it. Before, the change ran everything ("its users are invisible to the index")."""
    selection = _change(tree, "csrc/outside.cpp", "return x + 11;", "return x + 12;")
    assert not selected(selection)
    assert any("elsewhere::outside_only" in note for note in selection.notes), selection.notes
    assert selection.empty_reason


def test_an_op_named_anywhere_else_still_runs_everything(tree: IndexedTree) -> None:
    """``elsewhere::outside_named`` is named by a test file's string: what runs it is not
    known, so everything runs, as before."""
    tree.replace(
        "csrc/outside_named.cpp",
        "torch::Tensor outside_named(torch::Tensor x) { return x; }",
        "torch::Tensor outside_named(torch::Tensor x) { return x + 1; }",
    )
    assert tree.select().everything


# --- A function installed as a method at import ------------------------------------------


def test_a_function_installed_as_a_method_runs_where_the_method_is_called(
    tree: IndexedTree,
) -> None:
    """``Holder.halve = halve`` at import (torch_sparse installs its ops on SparseTensor
    so): ``halve`` runs where ``.halve(...)`` is called or ``Holder.halve`` named, not in
    every importer of its module. Before, every importer was selected."""
    selection = _change(tree, "blindext/patch.py", "return self.size() // 2", "return 0")
    assert {"tests/test_patched_call.py", "tests/test_patched_explicit.py"} <= selected(selection)
    assert "tests/test_patched_import.py" not in selected(selection)


# --- A method Python runs by syntax ------------------------------------------------------


def test_a_function_called_by_a_dunder_reaches_the_tests_using_its_class(
    tree: IndexedTree,
) -> None:
    """``_clip`` runs from ``Row.__getitem__``, which ``make_row(3, 4)[-1]`` runs: no code
    names it. Found by the audit of PyTorch's Python (torch._numpy's
    ``ndarrays_to_tensors``, called from ``ndarray.__getitem__``: 7 failing tests in 2
    files missed). Before, the walk stopped at the method and kept only the test naming
    ``_clip``."""
    nodes = _chain(
        tree, "blindext/indexable.py", "return max(i, 0)", "return max(i, 1)",
        "tests/test_indexable.py",
    )  # fmt: skip
    assert nodes[:3] == [
        "blindext.indexable._clip", "blindext.indexable.Row.__getitem__", "blindext.indexable.Row",
    ]  # fmt: skip
    assert "tests/test_clip.py" in selected(tree.select())


# --- A macro changed in a header ---------------------------------------------------------


def test_a_macro_changed_in_a_header_selects_the_code_spelling_it(tree: IndexedTree) -> None:
    """``APPLY_TARGET`` (and ``APPLY_TWICE``, whose body spells it) in ``macros.h``: the
    functions using them in ``macro_user.cpp``, not the file's other functions. Before,
    everything in the files including the header."""
    selection = _change(
        tree, "csrc/macros.h", "#define APPLY_TARGET(x) macro_target(x)",
        "#define APPLY_TARGET(x) macro_target((x) + 1)",
    )  # fmt: skip
    chosen = selected(selection)
    assert {"tests/test_macro_op.py", "tests/test_twice.py"} <= chosen
    assert "tests/test_macro_free.py" not in chosen
    assert chain_nodes(selection, "tests/test_macro_op.py")[0] == "users of APPLY_TARGET"


def test_a_header_change_outside_macros_still_selects_everything_including_it(
    tree: IndexedTree,
) -> None:
    """A declaration changed in the header: every definition of its includers, as before."""
    selection = _change(
        tree, "csrc/macros.h", "int64_t macro_target(int64_t x);",
        "int64_t macro_target(int64_t x);\nint64_t other_target(int64_t x);",
    )  # fmt: skip
    assert "tests/test_macro_free.py" in selected(selection)
