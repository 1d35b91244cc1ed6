"""Merging the compiler's view over the fast graph: one graph, not two.

A function whose definition some TU compiled is *covered*: its name-matched ``calls``
edges to C++ functions (scheme ``cpp``) give way to the calls the compiler resolved, with
``attrs.extractor = "precise"``. What stays of the fast graph in a covered function: its
calls the compiler could not resolve (dependent names in templates, calls through
pointers: same caller and name), those in lines the preprocessor skipped (``#ifdef
WITH_CUDA`` in a CPU build), and every edge that is not a name-matched C++ call
(calls into aten ops, launches, dispatches, bindings). Functions no TU compiled keep the
fast graph whole. Edges without ``extractor`` are the fast graph's.

Callees map to nodes by where the compiler says they are defined: the node of that file
whose extent holds the line of the definition's name and that has its name. A callee
defined in no compiled TU but declared in the tree (a kernel of a ``.cu`` file the build
compiled with nvcc) maps to the nodes of its qualified name; one declared outside the tree
(torch, the standard library) makes no edge, and the fast graph's guess for it goes.
A virtual call also reaches every overrider the tree defines.

Replaced edges move to ``superseded_edges``, so :func:`restore_fast` gives back the fast
graph before an update merges again: the merge is a function of the fast graph and the
TUs' facts, recomputed whole each time (cached TUs make that cheap). ``precise_files``
names the tree's files some TU compiled (main files and their in-tree includes): the
compiler saw every call written in them, which the selection's fallback relies on
(``indexer.select.fallback``).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field

from indexer.precise.tu import TuFacts
from indexer.store.db import has_table, target_key

EXTRACTOR = "precise"
_TARGET_KINDS = ("cpp_function", "cuda_kernel")
_MARK = '"extractor":"precise"'
_BATCH = 900
_COLUMNS = "ref_id, src_id, dst_id, kind, file_id, line, attrs"


@dataclass
class MergeStats:
    covered_functions: int = 0  # fast-graph functions some TU compiled
    unmatched_definitions: int = 0  # compiled definitions with no fast-graph node
    edges: int = 0  # precise edges written
    confirmed: int = 0  # (caller, callee) pairs both graphs have
    added: int = 0  # pairs only the compiler found
    removed: int = 0  # pairs only the fast graph had, dropped
    ambiguities_resolved: int = 0  # ambiguous fast refs the compiler narrowed
    kept_unresolved: int = 0  # fast edges kept where the compiler could not resolve a call
    kept_skipped: int = 0  # fast edges kept in lines the preprocessor skipped
    external_calls: int = 0  # calls into code outside the tree
    by_via: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return dict(vars(self))


def ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS superseded_edges (id INTEGER PRIMARY KEY,"
        " ref_id INTEGER, src_id INTEGER NOT NULL, dst_id INTEGER NOT NULL, kind TEXT NOT NULL,"
        " file_id INTEGER NOT NULL, line INTEGER NOT NULL, attrs TEXT)"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS precise_files (path TEXT PRIMARY KEY)")


def not_superseded(conn: sqlite3.Connection, ref: str = "r") -> str:
    """A SQL condition on refs aliased ``ref``: not one whose name-matched edge precise mode
    replaced (the compiler resolved that call, so it is not an unresolved one)."""
    if not has_table(conn, "superseded_edges"):
        return ""
    return f" AND NOT EXISTS (SELECT 1 FROM superseded_edges s WHERE s.ref_id = {ref}.id)"


def restore_fast(conn: sqlite3.Connection) -> int:
    """Undo a merge: drop the precise edges, put the replaced ones back; returns how many
    precise edges there were."""
    ensure_table(conn)
    dropped = conn.execute(
        "DELETE FROM edges WHERE ref_id IS NULL AND instr(attrs, ?) > 0", (_MARK,)
    ).rowcount
    conn.execute(f"INSERT INTO edges({_COLUMNS}) SELECT {_COLUMNS} FROM superseded_edges")
    conn.execute("DELETE FROM superseded_edges")
    conn.execute("DELETE FROM precise_files")
    return dropped


class _Nodes:
    """The fast graph's functions, by file and by qualified name."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.by_file: dict[str, list[tuple[int, int, str, int]]] = defaultdict(list)
        self.by_qualname: dict[str, list[int]] = defaultdict(list)
        self.file_of: dict[int, int] = {}
        for node_id, file_id, path, name, qualname, line, end_line in conn.execute(
            "SELECT n.id, n.file_id, f.path, n.name, n.qualname, n.line, n.end_line"
            " FROM nodes n JOIN files f ON f.id = n.file_id WHERE n.kind IN (?, ?)",
            _TARGET_KINDS,
        ):
            self.by_file[path].append((line, end_line, name, node_id))
            self.by_qualname[qualname].append(node_id)
            self.file_of[node_id] = file_id

    def at(self, path: str | None, name: str, line: int, start: int | None = None) -> int | None:
        """The node of ``path`` named ``name`` whose extent holds ``line`` (innermost), or
        the one starting where the definition starts."""
        if path is None:
            return None
        best: tuple[int, int] | None = None
        for first, last, node_name, node_id in self.by_file.get(path, ()):
            holds = first <= line <= last and (node_name == name or first == start)
            if holds and (best is None or first > best[0]):
                best = (first, node_id)
        return best[1] if best else None


