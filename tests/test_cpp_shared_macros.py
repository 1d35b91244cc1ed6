"""Definitions written by a macro from another file: a header's declaration-writing macro
(``TORCH_ARG``-style accessors, ``REGISTER_OPERATOR_FUNCTOR``-style functors) used at
class or namespace scope elsewhere is expanded at the line of the use, in the class it is
used in; statement macros (``TORCH_CHECK``-style) and ambiguous ones are left alone; an
update that edits such a macro re-extracts the files that use it, even without an
include naming the header, and equals a rebuild."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.build import build_index, tree_context
from indexer.extract import pipeline
from indexer.extract.discover import discover
from indexer.query.index import Index, Node
from indexer.update import update_index
from indexer.workspace import Workspace
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo
from tests.test_update_equals_rebuild import assert_same_graph, rebuild_copy

ARG_H = """\
#pragma once
// Accessors for an options class, as torch/arg.h writes them.
#define MX_ARG(T, name)                                            \\
 public:                                                           \\
  inline auto name(const T& new_##name) -> decltype(*this) {       \\
    this->name##_ = new_##name;                                    \\
    return *this;                                                  \\
  }                                                                \\
  inline const T& name() const noexcept {                          \\
    return this->name##_;                                          \\
  }                                                                \\
                                                                   \\
 private:                                                          \\
  T name##_

// A statement macro: for function bodies, never shared.
#define MX_CHECK(cond)  \\
  if (!(cond)) {        \\
    mx::fail();         \\
  }
"""

REGISTRY_H = """\
#pragma once
#define MX_REGISTER(id, fn)           \\
  struct Functor_##id {               \\
    void run() { fn(); }              \\
  };
"""

# Two headers, two meanings: which one a file sees depends on its includes.
TWICE_A = "#pragma once\n#define MX_TWICE(name) void name() {}\n"
TWICE_B = "#pragma once\n#define MX_TWICE(name) void name() { mx::fail(); }\n"

OPTIONS_H = """\
#pragma once
#include "arg.h"

namespace mx {

struct AdamOptions {
  AdamOptions(double lr = 1e-3);
  MX_ARG(double, lr) = 1e-3;
  MX_ARG(bool, amsgrad) = false;

 public:
  int after() const { return 1; }
};

}  // namespace mx
"""

# No #include of registry.h: reached through a generated or unresolved header.
OPS_CPP = """\
#include <generated/everything.h>

namespace mx {

void fail() {}
void base_op() {}
void helper_call() {}

MX_REGISTER(add, base_op)

void uses_check(int x) {
  MX_CHECK(x > 0);
  helper_call();
}

MX_TWICE(twice)

}  // namespace mx
"""


def _write(repo: Path) -> None:
    api = repo / "csrc" / "api"
    api.mkdir(parents=True, exist_ok=True)
    for name, text in {
        "arg.h": ARG_H,
        "registry.h": REGISTRY_H,
        "twice_a.h": TWICE_A,
        "twice_b.h": TWICE_B,
        "options.h": OPTIONS_H,
        "ops.cpp": OPS_CPP,
    }.items():
        (api / name).write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("shared-macros")
    repo = make_fixture_repo("miniext", base / "miniext")
    _write(repo)
    commit_all(repo, "shared macros")
    return repo, build_private_index(repo, base)


def functions(index: Index, qualname: str) -> list[Node]:
    return [n for n in index.find(qualname, ["cpp_function"]) if n.qualname == qualname]


def test_class_scope_use_defines_the_accessors_in_its_class(built) -> None:
    repo, index = built
    options = repo / "csrc/api/options.h"
    lr = functions(index, "mx::AdamOptions::lr")
    assert len(lr) == 2, lr  # the setter and the getter: overloads stay distinct
    assert {node.line for node in lr} == {line_of(options, "MX_ARG(double, lr)")}
    assert {node.path for node in lr} == {"csrc/api/options.h"}
    assert len(functions(index, "mx::AdamOptions::amsgrad")) == 2
    # The class around the uses is intact: what follows them is still its member.
    after = functions(index, "mx::AdamOptions::after")
    assert [node.line for node in after] == [line_of(options, "int after() const")]
    names = [row[0] for row in index.conn.execute("SELECT qualname FROM nodes")]
    assert not [name for name in names if "MX_ARG" in name]


def test_namespace_scope_use_defines_a_functor_with_its_calls(built) -> None:
    repo, index = built
    ops = repo / "csrc/api/ops.cpp"
    (run,) = functions(index, "mx::Functor_add::run")
    assert run.line == line_of(ops, "MX_REGISTER(add, base_op)")
    calls = {index.node(edge.dst).qualname for edge in index.out_edges(run.id, ["calls"])}
    assert "mx::base_op" in calls


def test_statement_and_ambiguous_macros_are_not_shared(built) -> None:
    _, index = built
    (uses_check,) = functions(index, "mx::uses_check")
    calls = {index.node(edge.dst).qualname for edge in index.out_edges(uses_check.id, ["calls"])}
    assert "mx::helper_call" in calls  # the body around MX_CHECK(...) still parses
    assert "mx::fail" not in calls  # a header's statement macro is not expanded in it
    assert functions(index, "mx::twice") == []  # two headers, two meanings: neither


def test_editing_a_shared_macro_reextracts_its_users_like_a_rebuild(
    tmp_path: Path,
) -> None:
    repo = make_fixture_repo("miniext", tmp_path / "miniext")
    _write(repo)
    commit_all(repo, "shared macros")
    workspace = Workspace.resolve(repo)
    build_index(workspace, jobs=1, show_progress=False)
    registry = repo / "csrc/api/registry.h"
    registry.write_text(
        REGISTRY_H.replace("void run() { fn(); }", "void run() { fn(); }  \\\n    void stop() {}"),
        encoding="utf-8",
    )
    result = update_index(workspace, jobs=1, show_progress=False)
    assert "csrc/api/ops.cpp" in result.dependents  # it includes no header naming it
    index = Index(workspace.db_path)
    try:
        assert len(functions(index, "mx::Functor_add::stop")) == 1
    finally:
        index.close()
    assert_same_graph(workspace.db_path, rebuild_copy(repo, tmp_path / "rebuilt"), "macro edit")


def test_worker_processes_extract_with_the_context(built, monkeypatch) -> None:
    """A pool's workers get the context too (small trees are extracted in-process)."""
    repo, _ = built
    workspace = Workspace.resolve(repo)
    entries = discover(repo, workspace.manifest)
    context = tree_context(repo, workspace.manifest, entries)
    monkeypatch.setattr(pipeline, "POOL_THRESHOLD", 0)
    facts = {f.path: f for f in pipeline.extract_all(repo, workspace.manifest, entries, 2, context)}
    options = facts["csrc/api/options.h"]
    assert options.error is None
    assert "mx::AdamOptions::lr" in {node.qualname for node in options.nodes}
