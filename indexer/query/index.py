"""Read access to one index database: nodes, edges with evidence, and graph walks.

Connections are per thread (SQLite objects must not cross threads) and read-only over a
file that is only ever replaced, never modified, so concurrent readers need no lock.
"""

from __future__ import annotations

import difflib
import json
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from indexer.extract.discover import is_test_file
from indexer.graph.vocabulary import edge_extractor
from indexer.harness import Manifest
from indexer.store.db import connect_readonly, read_meta

T = TypeVar("T")
SUGGEST_POOL = 400  # names difflib compares a missing name against
_NODE_COLUMNS = "n.id, n.kind, n.name, n.qualname, f.path, n.line, n.end_line, n.parent_id, n.attrs"
_EDGE_COLUMNS = "e.src_id, e.dst_id, e.kind, f.path, e.line, e.attrs"


def spelled(qualname: str) -> str:
    """A C++ qualified name as code outside its file writes it: anonymous namespaces left
    out, a structured kernel's ``structured_X::impl`` (TORCH_IMPL_FUNC) as ``X``."""
    name = qualname.replace("(anonymous)::", "")
    head, _, last = name.rpartition("::")
    if last == "impl" and head:
        scope, _, owner = head.rpartition("::")
        if owner.startswith("structured_"):
            return f"{scope}::{owner[len('structured_') :]}" if scope else owner[11:]
    return name


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    kind: str
    name: str
    qualname: str
    path: str
    line: int
    end_line: int
    parent_id: int | None
    attrs: dict[str, Any]

    @property
    def evidence(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Edge:
    src: int
    dst: int
    kind: str
    path: str  # evidence: the file and line of the text that makes this edge
    line: int
    attrs: dict[str, Any]

    @property
    def evidence(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def ambiguous(self) -> bool:
        return bool(self.attrs.get("ambiguous"))

    @property
    def extractor(self) -> str:
        return edge_extractor(self.attrs)


def _node(row: tuple) -> Node:
    return Node(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        json.loads(row[8]) if row[8] else {},
    )


def _edge(row: tuple) -> Edge:
    return Edge(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]) if row[5] else {})