def merge(conn: sqlite3.Connection, tus: list[TuFacts]) -> MergeStats:
    """Merge the facts of the parsed TUs into the (fast) graph; the caller owns the
    transaction and has restored the fast graph first."""
    ensure_table(conn)
    conn.executemany(
        "INSERT OR IGNORE INTO precise_files(path) VALUES (?)",
        sorted({(path,) for tu in tus for path in (tu.file, *tu.includes)}),
    )
    stats = MergeStats()
    nodes = _Nodes(conn)
    node_of_usr: dict[str, int] = {}
    overriders: dict[str, set[str]] = defaultdict(set)
    for tu in tus:
        for usr, name, _qualname, path, line, start, _end, overridden in tu.definitions:
            if usr in node_of_usr:
                continue
            node = nodes.at(path, name, line, start)
            if node is None:
                stats.unmatched_definitions += 1
                continue
            node_of_usr[usr] = node
            for base in overridden:
                overriders[base].add(usr)
    covered = set(node_of_usr.values())
    stats.covered_functions = len(covered)

    precise: dict[tuple[int, int, int], str | None] = {}  # (caller, callee, line) -> via
    # (caller, callee, line) -> columns of its direct call sites (a header's calls come
    # from every TU including it: the same sites)
    sites: dict[tuple[int, int, int], set[int]] = defaultdict(set)
    # (caller, name key) of calls the compiler could not resolve. Not by line: a call
    # written over several lines may be placed on another one by each extractor.
    unresolved: set[tuple[int, str]] = set()
    for tu in tus:
        for caller_usr, line, written, target, column in tu.calls:
            caller = node_of_usr.get(caller_usr)
            if caller is None:
                continue
            if target is None:
                unresolved.add((caller, target_key(written) or written))
                continue
            found = _callees(target, nodes, node_of_usr, overriders)
            if not found:
                stats.external_calls += 1
            for callee, via in found:
                precise.setdefault((caller, callee, line), via)
                if via is None:
                    sites[(caller, callee, line)].add(column)

    # Lines some TU's preprocessor skipped: what the fast graph read there, the compiler
    # did not see (#ifdef WITH_CUDA in a CPU build), so its edges stay.
    skipped: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tu in tus:
        for path, first, last in tu.skipped:
            skipped[path].append((first, last))

    fast_pairs: set[tuple[int, int]] = set()
    ambiguous_refs: dict[int, set[int]] = defaultdict(set)
    superseded: list[int] = []
    covered_ids = sorted(covered)
    for start in range(0, len(covered_ids), _BATCH):
        batch = covered_ids[start : start + _BATCH]
        for edge_id, ref_id, src, dst, key, attrs, path, line in conn.execute(
            "SELECT e.id, e.ref_id, e.src_id, e.dst_id, r.target_key, e.attrs, f.path, e.line"
            " FROM edges e JOIN refs r ON r.id = e.ref_id JOIN nodes d ON d.id = e.dst_id"
            " JOIN files f ON f.id = e.file_id"
            " WHERE e.kind = 'calls' AND r.scheme = 'cpp' AND d.kind IN (?, ?)"
            f" AND e.src_id IN ({','.join('?' * len(batch))})",
            [*_TARGET_KINDS, *batch],
        ):
            if (src, key) in unresolved:
                stats.kept_unresolved += 1
                continue
            if any(first <= line <= last for first, last in skipped.get(path, ())):
                stats.kept_skipped += 1
                continue
            superseded.append(edge_id)
            fast_pairs.add((src, dst))
            if attrs and '"ambiguous"' in attrs:
                ambiguous_refs[ref_id].add(dst)
    for start in range(0, len(superseded), _BATCH):
        batch = superseded[start : start + _BATCH]
        marks = ",".join("?" * len(batch))
        conn.execute(
            f"INSERT INTO superseded_edges({_COLUMNS}) SELECT {_COLUMNS} FROM edges"
            f" WHERE id IN ({marks})",
            batch,
        )
        conn.execute(f"DELETE FROM edges WHERE id IN ({marks})", batch)

    rows = []
    precise_pairs: set[tuple[int, int]] = set()
    for (caller, callee, line), via in sorted(precise.items()):
        attrs: dict[str, object] = {"extractor": EXTRACTOR}
        if via:
            attrs["via"] = via
            stats.by_via[via] = stats.by_via.get(via, 0) + 1
        count = len(sites.get((caller, callee, line), ()))
        if count > 1:
            attrs["sites"] = count  # calls of it on this line (indexer.select.fallback)
        rows.append((None, caller, callee, "calls", nodes.file_of[caller], line, _dumps(attrs)))
        precise_pairs.add((caller, callee))
    conn.executemany(f"INSERT INTO edges({_COLUMNS}) VALUES (?,?,?,?,?,?,?)", rows)
    stats.edges = len(rows)
    stats.confirmed = len(precise_pairs & fast_pairs)
    stats.added = len(precise_pairs - fast_pairs)
    stats.removed = len(fast_pairs - precise_pairs)
    for ref_id, dsts in ambiguous_refs.items():
        src = conn.execute("SELECT src_id FROM refs WHERE id = ?", (ref_id,)).fetchone()[0]
        chosen = {dst for dst in dsts if (src, dst) in precise_pairs}
        if chosen and len(chosen) < len(dsts):
            stats.ambiguities_resolved += 1
    return stats


