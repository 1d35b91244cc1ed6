"""Definitions after a project's own export and attribute macros (issue 38): a name the
project defines in its header as an attribute, a qualifier or nothing (``MX_PUBLIC
torch::Tensor f(...)``, per platform; ``MX_HD`` as ``__host__ __device__``; one macro
naming another) is read as what it expands to, so ``f`` is defined and its callers link;
a file's own such macro too; a macro that expands to a value is left alone; an update
that makes a header's macro an attribute re-extracts its users, like a rebuild."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.cpp.preprocess import prepare
from indexer.cpp.shared_macros import SharedMacros, header_macros
from indexer.query.index import Index, Node
from indexer.update import update_index
from indexer.workspace import Workspace
from tests.helpers import build_private_index, commit_all, line_of, make_fixture_repo
from tests.test_update_equals_rebuild import assert_same_graph, rebuild_copy

# The made-up names of a project: each spelled one way per platform, as export headers are.
EXPORT_H = """\
#pragma once
#include <torch/torch.h>

#if defined(_WIN32)
#define MX_PUBLIC __declspec(dllexport)
#else
#define MX_PUBLIC __attribute__((visibility("default")))
#endif
#define MX_INLINE inline __attribute__((always_inline))
#define MX_ALIAS MX_PUBLIC
#ifdef __CUDACC__
#define MX_HD __host__ __device__
#define MX_KERNEL __global__
#else
#define MX_HD
#define MX_KERNEL
#endif
// A value, not an attribute: its uses stay.
#define MX_WIDTH 4

namespace mx {
MX_PUBLIC torch::Tensor scale(const torch::Tensor& x);
}  // namespace mx
"""

OPS_CPP = """\
#include "export.h"

namespace mx {

MX_PUBLIC torch::Tensor scale(const torch::Tensor& x) {
  return x * MX_WIDTH;
}

MX_INLINE torch::Tensor shift(const torch::Tensor& x) {
  return x + 1;
}

MX_ALIAS std::vector<int64_t> widths(int64_t n) {
  return {n};
}

#define MX_LOCAL static
MX_LOCAL at::Tensor& clip(at::Tensor& x) {
  return x;
}

torch::Tensor entry(const torch::Tensor& x) {
  auto y = scale(x);
  auto z = shift(y);
  widths(2);
  clip(z);
  return z;
}

}  // namespace mx
"""

KERNELS_CU = """\
#include "export.h"