class Index:
    """An open index. Safe to share between threads."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._local = threading.local()
        self.meta: dict[str, str] = read_meta(self.conn)
        self._shared: dict[str, Any] = {}
        self._shared_lock = threading.Lock()

    def shared(self, key: str, make: Callable[[], T]) -> T:
        """An object derived from this index, made once and kept as long as the index is
        (a long-lived server keeps one per index file it serves). Whoever uses it from
        several threads brings its own lock. ``make`` runs outside the lock, so it may
        ask for other shared objects; two threads racing may both make one, and all get
        the first kept."""
        with self._shared_lock:
            if key in self._shared:
                return self._shared[key]
        made = make()
        with self._shared_lock:
            return self._shared.setdefault(key, made)

    def file_paths(self) -> dict[int, str]:
        """file id -> repo-relative path of every indexed file (read once per index)."""
        return self.shared(
            "file-paths", lambda: dict(self.conn.execute("SELECT id, path FROM files"))
        )

    def test_file_paths(self) -> dict[int, str]:
        """file id -> path of every indexed test file: the one definition,
        ``indexer.extract.discover.is_test_file``, under the manifest the index was built
        with (read once per index)."""

        def load() -> dict[int, str]:
            data = json.loads(self.meta.get("manifest") or "{}")
            manifest = Manifest(self.meta.get("harness", ""), data, ())
            return {
                file_id: path
                for file_id, path in self.file_paths().items()
                if is_test_file(path, manifest)
            }

        return self.shared("test-file-paths", load)

    def precise_edges(self) -> frozenset[tuple[int, int, int]]:
        """(src, dst, line) of the edges precise C++ mode made (indexer/precise), for
        walks that keep no attributes (the selection's)."""

        def load() -> frozenset[tuple[int, int, int]]:
            precise = json.loads(self.meta.get("precise") or "null") or {}
            if precise.get("mode") != "on":
                return frozenset()
            return frozenset(
                self.conn.execute(
                    "SELECT src_id, dst_id, line FROM edges WHERE ref_id IS NULL"
                    ' AND instr(attrs, \'"extractor":"precise"\') > 0'
                )
            )

        return self.shared("precise-edges", load)

    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_readonly(self.db_path)
            self._local.conn = conn
        return conn

    def meta_json(self, key: str, default: Any = None) -> Any:
        raw = self.meta.get(key)
        return json.loads(raw) if raw else default

    # --- nodes -------------------------------------------------------------------------

    def node(self, node_id: int) -> Node:
        row = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes n JOIN files f ON f.id = n.file_id WHERE n.id = ?",
            (node_id,),
        ).fetchone()
        if row is None:
            raise KeyError(node_id)
        return _node(row)

    def nodes(self, node_ids: Iterable[int]) -> list[Node]:
        ids = list(dict.fromkeys(node_ids))
        found: dict[int, Node] = {}
        for start in range(0, len(ids), 900):
            batch = ids[start : start + 900]
            for row in self.conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM nodes n JOIN files f ON f.id = n.file_id"
                f" WHERE n.id IN ({','.join('?' * len(batch))})",
                batch,
            ):
                found[row[0]] = _node(row)
        return [found[node_id] for node_id in ids if node_id in found]

    def find(self, name: str, kinds: Iterable[str] | None = None) -> list[Node]:
        """Nodes whose qualified name or short name is exactly ``name``, qualified first."""
        kind_list = list(kinds or ())
        kind_sql = f" AND n.kind IN ({','.join('?' * len(kind_list))})" if kind_list else ""
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes n JOIN files f ON f.id = n.file_id"
            f" WHERE n.qualname = ?{kind_sql}"
            f" UNION ALL SELECT {_NODE_COLUMNS} FROM nodes n JOIN files f ON f.id = n.file_id"
            f" WHERE n.name = ? AND n.qualname != ?{kind_sql}",
            [name, *kind_list, name, name, *kind_list],
        ).fetchall()
        return [_node(row) for row in rows]

    def find_spelled(self, name: str, kinds: Iterable[str] | None = None) -> list[Node]:
        """:meth:`find`, and else the C++ definitions ``name`` spells as users write it:
        ``at::native::add_out`` for ``TORCH_IMPL_FUNC(add_out)``
        (``at::native::structured_add_out::impl``), ``at::native::f`` for a definition in an
        anonymous namespace."""
        found = self.find(name, kinds)
        if found or "::" not in name:
            return found
        short = name.rsplit("::", 1)[1]
        return [node for node in self.find(short, kinds) if spelled(node.qualname) == name]

    def nodes_of_kind(self, kind: str, limit: int | None = None) -> list[Node]:
        sql = (
            f"SELECT {_NODE_COLUMNS} FROM nodes n JOIN files f ON f.id = n.file_id"
            " WHERE n.kind = ? ORDER BY f.path, n.line"
        )
        params: list[Any] = [kind]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_node(row) for row in self.conn.execute(sql, params)]

    def nodes_in_file(self, path: str, kinds: Iterable[str] | None = None) -> list[Node]:
        kind_list = list(kinds or ())
        kind_sql = f" AND n.kind IN ({','.join('?' * len(kind_list))})" if kind_list else ""
        return [
            _node(row)
            for row in self.conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM nodes n JOIN files f ON f.id = n.file_id"
                f" WHERE f.path = ?{kind_sql} ORDER BY n.line",
                [path, *kind_list],
            )
        ]

    @cached_property
    def _all_names(self) -> list[str]:
        return [
            name
            for (name,) in self.conn.execute(
                "SELECT DISTINCT qualname FROM nodes WHERE kind != 'file'"
            )
        ]

    @cached_property
    def _all_names_lower(self) -> list[str]:
        return [name.lower() for name in self._all_names]

    def suggest(self, name: str, limit: int = 5) -> list[str]:
        """Known names closest to ``name``, for a 'not found' answer.

        difflib compares against a bounded shortlist (names containing the last component,
        else names sharing its first or last letters; those closest in length first): over
        every name of a PyTorch index it takes tens of seconds.
        """
        tail = name.replace("::", ".").rsplit(".", 1)[-1].lower()
        names, lowered = self._all_names, self._all_names_lower
        containing = [n for n, low in zip(names, lowered, strict=True) if tail and tail in low]
        if containing:
            pool = containing
        else:
            head, end = tail[:4], tail[-4:]
            pool = [n for n, low in zip(names, lowered, strict=True) if head in low or end in low]
        if len(pool) > SUGGEST_POOL:
            pool = sorted(pool, key=lambda n: abs(len(n) - len(name)))[:SUGGEST_POOL]
        close = difflib.get_close_matches(name, pool, n=limit, cutoff=0.5)
        extra = sorted(containing, key=len)[: limit - len(close)] if containing else []
        return list(dict.fromkeys(close + extra))[:limit]

    # --- edges -------------------------------------------------------------------------

    def _edges(self, column: str, node_id: int, kinds: Iterable[str] | None) -> list[Edge]:
        kind_list = list(kinds or ())
        kind_sql = f" AND e.kind IN ({','.join('?' * len(kind_list))})" if kind_list else ""
        return [
            _edge(row)
            for row in self.conn.execute(
                f"SELECT {_EDGE_COLUMNS} FROM edges e JOIN files f ON f.id = e.file_id"
                f" WHERE e.{column} = ?{kind_sql} ORDER BY f.path, e.line",
                [node_id, *kind_list],
            )
        ]

    def out_edges(self, node_id: int, kinds: Iterable[str] | None = None) -> list[Edge]:
        return self._edges("src_id", node_id, kinds)

    def in_edges(self, node_id: int, kinds: Iterable[str] | None = None) -> list[Edge]:
        return self._edges("dst_id", node_id, kinds)

    def walk(
        self,
        start: Iterable[int],
        direction: str = "in",
        kinds: Iterable[str] | None = None,
        max_depth: int | None = None,
    ) -> dict[int, Edge | None]:
        """Breadth-first reachability; maps each reached node to the edge it was reached by.

        ``direction="in"`` follows edges backwards (who calls / uses this), ``"out"``
        forwards. Cycles are handled; ``max_depth=None`` means no cap. Following the map
        from a node back to a start node gives the shortest evidence chain.
        """
        kind_list = list(kinds or ())
        reached: dict[int, Edge | None] = {node_id: None for node_id in start}
        frontier = deque((node_id, 0) for node_id in reached)
        step = self.in_edges if direction == "in" else self.out_edges
        while frontier:
            node_id, depth = frontier.popleft()
            if max_depth is not None and depth >= max_depth:
                continue
            for edge in step(node_id, kind_list):
                nxt = edge.src if direction == "in" else edge.dst
                if nxt not in reached:
                    reached[nxt] = edge
                    frontier.append((nxt, depth + 1))
        return reached

    @staticmethod
    def chain(reached: dict[int, Edge | None], node_id: int, direction: str = "in") -> list[Edge]:
        """The edges joining ``node_id`` to a start node of a :meth:`walk`, in edge order.

        For an inbound walk the chain starts at ``node_id`` (the user, e.g. a test) and ends
        at the start node (e.g. the changed function); for an outbound walk it starts at
        the start node.
        """
        hops: list[Edge] = []
        edge = reached.get(node_id)
        while edge is not None:
            hops.append(edge)
            edge = reached.get(edge.dst if direction == "in" else edge.src)
        return hops if direction == "in" else hops[::-1]

    # --- files -------------------------------------------------------------------------

    def file_rows(self) -> list[tuple[str, str, str, int, int, str | None]]:
        """(path, language, sha, size, parse_errors, error) of every indexed file."""
        return list(
            self.conn.execute(
                "SELECT path, language, sha, size, parse_errors, error FROM files ORDER BY path"
            )
        )

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
