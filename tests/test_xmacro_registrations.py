"""Registrations written through x-macro lists (issue 37), on the minitorch fixture with
files written here, indexed as a tree is.

PyTorch registers its CUDA Autocast kernels as ``AT_FORALL_FP32(_KERNEL_CUDA_FP32)`` inside
``TORCH_LIBRARY_IMPL(aten, Autocast, m)``: a header's ``#define AT_FORALL_FP32(_) _(acos)
...`` applied to a wrapper the block defines around ``KERNEL_CUDA``. Here the same shapes
under other names (nothing is special-cased): each entry is a registration of its op for
the block's key, cited at the use and at the entry's own line; a header's registration
writer (``m.impl`` in its body) applied to a list registers the op its string names; a
file's own list applied to its own ``m.impl`` macro registers a kernel of the tree. What
is not read is said (by trace, status and the build), and a list applied elsewhere, or to
a macro that registers nothing, registers nothing. An edit to the header's list reaches
the registrations of the file using it on update."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.query.index import Index
from indexer.query.status import index_status
from indexer.query.trace import trace
from indexer.update import update_index
from indexer.workspace import Workspace
from tests.helpers import commit_all, line_of, make_fixture_repo

LISTS_H = "aten/src/ATen/mini_lists.h"
AUTOCAST = "aten/src/ATen/mini_autocast.cpp"
CUSTOM = "aten/src/ATen/native/mini_ops.cpp"
LISTS = """\
#pragma once

#define MINI_FORALL_FP32(_) \\
  _(relu)                   \\
  _(sum, dim_IntList)

#define MINI_FORALL_REDISPATCH(_)                  \\
  _(ADD_NS(linear),                                \\
    "linear",                                      \\
    Tensor(const Tensor&, const Tensor&),          \\
    Tensor(const Tensor&, const Tensor&, int64_t), \\
    fp32_append)

#define MINI_REDISPATCH(KEY, FUNC, NAME, SIG, RSIG, POLICY) \\
  m.impl(TORCH_SELECTIVE_NAME("aten::" NAME),                 \\
         &WrapFunction<POLICY, KEY, SIG, RSIG, &FUNC>::type::call);

#define MINI_REDISPATCH_CUDA(FUNC, NAME, SIG, RSIG, POLICY) \\
  MINI_REDISPATCH(kCUDA, FUNC, NAME, SIG, RSIG, POLICY)
"""
AUTOCAST_CPP = """\
#include <ATen/mini_lists.h>

namespace at::autocast {

// Applied outside any registration block: no registration.
#define _NOT_IN_A_BLOCK(...) KERNEL_CUDA(__VA_ARGS__, fp32)
MINI_FORALL_FP32(_NOT_IN_A_BLOCK)

#define _NAME_ONLY(op, ...) #op
#define _NO_NAME(op, ...) m.impl(op##_name, &op);

TORCH_LIBRARY_IMPL(aten, AutocastCUDA, m) {
#define _KERNEL_CUDA_FP32(...) KERNEL_CUDA(__VA_ARGS__, fp32)

  MINI_FORALL_FP32(_KERNEL_CUDA_FP32)
  MINI_FORALL_REDISPATCH(
      MINI_REDISPATCH_CUDA)
  // MINI_FORALL_FP32(_KERNEL_CUDA_LATER)
  MINI_FORALL_FP32(_NAME_ONLY)
  NOT_A_TREE_LIST(_KERNEL_CUDA_FP32)
  MINI_FORALL_FP32(_NO_NAME)
  KERNEL_CUDA(mm, out, alpha, fp32)
}

} // namespace at::autocast
"""
CUSTOM_CPP = """\
#include <torch/library.h>

