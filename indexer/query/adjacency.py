"""The index's edges in memory, both ways, for walks that visit most of the graph.

A selection walk over PyTorch reaches ~70,000 nodes; asking SQLite for each frontier's
edges costs tens of thousands of round trips and a tuple per row. Here the edges are
held as compact arrays (CSR: per node, the offset of its first edge in parallel arrays
of neighbour, kind, file, line and ref), once by destination and once by source, with
each node's kind and file.

Building them reads every edge (~1,000,000 on PyTorch: seconds), so index maintenance
keeps them inside the index (``indexer.store.derived``), derived for its graph, in
blocks of nodes: an update reads the touched nodes' rows again into the arrays kept for
the index it started from and rewrites only their blocks (:func:`derive`, :func:`store`).
Readers (selections, the MCP server) read them, and make what is missing in memory, for
their process only.

Three ways to ask, by what a miss may cost: :func:`shared` makes them if need be (a
selection walk, a server when idle), :func:`cached` also reads the index's (~0.1 s),
and :func:`held` only answers what this process holds (a single query, quick anyway).

Rows come out in the order SQLite's ``edges_dst``/``edges_src`` indexes give for
``WHERE dst_id IN (...)`` (node id, then kind, then edge id), so a walk over these
arrays meets edges in the order a walk over SQL did.
"""

from __future__ import annotations

import operator
import sqlite3
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from indexer.query.adjacency_delta import EdgeRows, deltas_of, edge_rows
from indexer.store import derived

NAME = "adjacency"  # its item in the index's derived data
NONE = -1  # an edge with no ref (a local edge), a node with no file
BLOCK = 4096  # nodes per stored block: an update rewrites the blocks of the nodes it touched
_COLUMNS = ("other", "kind", "file", "line", "ref")
# Stored array -> typecode. Ids, lines and refs fit in 32 bits; kinds are indexes into
# the header's kind lists; per node, how many edges it has each way.
_STORED = {
    "node_kind": "b",
    "node_file": "i",
    **{
        f"{side}_{column}": typecode
        for side in ("in", "out")
        for column, typecode in (("count", "i"), *zip(_COLUMNS, "ibiii", strict=True))
    },
}

# (src, dst, edge kind, evidence file id, evidence line, ref id or None)
EdgeRow = tuple[int, int, str, int, int, int | None]


