"""What one extractor learns from one file, before anything is linked.

Extraction is a pure function of (path, bytes, manifest): it runs in worker processes and
returns a :class:`FileFacts`. Nodes are numbered locally (index into ``nodes``; index 0 is
the file node the pipeline creates). References name their target as text: the link step
resolves them against every file's nodes, the way clangd keeps Refs apart from Symbols.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FILE_NODE = 0  # local index of the file's own node in every FileFacts
# Node attributes that hold lines of the node's file (a function's nested spans, a
# module's variables, where a test class is instantiated): where a node is, not what it
# is, so an update compares nodes with them apart (``indexer.relink``,
# ``indexer.query.moved_facts``).
LINE_ATTRS = ("nested", "var_lines", "instantiated_at")
# Node attributes only answers read (no resolver, no walk): an update compares nodes
# without them, so a docstring edited re-links and re-walks nothing.
ANSWER_ATTRS = ("doc",)


@dataclass(slots=True)
class NodeFact:
    kind: str
    name: str
    qualname: str
    line: int
    end_line: int
    parent: int | None = FILE_NODE  # local index of the enclosing node
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RefFact:
    """A use of a name at ``line``; the linker turns it into zero or more edges.

    ``scheme`` picks the resolver (``cpp``, ``python``, ``op``...; see indexer.link).
    ``target`` is the name as written, or ``None`` when ``target_local`` names a node of
    the same file (a direct edge that needs no resolution).
    """

    src: int
    kind: str
    scheme: str
    target: str | None
    line: int
    target_local: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class FileFacts:
    path: str
    language: str
    sha: str
    size: int
    nodes: list[NodeFact] = field(default_factory=list)
    refs: list[RefFact] = field(default_factory=list)
    parse_errors: int = 0
    error: str | None = None  # why the file could not be indexed (binary, too large...)
    # Python: each module-level statement's (first line, last line, facts)
    # (indexer.python.statement_facts).
    statements: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)

    def add_node(
        self,
        kind: str,
        name: str,
        qualname: str,
        line: int,
        end_line: int | None = None,
        parent: int | None = FILE_NODE,
        **attrs: Any,
    ) -> int:
        self.nodes.append(NodeFact(kind, name, qualname, line, end_line or line, parent, attrs))
        return len(self.nodes) - 1

    def add_ref(
        self, src: int, kind: str, scheme: str, target: str, line: int, **attrs: Any
    ) -> None:
        self.refs.append(RefFact(src, kind, scheme, target, line, None, attrs))

    def add_local_edge(self, src: int, dst: int, kind: str, line: int, **attrs: Any) -> None:
        self.refs.append(RefFact(src, kind, "local", None, line, dst, attrs))