namespace mini {

at::Tensor scale_cpu(const at::Tensor& x) { return x; }
at::Tensor shift_cpu(const at::Tensor& x) { return x; }

#define MINI_OPS(_) _(scale) _(shift)

TORCH_LIBRARY(mini, m) {
  m.def("scale(Tensor x) -> Tensor");
  m.def("shift(Tensor x) -> Tensor");
}

#define REGISTER_CPU(op) m.impl(#op, &op##_cpu);

TORCH_LIBRARY_IMPL(mini, CPU, m) {
  MINI_OPS(REGISTER_CPU)
}

} // namespace mini
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("xmacro_registrations")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    (repo / LISTS_H).write_text(LISTS, encoding="utf-8")
    (repo / AUTOCAST).write_text(AUTOCAST_CPP, encoding="utf-8")
    (repo / CUSTOM).write_text(CUSTOM_CPP, encoding="utf-8")
    commit_all(repo, "registrations through x-macro lists")
    from indexer.environ import environment

    with environment(
        {"TORCHTALK_CACHE_DIR": str(base / "cache"), "TORCHTALK_CONFIG_DIR": str(base / "config")}
    ):
        result = build_index(Workspace.resolve(repo), show_progress=False)
    return repo, Index(result.db_path)


def at(repo: Path, path: str, text: str) -> str:
    return f"{path}:{line_of(repo / path, text)}"


def registered(index: Index, path: str) -> set[str]:
    return {
        qualname
        for (qualname,) in index.conn.execute(
            "SELECT n.qualname FROM nodes n JOIN files f ON f.id = n.file_id"
            " WHERE f.path = ? AND n.kind = 'registration'",
            (path,),
        )
    }


def test_each_list_entry_is_a_registration_for_the_blocks_key(built) -> None:
    repo, index = built
    text = trace(index, "aten::relu", focus="AutocastCUDA").to_text()
    assert at(repo, AUTOCAST, "MINI_FORALL_FP32(_KERNEL_CUDA_FP32)") in text, text
    assert at(repo, LISTS_H, "_(relu)") in text, text  # the entry's own line
    overload = trace(index, "aten::sum.dim_IntList", focus="AutocastCUDA").to_text()
    assert at(repo, LISTS_H, "_(sum, dim_IntList)") in overload, overload


def test_a_header_writer_applied_to_a_list_registers_the_named_op(built) -> None:
    repo, index = built
    text = trace(index, "aten::linear", focus="AutocastCUDA").to_text()
    assert at(repo, AUTOCAST, "MINI_FORALL_REDISPATCH(") in text, text
    assert at(repo, LISTS_H, "_(ADD_NS(linear),") in text, text


def test_a_files_own_list_and_impl_macro_register_kernels_of_the_tree(built) -> None:
    repo, index = built
    text = trace(index, "mini::scale", focus="CPU").to_text()
    assert "CPU: mini::scale_cpu" in text, text
    assert at(repo, CUSTOM, "at::Tensor scale_cpu") in text, text
    assert at(repo, CUSTOM, "MINI_OPS(REGISTER_CPU)") in text, text


def test_nothing_is_registered_outside_blocks_or_by_a_macro_registering_nothing(built) -> None:
    repo, index = built
    names = registered(index, AUTOCAST)
    assert names == {"aten::relu", "aten::sum.dim_IntList", "aten::linear"}, names
    # relu's registrations: the block's use only (not the namespace-scope one)
    rows = index.conn.execute(
        "SELECT n.line FROM nodes n JOIN files f ON f.id = n.file_id"
        " WHERE f.path = ? AND n.qualname = 'aten::relu'",
        (AUTOCAST,),
    ).fetchall()
    assert rows == [(line_of(repo / AUTOCAST, "MINI_FORALL_FP32(_KERNEL_CUDA_FP32)"),)], rows


def test_what_is_not_read_is_said_by_trace_status_and_health(built) -> None:
    from indexer.query.key_coverage import unread_uses

    repo, index = built
    uses = {(use["path"], use["line"]): use for use in unread_uses(index)}
    unknown = (AUTOCAST, line_of(repo / AUTOCAST, "NOT_A_TREE_LIST("))
    four = (AUTOCAST, line_of(repo / AUTOCAST, "KERNEL_CUDA(mm, out, alpha, fp32)"))
    nameless = (AUTOCAST, line_of(repo / AUTOCAST, "MINI_FORALL_FP32(_NO_NAME)"))
    assert set(uses) == {unknown, four, nameless}, uses
    assert uses[unknown]["key"] == "AutocastCUDA"
    # a list whose entries expand to nothing read: one line for the use, not one per entry
    assert uses[nameless]["why"].startswith("2 of 2 entries expand to no registration")
    # an op the key's blocks do not list: one line saying why, naming what was not read
    text = trace(index, "aten::mm", focus="AutocastCUDA").to_text()
    assert "AutocastCUDA: nothing registered for aten::mm" in text, text
    assert f"{AUTOCAST}:{four[1]}" in text, text
    assert "not read" in text, text
    status = index_status(index)
    assert {(use["path"], use["line"]) for use in status["unread_registrations"]} == set(uses)