def _callees(
    target: dict,
    nodes: _Nodes,
    node_of_usr: dict[str, int],
    overriders: dict[str, set[str]],
) -> list[tuple[int, str | None]]:
    """The nodes a resolved call reaches, each with how (None: directly)."""
    via = target.get("via")
    found: list[tuple[int, str | None]] = []
    definition = target.get("def")
    node = None
    if definition is not None:
        node = nodes.at(definition[0], target["name"], definition[1])
    if node is None:
        node = node_of_usr.get(target["usr"])
    if node is not None:
        found.append((node, via))
    elif target["decl"][0] is not None:
        # Declared in the tree, defined in no TU we compiled: its fast-graph namesakes.
        found += [(other, "declaration") for other in nodes.by_qualname.get(target["qualname"], ())]
    if target.get("virtual"):
        seen: set[str] = set()
        frontier = [target["usr"]]
        while frontier:
            usr = frontier.pop()
            for overrider in overriders.get(usr, ()):
                if overrider in seen:
                    continue
                seen.add(overrider)
                frontier.append(overrider)
                if overrider in node_of_usr:
                    found.append((node_of_usr[overrider], "virtual"))
    return found


def _dumps(attrs: dict) -> str:
    return json.dumps(attrs, sort_keys=True, separators=(",", ":"))