class Adjacency:
    """Every edge of one index by destination and by source, with node kinds and files."""

    def __init__(self, node_kinds: list[str], edge_kinds: list[str], arrays: dict[str, array]):
        self.node_kinds = node_kinds
        self.edge_kinds = edge_kinds
        self._edge_code = {kind: code for code, kind in enumerate(edge_kinds)}
        for name, values in arrays.items():
            setattr(self, name, values)
        self.node_count = len(arrays["node_kind"])
        # Each node's kind name by id (None: no such node), for the walks' inner loops.
        self.kind_names: list[str | None] = [
            node_kinds[code] if code >= 0 else None for code in arrays["node_kind"]
        ]

    # --- nodes -------------------------------------------------------------------------

    def kind(self, node_id: int) -> str | None:
        """The node's kind (None for an id the index does not hold)."""
        if not 0 <= node_id < self.node_count or self.node_kind[node_id] < 0:
            return None
        return self.node_kinds[self.node_kind[node_id]]

    def file(self, node_id: int) -> int:
        return self.node_file[node_id] if 0 <= node_id < self.node_count else NONE

    # --- edges -------------------------------------------------------------------------

    def codes(self, kinds: Iterable[str]) -> frozenset[int]:
        """Edge kind codes for ``kinds`` (kinds the index has no edge of are left out)."""
        return frozenset(self._edge_code[k] for k in kinds if k in self._edge_code)

    def into(self, node_ids: Iterable[int], kinds: frozenset[int]) -> Iterator[EdgeRow]:
        """Edges of the given kind codes into each of ``node_ids``, in id order."""
        return self._rows(node_ids, kinds, incoming=True)

    def out_of(self, node_ids: Iterable[int], kinds: frozenset[int]) -> Iterator[EdgeRow]:
        """Edges of the given kind codes out of each of ``node_ids``, in id order."""
        return self._rows(node_ids, kinds, incoming=False)

    def into_unseen(
        self,
        node_ids: Iterable[int],
        kinds: frozenset[int],
        seen: Container[int],
        revisit: frozenset[tuple[str, str]] = frozenset(),
    ) -> Iterator[tuple[int, int, str, int, int, str, int, int | None]]:
        """Edges of the given kind codes into each of ``node_ids`` (in id order) from
        nodes not in ``seen``, or in it but with (edge kind, node kind) in ``revisit``:
        (src, dst, kind, file, line, src kind, src file, ref id or None). Edges from ids
        the index holds no node for are left out (as a join with ``nodes`` would).
        Lazily: a walk that has found what it needs stops reading."""
        offsets, others, codes = self.in_offsets, self.in_other, self.in_kind
        files, lines, refs = self.in_file, self.in_line, self.in_ref
        names, kind_names, node_file = self.edge_kinds, self.kind_names, self.node_file
        count = self.node_count
        for dst in sorted(set(node_ids)):
            if not 0 <= dst < count:
                continue
            for position in range(offsets[dst], offsets[dst + 1]):
                code = codes[position]
                if code not in kinds:
                    continue
                src = others[position]
                src_kind = kind_names[src] if 0 <= src < count else None
                if src_kind is None:
                    continue
                kind = names[code]
                if src in seen and (kind, src_kind) not in revisit:
                    continue
                ref = refs[position]
                yield (
                    src,
                    dst,
                    kind,
                    files[position],
                    lines[position],
                    src_kind,
                    node_file[src],
                    None if ref == NONE else ref,
                )

    def _rows(
        self, node_ids: Iterable[int], kinds: frozenset[int], incoming: bool
    ) -> Iterator[EdgeRow]:
        side = "in" if incoming else "out"
        offsets: array = getattr(self, f"{side}_offsets")
        other: array = getattr(self, f"{side}_other")
        kind: array = getattr(self, f"{side}_kind")
        files: array = getattr(self, f"{side}_file")
        lines: array = getattr(self, f"{side}_line")
        refs: array = getattr(self, f"{side}_ref")
        names = self.edge_kinds
        wanted = sorted(kinds)
        for node_id in sorted(set(node_ids)):
            if not 0 <= node_id < self.node_count:
                continue
            start, end = offsets[node_id], offsets[node_id + 1]
            # A node's edges are sorted by kind: jump to each wanted kind's run rather
            # than read every edge (a module or a long function has thousands).
            for code in wanted:
                first = bisect_left(kind, code, start, end)
                for position in range(first, bisect_right(kind, code, first, end)):
                    ref = refs[position]
                    neighbour = other[position]
                    src, dst = (neighbour, node_id) if incoming else (node_id, neighbour)
                    yield (
                        src,
                        dst,
                        names[code],
                        files[position],
                        lines[position],
                        None if ref == NONE else ref,
                    )


_loaded: dict[Path, tuple[str, Adjacency]] = {}  # db path -> (file key, its adjacency)
_building: dict[Path, threading.Event] = {}  # db paths whose adjacency a thread is making
_lock = threading.Lock()  # guards the two dicts; never held while reading or building


def _file_key(db_path: Path, meta: dict[str, str]) -> str:
    """What an adjacency held in memory is kept under: the graph's key and the file
    (a server holds one per index file, and an update renames a new file over it)."""
    stat = db_path.stat()
    parts = [derived.index_key(meta), str(stat.st_ino), str(stat.st_size), str(stat.st_mtime_ns)]
    return "\0".join(parts)


def _held(db_path: Path, key: str) -> Adjacency | None:
    held = _loaded.get(db_path)
    return held[1] if held is not None and held[0] == key else None


