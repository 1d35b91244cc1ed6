"""The `graph` query (indexer/query/graph.py) on the real minitorch fixture index."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.query.graph import graph
from indexer.query.index import Index
from indexer.workspace import Workspace
from tests.helpers import line_of, make_fixture_repo

NATIVE = "aten/src/ATen/native"


@pytest.fixture(scope="module")
def minitorch_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fixture_repo("minitorch", tmp_path_factory.mktemp("graph") / "minitorch")


@pytest.fixture(scope="module")
def index(minitorch_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Index:
    """One index for the module: these tests only read it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(tmp_path_factory.mktemp("graph-cache")))
        workspace = Workspace.resolve(minitorch_repo)
        build_index(workspace, show_progress=False)
        return Index(workspace.db_path)


def at(repo: Path, path: str, text: str, occurrence: int = 1) -> str:
    return f"{path}:{line_of(repo / path, text, occurrence)}"


def test_callers_of_overloads_show_the_shared_caller_under_each(
    index: Index, minitorch_repo: Path
) -> None:
    answer = graph(index, "gemm", depth=2)
    starts = [item for item in answer.items if item.depth == 0]
    assert [item.label for item in starts] == ["at::native::cpublas::gemm"] * 3
    callers = [item for item in answer.items if item.depth == 1]
    assert [item.label for item in callers] == ["at::native::addmm_impl_cpu_"] * 3
    site = at(minitorch_repo, f"{NATIVE}/LinearAlgebra.cpp", "cpublas::gemm(")
    assert {item.evidence for item in callers} == {site}
    assert "ambiguous: 3 candidates" in callers[0].detail
    # Walked once, below the first occurrence; the others say so.
    assert sum("listed above" in item.detail for item in callers) == 2
    deeper = {item.label for item in answer.items if item.depth == 2}
    assert {"at::native::addmm_cpu", "at::native::mm_cpu"} <= deeper
    assert f"{site}" in answer.to_text()


def test_calls_walk_outbound_through_a_dispatch_stub(index: Index, minitorch_repo: Path) -> None:
    answer = graph(index, "at::native::structured_add_out::impl", mode="calls", depth=2)
    by_label = {item.label: item for item in answer.items if not item.data.get("unresolved")}
    binary_ops = f"{NATIVE}/BinaryOps.cpp"
    assert by_label["at::native::add_stub"].evidence == at(
        minitorch_repo, binary_ops, "add_stub(device_type(), *this, alpha)"
    )
    assert by_label["at::native::(anonymous)::add_kernel"].evidence == at(
        minitorch_repo, f"{NATIVE}/cpu/BinaryOpsKernel.cpp", "REGISTER_DISPATCH(add_stub"
    )
    assert by_label["at::native::add_kernel_cuda"].evidence == at(
        minitorch_repo, f"{NATIVE}/cuda/BinaryAddKernel.cu", "REGISTER_DISPATCH(add_stub"
    )
    assert "dispatches" in by_label["at::native::add_kernel_cuda"].detail
    assert by_label["at::native::add_kernel_cuda"].depth == 1  # under the stub
    # What the linker could not attribute is listed, not dropped.
    unresolved = [item for item in answer.items if item.data.get("unresolved")]
    assert unresolved and all(item.evidence.startswith(binary_ops) for item in unresolved)
    assert "unresolved calls listed last" in answer.title


def test_impact_by_level_with_a_path_focus(index: Index, minitorch_repo: Path) -> None:
    linear_algebra = f"{NATIVE}/LinearAlgebra.cpp"
    answer = graph(index, "at::native::cpublas::gemm", mode="impact", focus=linear_algebra)
    levels = {item.label: item.data["level"] for item in answer.items}
    assert levels["at::native::addmm_impl_cpu_"] == 1
    assert levels["at::native::mm_cpu"] == 2
    assert levels["at::native::(anonymous)::_matmul_impl"] == 3
    assert all(item.evidence.startswith(linear_algebra) for item in answer.items)
    assert answer.items[0].data["via"] == "at::native::cpublas::gemm"
    assert answer.data["by_level"][1] >= 1
    shallow = graph(index, "at::native::cpublas::gemm", mode="impact", depth=1)
    assert {item.data["level"] for item in shallow.items} == {1}


def test_python_callers_and_the_tests_that_cover_them(index: Index, minitorch_repo: Path) -> None:
    answer = graph(index, "minitorch.nn.functional.relu", mode="impact", focus="tests")
    assert all(item.data["kind"].startswith("test_") for item in answer.items)
    evidence = {item.label: item.evidence for item in answer.items}
    # The evidence of a test is where it calls the function, not where the test starts.
    assert evidence["test/test_nn.py::test_functional_relu"] == at(
        minitorch_repo, "test/test_nn.py", "assert_close(F.relu("
    )
    everything = graph(index, "minitorch.nn.functional.relu", mode="impact")
    forward = next(i for i in everything.items if i.label.endswith("ReLU.forward"))
    assert forward.evidence == at(minitorch_repo, "minitorch/nn/modules/activation.py", "F.relu(")
    # minitorch._C.relu is an absolute dotted name: it cannot mean this function.
    assert not [i for i in everything.items if i.data.get("unresolved_name")]