def test_an_edit_to_the_headers_list_reaches_the_registrations_on_update(
    tmp_path: Path,
) -> None:
    repo = make_fixture_repo("minitorch", tmp_path / "minitorch")
    (repo / LISTS_H).write_text(LISTS, encoding="utf-8")
    (repo / AUTOCAST).write_text(AUTOCAST_CPP, encoding="utf-8")
    commit_all(repo, "lists")
    from indexer.environ import environment

    with environment(
        {"TORCHTALK_CACHE_DIR": str(tmp_path / "cache"), "TORCHTALK_CONFIG_DIR": str(tmp_path)}
    ):
        workspace = Workspace.resolve(repo)
        build_index(workspace, jobs=1, show_progress=False)
        edited = LISTS.replace("  _(relu)                   \\\n", "  _(relu) \\\n  _(matmul) \\\n")
        assert edited != LISTS
        (repo / LISTS_H).write_text(edited, encoding="utf-8")
        update_index(workspace, jobs=1, show_progress=False)
        index = Index(workspace.db_path)
        try:
            text = trace(index, "aten::matmul", focus="AutocastCUDA").to_text()
            assert at(repo, LISTS_H, "_(matmul)") in text, text
            assert at(repo, AUTOCAST, "MINI_FORALL_FP32(_KERNEL_CUDA_FP32)") in text, text
        finally:
            index.close()


def test_the_build_and_status_say_what_was_not_read(
    built, capsys: pytest.CaptureFixture[str]
) -> None:
    from indexer.environ import environment
    from pytest_torchtalk.cli import main

    repo, _ = built
    base = repo.parent
    four = f"{AUTOCAST}:{line_of(repo / AUTOCAST, 'KERNEL_CUDA(mm, out, alpha, fp32)')}"
    with environment(
        {"TORCHTALK_CACHE_DIR": str(base / "cache"), "TORCHTALK_CONFIG_DIR": str(base / "config")}
    ):
        capsys.readouterr()
        assert main(["status", "--source", str(repo)]) == 0
        status = capsys.readouterr().out
        assert "registration-block uses not read (3):" in status, status
        assert f"{four} [AutocastCUDA] KERNEL_CUDA(mm, out, alpha, fp32)" in status, status
        assert main(["index", "build", "--source", str(repo), "--force", "-q"]) == 0
        built_err = capsys.readouterr().err
        assert "warning: 3 uses in registration blocks not read" in built_err, built_err


def test_the_mcp_tools_answer_through_the_lists_and_say_what_was_not_read(built) -> None:
    """The same through the MCP server's tools: trace's answer names the entry, an op the
    key does not list gets the one line why, get_status notes the uses not read."""
    from indexer.environ import environment
    from mcp_server.state import ServerState
    from mcp_server.tools import Tools

    repo, _ = built
    base = repo.parent
    with environment(
        {"TORCHTALK_CACHE_DIR": str(base / "cache"), "TORCHTALK_CONFIG_DIR": str(base / "config")}
    ):
        state = ServerState(Workspace.resolve(repo))
        state.start()
        try:
            tools = Tools(state)
            relu = _text(tools.trace("aten::relu", focus="AutocastCUDA"))
            assert at(repo, LISTS_H, "_(relu)") in relu, relu
            none = _text(tools.trace("aten::add.Tensor", focus="AutocastCUDA"))
            assert "AutocastCUDA: nothing registered for aten::add.Tensor" in none, none
            status = tools.get_status().structured_content
            assert any(
                "3 use(s) in registration blocks could not be read" in note
                for note in status["notes"]
            ), status["notes"]
        finally:
            state.stop()


def _text(result) -> str:
    return "\n".join(block.text for block in result.content)
