"""The walk past the hub: what importing the root package reaches, walked once per index.

Nearly every test imports the framework's root package (``torch``, ``vllm``): the hub.
A change whose impact reaches code that package runs at import (``torch.nested`` hands
``NestedTensor`` to ``add_safe_globals`` at import, so a change reaching NestedTensor's
``__torch_function__`` does) reaches everything importing it: on PyTorch ~81,000 nodes,
seconds of walking, and the same nodes for every such change. So that walk is made once
per index, from the hub alone, as a changed module (its import runs changed code), kept
inside the index (``indexer.store.derived``) by its refresh, and spliced into a
selection's walk the moment the hub becomes live there.

Splicing gives the walk the same nodes it would reach itself, because the walk is
monotone: a step taken with less reached stays valid with more, so everything the hub's
own walk reaches, a walk that makes the hub live reaches too. Where the hub's walk left
a decision to more evidence (a module reached for some of its names only, a top-level
call judged to run none of the reached code), the spliced state says so and the walk
goes on deciding it with everything it has reached (``ImpactWalker.walk``). The spliced
chains run from the hub, whose own step is the walk's: every test's chain still starts
at the change.

It is kept under the index's key (``indexer.store.derived.index_key``), the code that
walks and the manifest it reads, and is only made and used for an index known to describe
the tree. An incremental update keeps it when
nothing the walk met changed but lines: the update notes the ends of every edge it
changed and every node whose row it changed, rows that only moved to
other lines aside (``indexer.query.adjacency_delta``, ``indexer.query.moved_facts``; an
update keeps the ids of the nodes it re-extracts). When no changed edge ends at a node
the walk met and no changed node row sits at the other end of one's edge, walking again
would read the same edges, nodes and facts, so the kept walk is taken over, each
step's evidence moved to the line its edge is on now. A statement added to a kernel or
a Python function the walk met is such a change; a call added or removed, or a Python
statement whose facts changed, is not (docs/selection.md, "The hub").
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.query.adjacency_delta import Delta, deltas_of
from indexer.select.reach import Overlay, Step
from indexer.select.walk_code import CODE_VERSION
from indexer.store import derived

if TYPE_CHECKING:
    import sqlite3

    from indexer.query.index import Index
    from indexer.select.reach import Reach

NAME = "hub"  # its item in the index's derived data
NONE = -1
# One row per node the hub's walk reached, in the order it reached them (so each row's
# ``prev`` is a hub row above it, or the hub).
_ARRAYS = {
    "node": "i",
    "prev": "i",
    "src": "i",
    "dst": "i",
    "step_kind": "b",
    "file": "i",  # the step's evidence file
    "line": "i",
    "depth": "i",
    "node_kind": "b",
    "node_file": "i",
}


def find_hub(index: Index) -> int | None:
    """The top-level package module the most test files import or cover (None when no
    test file imports one). Asked of each top-level module through the edges into it:
    a selection asks, and one query over every edge costs ~0.2 s on a cold cache."""
    counts = []
    for (module,) in index.conn.execute(
        "SELECT id FROM nodes WHERE kind = ? AND instr(qualname, '.') = 0",
        (NodeKind.PYTHON_MODULE.value,),
    ):
        (files,) = index.conn.execute(
            "SELECT COUNT(DISTINCT s.file_id) FROM edges e JOIN nodes s ON s.id = e.src_id"
            " WHERE e.dst_id = ? AND e.kind IN (?, ?) AND s.kind = ?",
            (module, EdgeKind.IMPORTS.value, EdgeKind.COVERS.value, NodeKind.TEST_FILE.value),
        ).fetchone()
        if files:
            counts.append((-files, module))
    return min(counts)[1] if counts else None


@dataclass
class HubWalk:
    """What the walk from the hub reached, as rows (see ``_ARRAYS``), and the state it
    left to be decided with more evidence."""

    hub: int
    node_kinds: list[str]
    step_kinds: list[str]
    arrays: dict[str, array]
    import_live: list[int]
    module_names: dict[int, list[str]]
    deferred_calls: list[tuple[int, int]]

    @property
    def size(self) -> int:
        return len(self.arrays["node"])

    @classmethod
    def of(cls, hub: int, reach: Reach) -> HubWalk:
        node_kinds = sorted(set(reach.kind.values()))
        step_kinds = sorted({step.kind for step in reach.steps.values() if step is not None})
        node_code = {kind: code for code, kind in enumerate(node_kinds)}
        step_code = {kind: code for code, kind in enumerate(step_kinds)}
        arrays = {name: array(typecode) for name, typecode in _ARRAYS.items()}
        for node_id, step in reach.steps.items():  # in the order reached
            arrays["node"].append(node_id)
            arrays["node_kind"].append(node_code[reach.kind[node_id]])
            arrays["node_file"].append(reach.file_id[node_id])
            arrays["depth"].append(reach.depth.get(node_id, 0))
            if step is None:
                for name in ("prev", "src", "dst", "step_kind", "file", "line"):
                    arrays[name].append(NONE)
                continue
            arrays["prev"].append(step.prev)
            arrays["src"].append(step.src)
            arrays["dst"].append(step.dst)
            arrays["step_kind"].append(step_code[step.kind])
            arrays["file"].append(NONE if step.file_id is None else step.file_id)
            arrays["line"].append(step.line)
        return cls(
            hub,
            node_kinds,
            step_kinds,
            arrays,
            sorted(reach.import_live),
            {module: sorted(names) for module, names in reach.module_names.items()},
            list(reach.deferred_calls),
        )

    @cached_property
    def rows(self) -> dict[int, int]:
        """node -> its row."""
        return dict(zip(self.arrays["node"], range(self.size), strict=True))

    def splice_into(self, reach: Reach) -> int:
        """Lay what the hub's walk reached over ``reach``, in which the hub is live (the
        nodes ``reach`` holds keep their own steps); returns how many it adds. Each row's
        step, kind, file, depth and origin are made when asked (``Overlay``)."""
        whole = reach.held_whole(self.module_names)
        a, rows = self.arrays, self.rows
        node_kinds, step_kinds = self.node_kinds, self.step_kinds
        base = reach.depth.get(self.hub, 0)
        origins = reach.origin

        def step(row: int) -> Step | None:
            if a["prev"][row] == NONE:
                return None
            file_id = a["file"][row]
            return Step(
                a["prev"][row],
                step_kinds[a["step_kind"][row]],
                a["src"][row],
                a["dst"][row],
                None if file_id == NONE else file_id,
                a["line"][row],
            )

        def origin(row: int) -> int:
            # The entity of the first node up its chain this walk reached itself (each
            # row's prev is a row above it, or such a node).
            path = []
            node = a["node"][row]
            while node not in origins.own:
                path.append(node)
                node = a["prev"][rows[node]]
            found = origins.own[node]
            for passed in path:
                origins[passed] = found
            return found

        entities = set(reach.origin.values())
        if len(entities) == 1:  # one change, or all from one: every chain is its
            (only,) = entities
            origin = lambda row: only  # noqa: E731

        # Every node reached has a step, kind, file and origin; a start has no depth.
        added = sum(1 for node in rows if node not in reach.steps)
        depth_added = sum(1 for node in rows if node not in reach.depth)
        reach.steps = Overlay(reach.steps, rows, step, added)
        kind = Overlay(reach.kind, rows, lambda row: node_kinds[a["node_kind"][row]], added)
        reach.kind = kind
        reach.file_id = Overlay(reach.file_id, rows, a["node_file"].__getitem__, added)
        depth = Overlay(reach.depth, rows, lambda row: base + a["depth"][row], depth_added)
        reach.depth = depth
        origins = reach.origin = Overlay(reach.origin, rows, origin, added)
        reach.join_state(self.import_live, self.module_names, self.deferred_calls, whole)
        return added


def derived_key(index: Index, of_index: str | None = None) -> str:
    """The index's graph (``of_index``: another index's key), the code that walks, and
    the manifest it reads."""
    manifest = index.meta.get("manifest") or ""
    parts = [of_index or derived.index_key(index.meta), CODE_VERSION, manifest]
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).hexdigest()


def load(index: Index) -> HubWalk | None:
    """The hub's walk kept for this very index and code (or carried to it), or None."""
    return kept_walk(index)[0]


