"""The in-memory view of every node that resolvers look names up in."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


@dataclass(slots=True)
class Ref:
    """A row of the refs table, as a resolver receives it."""

    id: int
    file_id: int
    src_id: int
    kind: str
    scheme: str
    target: str
    line: int
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Resolution:
    """One edge a resolver concludes from a ref; a ref may give several (ambiguity)."""

    ref_id: int
    dst_id: int
    attrs: dict[str, Any] | None = None
    # The edge's source when it is not the ref's own (a registration in one file that
    # makes an edge between two other nodes: REGISTER_DISPATCH(stub, &kernel)).
    src_id: int | None = None


class SymbolTable:
    """Every node's id, kind, names, file and parent, with lookups by name.

    The columns are read from the index on first use, all at once: linking one edited
    C++ file needs only the C++ definitions' rows (``indexer.cpp.symbol_rows``) and
    the attributes of a few nodes, each read alone. Attributes (JSON) are parsed only
    when a resolver asks for them.
    """

    def __init__(self, conn: sqlite3.Connection, few_refs: bool = False) -> None:
        self.conn = conn
        # Only a few refs are resolved with it (an update's): lookups read the rows they
        # name rather than every row (indexer/cpp/symbols.py).
        self.few_refs = few_refs
        self._parsed: dict[str, dict[str, Any]] = {}
        self.paths: dict[int, str] = dict(conn.execute("SELECT id, path FROM files"))

    @cached_property
    def _columns(self) -> tuple[dict, ...]:
        kind: dict[int, str] = {}
        name: dict[int, str] = {}
        qualname: dict[int, str] = {}
        file_id: dict[int, int] = {}
        parent: dict[int, int | None] = {}
        line: dict[int, int] = {}
        attrs_raw: dict[int, str] = {}
        for (
            node_id,
            node_kind,
            node_name,
            node_qualname,
            node_file,
            node_parent,
            node_line,
            attrs,
        ) in self.conn.execute(
            "SELECT id, kind, name, qualname, file_id, parent_id, line, attrs FROM nodes"
        ):
            kind[node_id] = node_kind
            name[node_id] = node_name
            qualname[node_id] = node_qualname
            file_id[node_id] = node_file
            parent[node_id] = node_parent
            line[node_id] = node_line
            if attrs:
                attrs_raw[node_id] = attrs
        return kind, name, qualname, file_id, parent, line, attrs_raw

    @cached_property
    def kind(self) -> dict[int, str]:
        return self._columns[0]

    @cached_property
    def name(self) -> dict[int, str]:
        return self._columns[1]

    @cached_property
    def qualname(self) -> dict[int, str]:
        return self._columns[2]

    @cached_property
    def file_id(self) -> dict[int, int]:
        return self._columns[3]

    @cached_property
    def parent(self) -> dict[int, int | None]:
        return self._columns[4]

    @cached_property
    def line(self) -> dict[int, int]:
        return self._columns[5]

    def attrs(self, node_id: int) -> dict[str, Any]:
        """The node's attributes: a dict of its own (many nodes share the same JSON,
        parsed once: ``{"arity":[0,0],"signature":"()"}``)."""
        if "_columns" in self.__dict__:
            raw = self._columns[6].get(node_id)
        else:  # one node's: not worth reading every node's columns for
            found = self.conn.execute("SELECT attrs FROM nodes WHERE id = ?", (node_id,)).fetchone()
            raw = found[0] if found else None
        if not raw:
            return {}
        parsed = self._parsed.get(raw)
        if parsed is None:
            parsed = self._parsed[raw] = json.loads(raw)
        return dict(parsed)

    def of_kind_rows(self, kind: str) -> list[tuple[int, str, str, str | None]]:
        """(id, name, qualname, attrs JSON) of every node of ``kind``, in node order."""
        return self.conn.execute(
            "SELECT id, name, qualname, attrs FROM nodes WHERE kind = ? ORDER BY id", (kind,)
        ).fetchall()

    @cached_property
    def by_qualname(self) -> dict[str, list[int]]:
        index: dict[str, list[int]] = defaultdict(list)
        for node_id, qualname in self.qualname.items():
            index[qualname].append(node_id)
        return index

    @cached_property
    def by_name(self) -> dict[str, list[int]]:
        index: dict[str, list[int]] = defaultdict(list)
        for node_id, name in self.name.items():
            index[name].append(node_id)
        return index

    def of_kind(self, node_ids: list[int], kinds: frozenset[str] | set[str]) -> list[int]:
        return [node_id for node_id in node_ids if self.kind[node_id] in kinds]

    def path_of(self, node_id: int) -> str:
        return self.paths[self.file_id[node_id]]
