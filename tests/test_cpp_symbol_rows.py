"""The C++ symbol table read one name at a time (an update's few refs) must resolve every
ref as the table of every row (a build's) does: the same targets, in the same order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.link.linker import RESOLVERS, _load_refs, _resolver
from indexer.link.symbols import SymbolTable
from indexer.workspace import Workspace


def _resolutions(conn: sqlite3.Connection, few_refs: bool) -> dict[str, list[tuple]]:
    symbols = SymbolTable(conn, few_refs=few_refs)
    found: dict[str, list[tuple]] = {}
    for scheme, refs in sorted(_load_refs(conn, None).items()):
        if RESOLVERS[scheme].startswith("indexer.cpp."):
            found[scheme] = [
                (res.ref_id, res.dst_id, res.src_id, sorted((res.attrs or {}).items()))
                for res in _resolver(scheme)(refs, symbols)
            ]
    return found


# What each kind of row is looked up for: an alias (TORCH_IMPL_FUNC's name in its
# namespace), static and anonymous functions (seen from their own file only), bases,
# specializations, an unqualified name found only in the caller's own file.
LOOKUPS = """\
#include "ATen/native/BinaryOps.h"
namespace at { namespace native {
namespace {
int hidden(int x) { return x; }
}
static int helper_in_broken(int x) { return hidden(x); }
template <typename T> struct Vec { static Vec loadu(const T* p); };
template <> struct Vec<float> { static Vec loadu(const float* p); };
Vec<float> Vec<float>::loadu(const float* p) { return Vec<float>(); }
struct Base { void run(int x); };
struct Derived : Base { void go(); };
void Base::run(int x) { helper_in_broken(x); }
void Derived::go() { run(1); Vec<float>::loadu(nullptr); }
void calls_the_alias(const Tensor& self, const Tensor& other, const Tensor& out) {
  add_out(self, other, out);
  detail::nowhere();
  local_only_here();
}
void local_only_here() {}
void by_file_and_suffix() { only_by_file(); detail::suffixed(); }
}}
namespace elsewhere { void only_by_file() {} }
namespace at { namespace deeper { namespace detail { static void suffixed() {} }}}
"""
# The same names in another file: not what the calls above find.
OTHER = """\
namespace faraway { void only_by_file() {} }
namespace at { namespace other { namespace detail { void suffixed() {} }}}
"""


@pytest.mark.parametrize("fixture", ["minitorch_repo", "miniext_repo"])
def test_rows_read_by_name_resolve_as_every_row(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    repo: Path = request.getfixturevalue(fixture)
    if fixture == "minitorch_repo":
        (repo / "aten/src/ATen/native/Lookups.cpp").write_text(LOOKUPS, encoding="utf-8")
        (repo / "aten/src/ATen/native/Other.cpp").write_text(OTHER, encoding="utf-8")
    db = build_index(Workspace.resolve(repo), jobs=1, show_progress=False).db_path
    # Every ref unresolved again, as the link step first sees them.
    conn = sqlite3.connect(db)
    conn.execute("UPDATE refs SET target_id = NULL WHERE scheme IN ('cpp', 'include')")
    every_row = _resolutions(conn, few_refs=False)
    by_name = _resolutions(conn, few_refs=True)
    conn.close()
    assert every_row["cpp"], "the fixture resolves C++ calls"
    assert by_name == every_row