def shared(db_path: Path, conn: sqlite3.Connection, meta: dict[str, str]) -> Adjacency:
    """:func:`load`, kept for the process while the index stays the same (a server or a
    plugin walks the same index many times; one per database file). One thread makes
    it; others asking meanwhile wait for that one."""
    key = _file_key(db_path, meta)
    while True:
        with _lock:
            found = _held(db_path, key)
            if found is not None:
                return found
            making = _building.get(db_path)
            if making is None:
                making = _building[db_path] = threading.Event()
                break
        making.wait()
    try:
        adjacency = load(conn, meta)
        with _lock:
            _loaded[db_path] = (key, adjacency)
        return adjacency
    finally:
        with _lock:
            del _building[db_path]
        making.set()


def hold(db_path: Path, meta: dict[str, str], adjacency: Adjacency) -> None:
    """Keep ``adjacency`` for the process as the index at ``db_path``'s (index
    maintenance, which has just made it, walks that index next)."""
    with _lock:
        _loaded[db_path] = (_file_key(db_path, meta), adjacency)


def forget(db_path: Path) -> None:
    """Stop holding the adjacency of the index at ``db_path`` (a file about to go)."""
    with _lock:
        _loaded.pop(db_path, None)


def held(db_path: Path, meta: dict[str, str]) -> Adjacency | None:
    """The adjacency of the index at ``db_path`` if this process holds it (nothing is
    read): for queries that use it when there but are quick without it, so a one-shot
    command does not read 30 MB to answer one question."""
    key = _file_key(db_path, meta)
    with _lock:
        return _held(db_path, key)


def cached(db_path: Path, conn: sqlite3.Connection, meta: dict[str, str]) -> Adjacency | None:
    """The adjacency of the index at ``db_path`` if this process holds it or the index
    keeps one derived for its own graph; None otherwise, and while another thread is
    still making it (nothing is built, nobody waits)."""
    key = _file_key(db_path, meta)
    with _lock:
        found = _held(db_path, key)
        if found is not None or db_path in _building:
            return found
    found = read(conn, derived.index_key(meta))
    if found is not None:
        with _lock:
            _loaded[db_path] = (key, found)
    return found


def load(conn: sqlite3.Connection, meta: dict[str, str]) -> Adjacency:
    """The adjacency of the index ``conn`` reads: kept in it when derived for its graph,
    else made from its edges (nothing is written)."""
    return read(conn, derived.index_key(meta)) or build(conn)


@dataclass
class Derived:
    """An adjacency made by index maintenance, and what of it to write (``blocks``:
    None, every block; else the blocks the update changed; empty: kept as it is)."""

    adjacency: Adjacency
    blocks: set[int] | None


