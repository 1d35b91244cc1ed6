"""Chains to the hub from the most used ops (indexer.select.hub_chains): after an update,
the chains are those a build derives, whatever the update changed; an op whose walk read
nothing the update changed keeps its chain without being walked again; and a selection
after the update answers as after a rebuild of the chains."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from indexer.refresh import refresh_index
from indexer.select import hub_chains
from tests.select_support import IndexedTree, indexed_tree, rederive
from tests.test_snapshot_nearest import run

WARMUP = "minitorch/_warmup.py"
# A module the package imports whose top-level code calls matmul: aten::matmul (and
# aten::mm, whose kernel at::native::matmul calls) reach the hub, as PyTorch's ops do
# through the modules torch imports.
WARMUP_TEXT = (
    '"""Run once at import."""\n\n'
    "from .functional import matmul\n"
    "from .tensor import Tensor\n\n"
    "_ONE = matmul(Tensor([[1.0]]), Tensor([[1.0]]))\n"
)
LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"
# A kernel statement calling a helper: an edge no op's walk to the hub meets.
ELSEWHERE = (
    "check_dim_size(m1, 2);",
    "check_dim_size(m1, 2);\n  check_dim_size(m1.sizes(), 2);",
)
# A statement added to _matmul_impl, on mm's chain: its facts only move.
ON_MM_CHAIN = (
    "  const auto dim2 = tensor2.dim();\n",
    "  const auto dim2 = tensor2.dim();\n  (void)dim1;\n",
)


def _warm_up(root: Path) -> None:
    (root / WARMUP).write_text(WARMUP_TEXT, encoding="utf-8")
    init = root / "minitorch/__init__.py"
    text = init.read_text(encoding="utf-8")
    added = text.replace("from . import fused\n", "from . import fused\nfrom . import _warmup\n")
    init.write_text(added, encoding="utf-8")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    return indexed_tree(tmp_path_factory, "minitorch", _warm_up)


@pytest.fixture
def tree(shared: IndexedTree, monkeypatch: pytest.MonkeyPatch):
    yield shared.use(monkeypatch)
    shared.reset()


def _derivation(tree: IndexedTree) -> hub_chains.Derivation:
    with closing(tree.index()) as index:
        found = hub_chains.load(index)
    assert found is not None
    return found


def _as_data(derivation: hub_chains.Derivation) -> list:
    """Everything kept, per op: its chain and what its walk read."""
    return [
        (op.op, op.chain, list(op.met), list(op.asked), list(op.led), list(op.given))
        for op in derivation.ops
    ] + [derivation.hub, derivation.chain_ids]


def _starts(derivation: hub_chains.Derivation) -> set[str]:
    return {chain[0][1] for chain in derivation.chains()}


def _updated(tree: IndexedTree) -> hub_chains.Derivation:
    assert refresh_index(tree.workspace, show_progress=False).how == "updated"
    return _derivation(tree)


def _rebuilt(tree: IndexedTree) -> hub_chains.Derivation:
    """The chains a build derives from the index as it is now."""
    rederive(tree.workspace, hub_chains.NAME)
    rebuilt = _derivation(tree)
    assert rebuilt.walked == len(rebuilt.ops)
    return rebuilt


def test_an_update_changing_what_chains_pass_derives_what_a_build_does(tree: IndexedTree) -> None:
    refresh_index(tree.workspace, show_progress=False)
    before = _derivation(tree)
    assert _starts(before) == {"aten::matmul", "aten::mm"}
    # Warm up with relu now: matmul's chain (and mm's, which followed it) are gone, and
    # relu reaches the hub by an edge new in this update.
    tree.replace(WARMUP, "from .functional import matmul\n", "from .functional import relu\n")
    tree.replace(
        WARMUP, "_ONE = matmul(Tensor([[1.0]]), Tensor([[1.0]]))", "_ONE = relu(Tensor([[1]]))"
    )
    tree.commit("warm up with relu")
    updated = _updated(tree)
    assert _starts(updated) == {"aten::relu"}
    assert 0 < updated.walked < len(updated.ops)  # only the ops whose walks it touched
    assert _as_data(updated) == _as_data(_rebuilt(tree))


def test_an_update_elsewhere_keeps_every_chain_and_selects_as_after_a_rebuild(
    tree: IndexedTree,
) -> None:
    refresh_index(tree.workspace, show_progress=False)
    before = _derivation(tree)
    tree.replace(LINALG, *ELSEWHERE)
    tree.commit("a kernel no op's walk to the hub meets")
    updated = _updated(tree)
    assert updated.walked == 0  # every chain kept, none walked again
    assert _as_data(updated)[:-2] == _as_data(before)[:-2]
    # A change whose walk meets mm's chain, selected with the update's chains, then with
    # chains derived again from the same index.
    tree.replace(LINALG, *ON_MM_CHAIN)
    first = tree.select()
    assert "reached by a kept chain" in first.index["hub_walk"]
    assert _as_data(_derivation(tree)) == _as_data(_rebuilt(tree))
    again = tree.select()
    assert again.index["hub_walk"] == first.index["hub_walk"]
    assert _reasons(again) == _reasons(first) and _reasons(first)


def _reasons(selection) -> dict[str, list]:
    return {path: selected.reasons for path, selected in selection.files.items()}


def test_a_loaded_snapshot_keeps_every_chain_an_edit_only_moved(
    tree: IndexedTree, capsys: pytest.CaptureFixture[str]
) -> None:
    # A PR job: the nightly's snapshot loaded, a statement added to a kernel on mm's
    # chain: its facts only move, so no chain is walked again.
    refresh_index(tree.workspace, show_progress=False)
    before = _derivation(tree)
    source = str(tree.root)
    assert run(capsys, "snapshot", "save", "nightly", "--source", source)[0] == 0
    assert run(capsys, "snapshot", "load", "nightly", "--source", source)[0] == 0
    tree.replace(LINALG, *ON_MM_CHAIN)
    updated = _updated(tree)
    assert updated.walked == 0
    assert _as_data(updated)[:-2] == _as_data(before)[:-2]
    assert _as_data(updated) == _as_data(_rebuilt(tree))
