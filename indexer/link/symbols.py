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

    Attributes (JSON) are parsed only when a resolver asks for them.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.kind: dict[int, str] = {}
        self.name: dict[int, str] = {}
        self.qualname: dict[int, str] = {}
        self.file_id: dict[int, int] = {}
        self.parent: dict[int, int | None] = {}
        self.line: dict[int, int] = {}
        self._attrs_raw: dict[int, str] = {}
        self._parsed: dict[str, dict[str, Any]] = {}
        for node_id, kind, name, qualname, file_id, parent, line, attrs in conn.execute(
            "SELECT id, kind, name, qualname, file_id, parent_id, line, attrs FROM nodes"
        ):
            self.kind[node_id] = kind
            self.name[node_id] = name
            self.qualname[node_id] = qualname
            self.file_id[node_id] = file_id
            self.parent[node_id] = parent
            self.line[node_id] = line
            if attrs:
                self._attrs_raw[node_id] = attrs
        self.paths: dict[int, str] = dict(conn.execute("SELECT id, path FROM files"))

    def attrs(self, node_id: int) -> dict[str, Any]:
        """The node's attributes: a dict of its own (many nodes share the same JSON,
        parsed once: ``{"arity":[0,0],"signature":"()"}``)."""
        raw = self._attrs_raw.get(node_id)
        if not raw:
            return {}
        parsed = self._parsed.get(raw)
        if parsed is None:
            parsed = self._parsed[raw] = json.loads(raw)
        return dict(parsed)

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
