"""The MCP ``affected`` query: changed functions by name -> impacted test files, with the
chain of evidence; the same walk as test selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.answers.affected import affected
from indexer.build import build_index
from indexer.query.index import Index
from indexer.workspace import Workspace
from tests.helpers import line_of


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    from tests.helpers import make_fixture_repo

    base = tmp_path_factory.mktemp("affected")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(base / "cache"))
        workspace = Workspace.resolve(repo)
        build_index(workspace, show_progress=False)
        opened = Index(workspace.db_path)
    opened.repo = repo  # type: ignore[attr-defined]
    return opened


def test_changed_cpp_function_to_test_files_with_chains(index: Index) -> None:
    answer = affected(index, ["at::native::matmul"])
    assert answer.found
    files = answer.data["test_files"]
    assert {"test/test_tensor.py", "test/test_linalg.py", "test/test_ops.py"} <= set(files)
    assert "test/test_unrelated.py" not in files
    item = next(i for i in answer.items if i.label == "test/test_tensor.py")
    chain = item.data["chain"]
    yaml = Path(index.repo) / "aten/src/ATen/native/native_functions.yaml"  # type: ignore[attr-defined]
    matmul_entry = line_of(yaml, "- func: matmul(")
    assert chain[0] == {
        "kind": "dispatches",
        "src": "aten::matmul",
        "dst": "at::native::matmul",
        "evidence": f"aten/src/ATen/native/native_functions.yaml:{matmul_entry}",
        "src_kind": "op",
        "dst_kind": "cpp_function",
        "extractor": "fast",
    }
    assert chain[-1]["kind"] == "covers" and chain[-1]["src"].startswith("test/test_tensor.py")
    assert "test/test_tensor.py" in answer.to_text()


def test_short_and_suffix_names_and_comma_lists(index: Index) -> None:
    by_suffix = affected(index, "native::add_kernel_cuda_impl, mm_cpu")
    assert [c["name"] for c in by_suffix.data["changed"]] == [
        "at::native::add_kernel_cuda_impl",
        "at::native::mm_cpu",
    ]
    assert "test/test_ops.py" in by_suffix.data["test_files"]


def test_depth_caps_the_walk(index: Index) -> None:
    full = affected(index, ["at::native::addmm_impl_cpu_"])
    capped = affected(index, ["at::native::addmm_impl_cpu_"], depth=2)
    assert set(capped.data["test_files"]) < set(full.data["test_files"])
    assert "within 2 hops" in capped.title


def test_unknown_name_is_not_found_with_suggestions(index: Index) -> None:
    answer = affected(index, ["matmull_impl"])
    assert not answer.found
    assert any("matmul" in s for s in answer.suggestions)


def test_unreached_function_says_selection_would_run_everything(index: Index) -> None:
    answer = affected(index, ["at::native::legacy::special_erfcx"])
    assert answer.found and answer.data["test_files"] == []
    assert "would run everything" in answer.to_text()


def test_calls_share_one_walker_and_concurrent_calls_agree(index: Index) -> None:
    """A server keeps the index open: its calls reuse one walker (and its caches), and
    calls from two threads at once give the answer one call gives."""
    from concurrent.futures import ThreadPoolExecutor

    first = affected(index, ["at::native::matmul"])
    walker = index.shared("impact-walker", lambda: None)
    assert walker is not None
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda _: affected(index, ["at::native::matmul"]), range(4)))
    assert all(a.data == first.data and a.items == first.items for a in answers)
    assert index.shared("impact-walker", lambda: None) is walker


def test_a_full_answer_stops_the_walk_and_says_it_is_a_lower_bound(index: Index) -> None:
    """The walk stops once it has the files the answer lists (the nearest first); the
    answer then says "at least", and a walk that ends before the limit says it is all."""
    full = affected(index, ["at::native::matmul"])
    assert full.data["complete"] and len(full.data["test_files"]) >= 3
    assert full.title.startswith(f"{len(full.data['test_files'])} test files")

    bounded = affected(index, ["at::native::matmul"], limit=2)
    assert not bounded.data["complete"]
    assert len(bounded.data["test_files"]) == 2
    assert set(bounded.data["test_files"]) < set(full.data["test_files"])
    assert bounded.title.startswith("at least 2 test files")
    assert "torchtalk select" in bounded.title
    files = [item for item in bounded.items if item.depth == 0]
    hops = [len(item.data["chain"]) for item in files]
    assert hops == sorted(hops)  # nearest first
    every = [i for i in full.items if i.depth == 0]
    order = [(len(i.data["chain"]), -i.data["reached"]) for i in every]
    assert order == sorted(order)  # then where most of the walk landed
    assert len({i.data["reached"] for i in every}) > 1
    nearest = min(len(i.data["chain"]) for i in full.items if i.depth == 0)
    assert hops[0] == nearest


def test_limit_must_be_positive(index: Index) -> None:
    with pytest.raises(ValueError, match="limit must be at least 1"):
        affected(index, ["at::native::matmul"], limit=0)


@pytest.mark.parametrize("name", ["at::native::matmul", "at::native::mm_cpu"])
def test_a_walk_with_a_quota_reaches_the_first_files_a_full_walk_reaches(
    index: Index, name: str
) -> None:
    """The quota stops the walk at the same point of the same breadth-first order: the
    files it reached are the first ones the full walk reaches, by the same steps."""
    from indexer.select.impact import ImpactWalker
    from indexer.select.reach import FileQuota

    tests = {
        file_id
        for (file_id,) in index.conn.execute(
            "SELECT DISTINCT file_id FROM nodes WHERE kind = 'test_file'"
        )
    }
    starts = {node.id: 0 for node in index.find(name, ["cpp_function"])}
    walker = ImpactWalker(index)
    full = walker.walk(starts)
    in_order = list(dict.fromkeys(f for n, f in full.file_id.items() if f in tests))
    assert len(in_order) >= 3
    for count in range(1, len(in_order) + 1):
        quota = FileQuota(tests, count)
        bounded = walker.walk(starts, quota=quota)
        reached = list(dict.fromkeys(f for n, f in bounded.file_id.items() if f in tests))
        assert reached == in_order[:count]
        assert all(bounded.steps[n] == full.steps[n] for n in bounded.steps)
        assert quota.full