namespace mx {

MX_HD float twice(float v) {
  return v * 2;
}

MX_KERNEL void twice_kernel(float* out, const float* in) {
  out[threadIdx.x] = twice(in[threadIdx.x]);
}

void launch_twice(float* out, const float* in) {
  twice_kernel<<<1, 32>>>(out, in);
}

}  // namespace mx
"""


def _write(repo: Path, header: str = EXPORT_H) -> None:
    csrc = repo / "csrc" / "mx"
    csrc.mkdir(parents=True, exist_ok=True)
    for name, text in {"export.h": header, "ops.cpp": OPS_CPP, "kernels.cu": KERNELS_CU}.items():
        (csrc / name).write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Index]:
    base = tmp_path_factory.mktemp("attribute-macros")
    repo = make_fixture_repo("miniext", base / "miniext")
    _write(repo)
    commit_all(repo, "a project's attribute macros")
    return repo, build_private_index(repo, base)


def functions(index: Index, qualname: str, kind: str = "cpp_function") -> list[Node]:
    return [n for n in index.find(qualname, [kind]) if n.qualname == qualname]


def test_functions_after_the_projects_macros_are_defined_where_written(built) -> None:
    repo, index = built
    ops = repo / "csrc/mx/ops.cpp"
    for name, text in {
        "mx::scale": "MX_PUBLIC torch::Tensor scale(const torch::Tensor& x) {",
        "mx::shift": "MX_INLINE torch::Tensor shift(",
        "mx::widths": "MX_ALIAS std::vector<int64_t> widths(",
        "mx::clip": "MX_LOCAL at::Tensor& clip(",
    }.items():
        found = functions(index, name)
        assert [(n.path, n.line) for n in found] == [("csrc/mx/ops.cpp", line_of(ops, text))], name
    names = [row[0] for row in index.conn.execute("SELECT qualname FROM nodes")]
    assert not [name for name in names if "MX_" in name or "Tensorshift" in name]
    (row,) = index.conn.execute(
        "SELECT parse_errors FROM files WHERE path = 'csrc/mx/ops.cpp'"
    ).fetchall()
    assert row == (0,)


def test_callers_link_to_those_definitions(built) -> None:
    _, index = built
    (entry,) = functions(index, "mx::entry")
    calls = {index.node(edge.dst).qualname for edge in index.out_edges(entry.id, ["calls"])}
    assert {"mx::scale", "mx::shift", "mx::widths", "mx::clip"} <= calls


def test_cuda_qualifiers_behind_a_macro_keep_what_they_mark(built) -> None:
    _, index = built
    (twice,) = functions(index, "mx::twice")
    assert twice.attrs.get("device") and twice.attrs.get("host")
    (kernel,) = functions(index, "mx::twice_kernel", "cuda_kernel")
    (launcher,) = functions(index, "mx::launch_twice")
    launched = [index.node(e.dst).qualname for e in index.out_edges(launcher.id, ["launches"])]
    assert launched == ["mx::twice_kernel"]
    calls = [index.node(e.dst).qualname for e in index.out_edges(kernel.id, ["calls"])]
    assert "mx::twice" in calls


def test_a_macro_with_a_value_is_not_blanked() -> None:
    shared = SharedMacros({"export.h": header_macros(EXPORT_H.encode())})
    assert "MX_WIDTH" not in shared.attributes
    assert shared.attributes["MX_KERNEL"] == "global"
    # Defined as a value in another header: no longer an attribute anywhere.
    other = b"#pragma once\n#define MX_INLINE 3\n"
    both = SharedMacros({"export.h": header_macros(EXPORT_H.encode()), "o.h": header_macros(other)})
    assert "MX_INLINE" not in both.attributes
    data = prepare(OPS_CPP.encode(), shared).data
    assert b"x * MX_WIDTH;" in data
    assert b"MX_PUBLIC" not in data.split(b"\n", 1)[1]  # the #include line aside


def test_an_update_that_makes_a_macro_an_attribute_equals_a_rebuild(tmp_path: Path) -> None:
    repo = make_fixture_repo("miniext", tmp_path / "miniext")
    # First the header defines MX_PUBLIC as a value: `MX_PUBLIC torch::Tensor` is no type.
    _write(repo, EXPORT_H.replace('__attribute__((visibility("default")))', "1"))
    commit_all(repo, "a macro that is not an attribute yet")
    workspace = Workspace.resolve(repo)
    build_index(workspace, jobs=1, show_progress=False)
    (repo / "csrc/mx/export.h").write_text(EXPORT_H, encoding="utf-8")
    result = update_index(workspace, jobs=1, show_progress=False)
    assert "csrc/mx/ops.cpp" in result.dependents  # unchanged, and named by the edit
    index = Index(workspace.db_path)
    try:
        assert len(functions(index, "mx::scale")) == 1
    finally:
        index.close()
    assert_same_graph(workspace.db_path, rebuild_copy(repo, tmp_path / "rebuilt"), "macro edit")


def test_uses_in_continued_directives_and_calls_are_left_alone() -> None:
    """PyTorch's ``#if defined(A) && \\`` / ``defined(CUDART_SUPPORTS_MULTICAST)`` and
    ``C10_DEFINE_DEPRECATED_USING(...)`` (a name also defined function-like)."""
    shared = SharedMacros({"export.h": header_macros(EXPORT_H.encode())})
    text = (
        "#if defined(_WIN32) && \\\n    defined(MX_PUBLIC)\nint x;\n#endif\n"
        "MX_PUBLIC(Alias, Target)\n"
        "MX_PUBLIC int f();\n"
    )
    data = prepare(text.encode(), shared).data
    assert b"    defined(MX_PUBLIC)" in data
    assert b"MX_PUBLIC(Alias, Target)" in data
    assert b"\n          int f();" in data