def _unresolved_cpp_calls(index: Index) -> list[tuple]:
    """(caller id, name as written, path, line, qualname of a function with that name)."""
    return index.conn.execute(
        "SELECT r.src_id, r.target, f.path, r.line, n.qualname FROM refs r"
        " JOIN files f ON f.id = r.file_id JOIN nodes n ON n.name = r.target_key"
        " WHERE r.scheme = 'cpp' AND r.target_id IS NULL AND n.kind = 'cpp_function'"
        " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id) ORDER BY f.path, r.line"
    ).fetchall()


def _could_mean(written: str, qualname: str) -> bool:
    written = written.split("<")[0].lstrip(":")
    plain = qualname.replace("(anonymous)::", "")
    return "::" not in written or plain == written or plain.endswith("::" + written)


def test_unresolved_calls_are_possible_callers(index: Index) -> None:
    """A call the linker left unresolved, whose name matches, is listed and marked so."""
    rows = [row for row in _unresolved_cpp_calls(index) if _could_mean(row[1], row[4])]
    assert rows, "the fixture no longer has an unresolved C++ call matching a function by name"
    src_id, target, path, line, qualname = rows[0]
    answer = graph(index, qualname)
    possible = [item for item in answer.items if item.data.get("unresolved_name") == target]
    assert possible, answer.to_text()
    assert possible[0].evidence == f"{path}:{line}"
    assert possible[0].data["id"] == src_id
    assert "possible calls" in possible[0].detail
    assert "only by unresolved name match" in answer.title


def test_a_qualified_unresolved_name_only_matches_what_ends_with_it(index: Index) -> None:
    """`ns::foo` written in C++ cannot mean `other::foo`: not listed as a possible caller."""
    rows = [row for row in _unresolved_cpp_calls(index) if not _could_mean(row[1], row[4])]
    assert rows, "the fixture no longer has a qualified unresolved call naming another scope"
    for _src_id, target, _path, _line, qualname in rows:
        answer = graph(index, qualname)
        assert not [i for i in answer.items if i.data.get("unresolved_name") == target], target


def test_unknown_names_and_bad_arguments(index: Index) -> None:
    missing = graph(index, "at::native::no_such_function")
    assert not missing.found and "not found" in missing.to_text()
    close = graph(index, "check_add_alph")
    assert any("check_add_alpha" in name for name in close.suggestions)
    for kwargs, word in [
        ({"mode": "sideways"}, "mode"),
        ({"depth": 0}, "depth"),
        ({"focus": "nowhere/at/all"}, "focus"),
    ]:
        with pytest.raises(ValueError, match=word):
            graph(index, "gemm", **kwargs)
    with pytest.raises(ValueError, match="func"):
        graph(index, "  ")


def test_a_qualified_suffix_finds_the_function(index: Index) -> None:
    answer = graph(index, "cpublas::gemm")
    assert answer.found
    assert answer.data["matched_by"] == "suffix"
    assert {start["qualname"] for start in answer.data["starts"]} == {"at::native::cpublas::gemm"}


def test_ops_are_the_boundary_unless_walk_python(index: Index, minitorch_repo: Path) -> None:
    binary_ops = f"{NATIVE}/BinaryOps.cpp"
    cpp_only = graph(index, "check_add_alpha", mode="impact", depth=6)
    kinds = {item.data["kind"] for item in cpp_only.items}
    assert "op" in kinds  # aten::add.out dispatches to the structured kernel
    assert not any(kind.startswith(("python_", "test_")) for kind in kinds)
    assert "aten::add.out" in cpp_only.data["boundary"]
    assert any("walk_python=true continues" in note for note in cpp_only.notes)

    through = graph(
        index, "check_add_alpha", mode="impact", depth=6, walk_python=True, focus="tests"
    )
    tests = {item.label: item for item in through.items}
    add_alpha = tests["test/test_binary_ufuncs.py::TestBinaryUfuncs::test_add_alpha"]
    assert add_alpha.evidence == at(
        minitorch_repo, "test/test_binary_ufuncs.py", "minitorch.add(", 1
    )
    assert add_alpha.data["kind"] == "test_function"
    assert through.data["boundary"] == []
    # The chain back to the change is in the data: test -> python wrapper -> op -> kernel.
    assert add_alpha.data["via"] == "minitorch.functional.add"
    first = graph(index, "check_add_alpha")
    assert first.items[0].evidence == at(
        minitorch_repo, binary_ops, "check_add_alpha(*this, alpha)"
    )


def test_an_anonymous_namespace_may_be_left_out(index: Index) -> None:
    answer = graph(index, "at::native::add_kernel", mode="callers")
    assert answer.found, answer.to_text()
    assert [start["qualname"] for start in answer.data["starts"]] == [
        "at::native::(anonymous)::add_kernel"
    ]
    assert any(item.label == "at::native::add_stub" for item in answer.items)
