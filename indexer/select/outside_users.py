"""Changed code whose only way out of the tree is an op that nothing in the tree names.

An extension registers ops for users outside it (pytorch_sparse's
``torch_sparse::hgt_sample`` is called by PyTorch Geometric, never by its own package or
tests). A change behind such an op reaches no test, and the fallback would run everything
because "its users are invisible to the index". They are invisible, but they are not in
the tree: a test can run the op only by naming it (``torch.ops.torch_sparse.hgt_sample``,
a schema string, a computed name the index matches, ``indexer.python.reflection``).

So when every chain out of the changed code ends at such ops, no test of the tree can
run it: nothing is selected for it, and a note says why. A chain ending anywhere else (a
C++ function nothing calls, a Python module nothing imports, a binding) still runs
everything. An op counts as named when its name appears as a word in any file of the
tree other than the one defining it, or when an unresolved ref names it (its own
refs aside: an op's ``op_impl`` ref finding no registration).
"""

from __future__ import annotations

from pathlib import Path

from indexer.diff import run_git
from indexer.graph.vocabulary import NodeKind
from indexer.query.index import Index
from indexer.select.reach import Reach


def ends(reach: Reach, starts: set[int], index: Index) -> list[int]:
    """The nodes where the walk stopped: reached, and reaching nothing further (a start
    counts only if no edge at all leads into it)."""
    users = {step.prev for step in reach.steps.values() if step is not None}
    found = []
    for node_id in reach.steps:
        if node_id in users:
            continue
        if node_id in starts and _has_users(index, node_id):
            continue
        found.append(node_id)
    return found


def _has_users(index: Index, node_id: int) -> bool:
    return (
        index.conn.execute("SELECT 1 FROM edges WHERE dst_id = ? LIMIT 1", (node_id,)).fetchone()
        is not None
    )


def unnamed_ops(index: Index, source: Path, node_ids: list[int]) -> list[str] | None:
    """The qualnames of these nodes if every one is an op nothing in the tree names
    (see the module docstring); None if any is not, or the tree cannot be searched."""
    nodes = index.nodes(node_ids)
    if not nodes or any(node.kind != NodeKind.OP.value for node in nodes):
        return None
    for node in nodes:
        if index.conn.execute(
            "SELECT 1 FROM refs r WHERE r.target_key = ? AND r.src_id != ?"
            " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id) LIMIT 1",
            (node.name, node.id),
        ).fetchone():
            return None
        result = run_git(
            source, "grep", "-l", "-w", "-I", "-F", "--untracked", "-e", node.name, check=False
        )
        if result.returncode not in (0, 1):
            return None  # git cannot search the tree: a reader cannot be ruled out
        files = set(result.stdout.decode("utf-8", "surrogateescape").splitlines())
        if files - {node.path}:
            return None
    return sorted(node.qualname for node in nodes)