def kept_walk(index: Index) -> tuple[HubWalk | None, bool]:
    """The hub's walk kept for this very index and code, or None; and whether it was
    carried across an update from the walk kept for the index before it (then the
    refresh keeps it under this index's key)."""
    if not CODE_VERSION:
        return None, False  # the walking code cannot be hashed: nothing kept can be trusted
    found = _read(index.conn, derived_key(index))
    carried = found is None
    if carried:
        found = _kept_across_update(index)
    if found is None:
        return None, False
    header, arrays = found
    try:
        walk = HubWalk(
            int(header["hub"]),
            list(header["node_kinds"]),
            list(header["step_kinds"]),
            arrays,
            [int(m) for m in header["import_live"]],
            {int(m): list(names) for m, names in header["module_names"].items()},
            [(int(m), int(d)) for m, d in header["deferred_calls"]],
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None, False
    if not _consistent(walk):
        return None, False
    return walk, carried


def _read(conn: sqlite3.Connection, key: str):
    """(header, arrays) of the walk kept under ``key``, or None."""
    head = derived.header(conn, NAME, key)
    found = derived.arrays(conn, NAME, _ARRAYS) if head is not None else None
    return None if found is None else (head, found)


def _kept_across_update(index: Index):
    """The (header, arrays) of the walk kept for the index this one was updated from,
    when the update changed nothing it met but the lines of its evidence (then moved
    with them); else None."""
    for delta in deltas_of(index.meta):
        found = _read(index.conn, derived_key(index, delta.base))
        if found is not None:
            if not _unchanged_by(index, delta, found):
                return None
            return _moved(found, delta)
    return None


def _moved(found, delta: Delta):
    """``found`` with each step's evidence line where the update moved it; None when
    one is not known (then the walk is made again)."""
    header, arrays = found
    if not delta.lines:
        return found
    moved_files = {int(file_id) for file_id in delta.lines}
    lines = array("i", arrays["line"])
    for row, file_id in enumerate(arrays["file"]):
        if file_id in moved_files:
            moved = delta.moved_line(file_id, lines[row])
            if moved is None:
                return None
            lines[row] = moved
    return header, {**arrays, "line": lines}


def _unchanged_by(index: Index, delta: Delta, found) -> bool:
    """Whether nothing the kept walk met is among what ``delta`` touched."""
    header, arrays = found
    met = set(arrays["node"]) | set(arrays["src"]) | set(arrays["dst"])
    try:
        met.update(int(m) for m in header["import_live"])
        met.update(int(m) for m in header["module_names"])
        met.update(int(n) for pair in header["deferred_calls"] for n in pair)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return met.isdisjoint(touched_by(index, delta))


def touched_by(index: Index, delta: Delta) -> set[int]:
    """The nodes a walk that met none of was not changed by ``delta`` (rows that only
    moved to other lines aside, where the update compared them): the ends of every
    changed edge, and the ends of every edge of a node whose row changed (it changes
    what a walk reads of that edge)."""
    touched = set(delta.nodes if delta.changed is None else delta.changed)
    rows = delta.rows if delta.changed_rows is None else delta.changed_rows
    for start in range(0, len(rows), 900):
        batch = rows[start : start + 900]
        marks = ",".join("?" * len(batch))
        for src, dst in index.conn.execute(
            f"SELECT src_id, dst_id FROM edges WHERE src_id IN ({marks}) OR dst_id IN ({marks})",
            batch + batch,
        ):
            touched.add(src)
            touched.add(dst)
    return touched


def store(conn: sqlite3.Connection, index: Index, walk: HubWalk) -> None:
    """Keep the hub's walk in the index ``index`` reads, through ``conn`` (a writer's
    connection to it, in its transaction)."""
    if not CODE_VERSION:
        return
    header = {
        "hub": walk.hub,
        "node_kinds": walk.node_kinds,
        "step_kinds": walk.step_kinds,
        "import_live": walk.import_live,
        "module_names": {str(m): names for m, names in walk.module_names.items()},
        "deferred_calls": walk.deferred_calls,
    }
    derived.write(conn, NAME, derived_key(index), header, {0: walk.arrays})


def _consistent(walk: HubWalk) -> bool:
    """Cheap checks, so a file that reads but makes no sense is walked again instead."""
    size = walk.size
    if any(len(values) != size for values in walk.arrays.values()):
        return False
    if size == 0 or walk.arrays["node"][0] != walk.hub:
        return False
    return max(walk.arrays["node_kind"]) < len(walk.node_kinds) and max(
        walk.arrays["step_kind"]
    ) < len(walk.step_kinds)