def derive(conn: sqlite3.Connection, meta: dict[str, str]) -> Derived:
    """The adjacency of the index, for maintenance to keep: as kept, when derived for
    this graph; the one kept for the index an update started from with the update's
    touched nodes read again (``indexer.query.adjacency_delta``); else built."""
    found = read(conn, derived.index_key(meta))
    if found is not None:
        return Derived(found, set())
    rows = edge_rows(conn, meta)
    for delta in deltas_of(meta):
        base = read(conn, delta.base)
        if base is not None:
            if rows is not None and rows.base == delta.base:
                spliced = splice_rows(base, conn, delta.rows, rows)
            else:
                spliced = splice(base, conn, delta.nodes)
            if spliced is None:
                break
            grown = range(base.node_count, spliced.node_count)
            changed = {node // BLOCK for node in (*delta.nodes, *grown)}
            return Derived(spliced, {block for block in changed if block < _blocks(spliced)})
    return Derived(build(conn), None)


def store(conn: sqlite3.Connection, meta: dict[str, str], made: Derived) -> None:
    """Write ``made`` into the index as derived for its graph (a writer's connection,
    in its transaction): only the blocks it changed."""
    adjacency = made.adjacency
    head = {
        "node_kinds": adjacency.node_kinds,
        "edge_kinds": adjacency.edge_kinds,
        "nodes": adjacency.node_count,
        "edges": len(adjacency.in_other),
        "block": BLOCK,
    }
    wanted = range(_blocks(adjacency)) if made.blocks is None else sorted(made.blocks)
    blocks = {block: _block(adjacency, block) for block in wanted}
    derived.write(
        conn,
        NAME,
        derived.index_key(meta),
        head,
        blocks,
        replace=made.blocks is None,
        block_count=_blocks(adjacency),
    )


def _blocks(adjacency: Adjacency) -> int:
    return -(-adjacency.node_count // BLOCK)


def _block(adjacency: Adjacency, block: int) -> dict[str, array]:
    """The arrays of nodes ``block * BLOCK`` up to the next block: each node's kind,
    file and edge counts, and its edges."""
    first, last = block * BLOCK, min((block + 1) * BLOCK, adjacency.node_count)
    arrays = {
        "node_kind": adjacency.node_kind[first:last],
        "node_file": adjacency.node_file[first:last],
    }
    for side in ("in", "out"):
        offsets: array = getattr(adjacency, f"{side}_offsets")
        arrays[f"{side}_count"] = array(
            "i", map(operator.sub, offsets[first + 1 : last + 1], offsets[first:last])
        )
        start, end = offsets[first], offsets[last]
        for column in _COLUMNS:
            arrays[f"{side}_{column}"] = getattr(adjacency, f"{side}_{column}")[start:end]
    return arrays


def build(conn: sqlite3.Connection) -> Adjacency:
    """Read every node and edge of the index into arrays."""
    max_id = max(
        conn.execute(f"SELECT COALESCE(MAX({column}), 0) FROM {table}").fetchone()[0]
        for table, column in (("nodes", "id"), ("edges", "src_id"), ("edges", "dst_id"))
    )
    node_kind = array("b", [NONE]) * (max_id + 1)
    node_file = array("i", [NONE]) * (max_id + 1)
    node_kinds = [kind for (kind,) in conn.execute("SELECT DISTINCT kind FROM nodes")]
    edge_kinds = sorted(kind for (kind,) in conn.execute("SELECT DISTINCT kind FROM edges"))
    if len(node_kinds) > 127 or len(edge_kinds) > 127:
        raise ValueError("more kinds than the adjacency's one-byte codes hold")
    # Kind names become codes inside SQLite (no Python string per row).
    rows = conn.execute(f"SELECT id, {_code_of('kind', node_kinds)}, file_id FROM nodes").fetchall()
    for node_id, code, file_id in rows:
        node_kind[node_id] = code
        node_file[node_id] = file_id
    rows = conn.execute(
        f"SELECT src_id, dst_id, {_code_of('kind', edge_kinds)}, file_id, line,"
        f" COALESCE(ref_id, {NONE}) FROM edges"
    ).fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    del rows
    src, dst = array("i", columns[0]), array("i", columns[1])
    kinds = array("b", columns[2])
    files, lines, refs = array("i", columns[3]), array("i", columns[4]), array("i", columns[5])
    del columns
    # Rows come in id order (the table's); kind codes sort as the kind names do, and
    # stable sorts by kind, then by one end, give (end, kind, id).
    by_kind = sorted(range(len(kinds)), key=kinds.__getitem__)
    arrays = {"node_kind": node_kind, "node_file": node_file}
    for side, key, other in (("in", dst, src), ("out", src, dst)):
        order = sorted(by_kind, key=key.__getitem__)
        ends = array("i", map(key.__getitem__, order))
        arrays[f"{side}_offsets"] = array(
            "q", (bisect_left(ends, node_id) for node_id in range(max_id + 2))
        )
        arrays[f"{side}_other"] = array("i", map(other.__getitem__, order))
        arrays[f"{side}_kind"] = array("b", map(kinds.__getitem__, order))
        arrays[f"{side}_file"] = array("i", map(files.__getitem__, order))
        arrays[f"{side}_line"] = array("i", map(lines.__getitem__, order))
        arrays[f"{side}_ref"] = array("i", map(refs.__getitem__, order))
    return Adjacency(node_kinds, edge_kinds, arrays)


def _code_of(column: str, kinds: list[str]) -> str:
    """SQL giving each kind's index in ``kinds`` (names are quoted, never interpolated raw)."""
    cases = " ".join(
        f"WHEN '{kind.replace(chr(39), chr(39) * 2)}' THEN {code}"
        for code, kind in enumerate(kinds)
    )
    return f"CASE {column} {cases} END"


def read(conn: sqlite3.Connection, key: str) -> Adjacency | None:
    """The adjacency kept in the index if it was derived for ``key`` and reads whole;
    else None."""
    head = derived.header(conn, NAME, key)
    if head is None:
        return None
    found = derived.arrays(conn, NAME, _STORED)
    if found is None:
        return None
    arrays = {name: found[name] for name in ("node_kind", "node_file")}
    for side in ("in", "out"):
        # Per-node counts, kept so that a block holds its own nodes' edges alone.
        arrays[f"{side}_offsets"] = array("q", accumulate(found[f"{side}_count"], initial=0))
        for column in _COLUMNS:
            arrays[f"{side}_{column}"] = found[f"{side}_{column}"]
    try:
        adjacency = Adjacency(list(head["node_kinds"]), list(head["edge_kinds"]), arrays)
    except (KeyError, TypeError, IndexError):  # a kind code out of range: rebuilt, not read
        return None
    if adjacency.node_count != head.get("nodes") or not _consistent(adjacency):
        return None
    return adjacency


def _consistent(adjacency: Adjacency) -> bool:
    """Cheap structural checks, so that damaged rows are rebuilt rather than walked."""
    nodes = adjacency.node_count
    if len(adjacency.node_file) != nodes:
        return False
    if not _codes_within(adjacency.node_kind, len(adjacency.node_kinds), NONE):
        return False
    for side in ("in", "out"):
        offsets = getattr(adjacency, f"{side}_offsets")
        edges = len(getattr(adjacency, f"{side}_other"))
        if len(offsets) != nodes + 1 or offsets[0] != 0 or offsets[-1] != edges:
            return False
        if any(len(getattr(adjacency, f"{side}_{name}")) != edges for name in _COLUMNS):
            return False
        if not _codes_within(getattr(adjacency, f"{side}_kind"), len(adjacency.edge_kinds)):
            return False
    return True


def _codes_within(codes: array, count: int, *allowed: int) -> bool:
    """Whether every one-byte code is below ``count`` (or one of ``allowed``): deleting
    the valid bytes leaves none (a C loop; ``max`` over a million codes takes ~30 ms)."""
    valid = bytes(code & 0xFF for code in (*range(count), *allowed))
    return not codes.tobytes().translate(None, valid)


def _spliced_nodes(
    base: Adjacency, conn: sqlite3.Connection, nodes: list[int]
) -> tuple[int, dict[str, array]] | None:
    """The highest id of the new graph, and ``base``'s node arrays grown to it with the
    rows of ``nodes`` (and of every new id) read again; None when no build could give
    them (the highest ids went, or a node kind ``base`` has no code for)."""
    node_codes = {kind: code for code, kind in enumerate(base.node_kinds)}
    max_id = max(
        conn.execute(f"SELECT COALESCE(MAX({column}), 0) FROM {table}").fetchone()[0]
        for table, column in (("nodes", "id"), ("edges", "src_id"), ("edges", "dst_id"))
    )
    if max_id + 1 < base.node_count:
        return None  # the highest ids went: the arrays would be shorter than a build's
    grown = max_id + 1 - base.node_count
    node_kind = base.node_kind[:] + array("b", [NONE]) * grown
    node_file = base.node_file[:] + array("i", [NONE]) * grown
    read = sorted({n for n in nodes if n <= max_id} | set(range(base.node_count, max_id + 1)))
    for node in read:
        node_kind[node], node_file[node] = NONE, NONE
    for node, kind, file in _in_batches(
        conn, "SELECT id, kind, file_id FROM nodes WHERE id IN ({})", read
    ):
        if kind not in node_codes:
            return None
        node_kind[node], node_file[node] = node_codes[kind], file
    return max_id, {"node_kind": node_kind, "node_file": node_file}


def splice(base: Adjacency, conn: sqlite3.Connection, touched: list[int]) -> Adjacency | None:
    """``base`` with the rows of ``touched`` nodes read again from ``conn``; None when
    the result could not equal a build (a kind ``base`` has no code for)."""
    edge_codes = {kind: code for code, kind in enumerate(base.edge_kinds)}
    made = _spliced_nodes(base, conn, touched)
    if made is None:
        return None
    max_id, arrays = made
    changed = sorted({n for n in touched if n <= max_id} | set(range(base.node_count, max_id + 1)))
    for side, end, other in (("in", "dst_id", "src_id"), ("out", "src_id", "dst_id")):
        fresh = _in_batches(
            conn,
            f"SELECT {end}, {other}, kind, file_id, line, COALESCE(ref_id, {NONE}) FROM edges"
            f" WHERE {end} IN ({{}}) ORDER BY {end}, kind, id",
            changed,
        )
        if any(row[2] not in edge_codes for row in fresh):
            return None
        fresh.sort(key=lambda row: (row[0], row[2]))  # batches each come sorted
        runs: dict[int, list] = {node: [[]] for node in changed}
        for node, neighbour, kind, file, line, ref in fresh:
            runs[node][0].append((neighbour, edge_codes[kind], file, line, ref))
        spliced = _splice_side(base, side, changed, runs, max_id)
        arrays.update({f"{side}_{name}": values for name, values in spliced.items()})
    return Adjacency(base.node_kinds, base.edge_kinds, arrays)


def splice_rows(
    base: Adjacency, conn: sqlite3.Connection, rows_changed: list[int], edges: EdgeRows
) -> Adjacency | None:
    """``base`` with the update's edge rows applied: the rows that went taken out of
    their nodes' runs, the rows that came (ids above every kept row: they end their
    kind's run) read from ``conn`` and appended, and the nodes whose own row changed
    read again. Only those rows are read, not every edge of every node they touch. None
    as for :func:`splice`."""
    edge_codes = {kind: code for code, kind in enumerate(base.edge_kinds)}
    made = _spliced_nodes(base, conn, rows_changed)
    if made is None:
        return None
    max_id, arrays = made
    grown = range(base.node_count, max_id + 1)
    added: list[tuple] = []
    if edges.first_added is not None:
        added = conn.execute(
            f"SELECT src_id, dst_id, kind, file_id, line, COALESCE(ref_id, {NONE}) FROM edges"
            " WHERE id >= ? ORDER BY id",
            (edges.first_added,),
        ).fetchall()
    if any(row[2] not in edge_codes for row in (*added, *edges.gone)):
        return None
    for side, end in (("in", 1), ("out", 0)):
        other = 1 - end
        gone: dict[int, list[tuple]] = {}
        for row in edges.gone:
            gone.setdefault(row[end], []).append(
                (row[other], edge_codes[row[2]], row[3], row[4], row[5])
            )
        came: dict[int, list[tuple]] = {}
        for row in added:
            came.setdefault(row[end], []).append(
                (row[other], edge_codes[row[2]], row[3], row[4], row[5])
            )
        nodes = sorted({*gone, *came, *grown})
        if nodes and (nodes[0] < 0 or nodes[-1] > max_id):
            return None  # an end no node id can have: a build makes no such arrays
        runs = {
            node: _node_rows(base, side, node, gone.get(node), came.get(node)) for node in nodes
        }
        if any(found is None for found in runs.values()):
            return None
        spliced = _splice_side(base, side, nodes, runs, max_id)
        arrays.update({f"{side}_{name}": values for name, values in spliced.items()})
    return Adjacency(base.node_kinds, base.edge_kinds, arrays)


def _node_rows(
    base: Adjacency, side: str, node: int, gone: list[tuple] | None, came: list[tuple] | None
) -> list[range | list[tuple]] | None:
    """``node``'s rows on ``side`` after the update: its rows in ``base`` but those that
    went, then those that came, kind by kind (each kind's kept rows come first: their ids
    are lower). As pieces, in order: a ``range`` of ``base`` positions kept as they are,
    or rows (other, kind code, file, line, ref); only the kinds' runs that lost a row
    are read row by row. None when a row that went is not among its rows."""
    first = last = 0
    if node < base.node_count:
        offsets: array = getattr(base, f"{side}_offsets")
        first, last = offsets[node], offsets[node + 1]
    kinds: array = getattr(base, f"{side}_kind")
    columns = [getattr(base, f"{side}_{name}") for name in _COLUMNS]
    gone_by_kind: dict[int, list[tuple]] = {}
    for row in gone or ():
        gone_by_kind.setdefault(row[1], []).append(row)
    came_by_kind: dict[int, list[tuple]] = {}
    for row in came or ():
        came_by_kind.setdefault(row[1], []).append(row)
    pieces: list[range | list[tuple]] = []
    position = first
    for code in sorted({*gone_by_kind, *came_by_kind}):
        start = bisect_left(kinds, code, position, last)
        end = bisect_right(kinds, code, start, last)
        pieces.append(range(position, start))
        went = gone_by_kind.get(code)
        if went:
            left = Counter(went)
            kept = []
            for row in zip(*(values[start:end] for values in columns), strict=True):
                if left.get(row):
                    left[row] -= 1
                else:
                    kept.append(row)
            if +left:
                return None
            pieces.append(kept)
        else:
            pieces.append(range(start, end))
        pieces.append(came_by_kind.get(code, []))
        position = end
    pieces.append(range(position, last))
    return pieces


def _splice_side(
    base: Adjacency,
    side: str,
    changed: list[int],
    runs: dict[int, list],
    max_id: int,
) -> dict[str, array]:
    """The arrays of ``side``: each node of ``changed`` with its rows in ``runs`` (as
    :func:`_node_rows` gives them: ranges of ``base`` positions, or lists of rows), the
    others' rows copied from ``base`` a stretch at a time."""
    offsets: array = getattr(base, f"{side}_offsets")
    columns = {name: getattr(base, f"{side}_{name}") for name in _COLUMNS}
    out = {name: array(values.typecode) for name, values in columns.items()}
    new_offsets = array("q")
    base_nodes = base.node_count
    kept_from = 0  # the next base node whose rows are still to be copied
    for node in [*changed, max_id + 1]:
        # Base nodes kept_from .. node-1 keep their rows: one slice per column.
        stop = min(node, base_nodes)
        if kept_from < stop:
            first, last = offsets[kept_from], offsets[stop]
            shift = len(out["other"]) - first
            kept = offsets[kept_from:stop]
            new_offsets.extend(kept if shift == 0 else map(shift.__add__, kept))
            for name, values in columns.items():
                out[name].extend(values[first:last])
        untouched_new = node - max(kept_from, base_nodes)  # new ids with no row of their own
        if untouched_new > 0:
            new_offsets.extend([len(out["other"])] * untouched_new)
        if node > max_id:
            break
        new_offsets.append(len(out["other"]))
        for piece in runs.get(node, ()):
            if isinstance(piece, range):
                if piece:
                    for name, values in columns.items():
                        out[name].extend(values[piece.start : piece.stop])
            elif piece:
                for name, values in zip(_COLUMNS, zip(*piece, strict=True), strict=True):
                    out[name].extend(values)
        kept_from = node + 1
    new_offsets.append(len(out["other"]))
    result = {"offsets": new_offsets}
    result.update(out)
    return result


def _in_batches(conn: sqlite3.Connection, sql: str, ids: list[int], size: int = 900) -> list:
    rows: list = []
    for start in range(0, len(ids), size):
        batch = ids[start : start + size]
        rows.extend(conn.execute(sql.format(",".join("?" * len(batch))), batch))
    return rows
