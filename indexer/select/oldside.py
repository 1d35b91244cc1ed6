"""The old side of a change: what the file defined at the base, mapped onto the index.

The index describes the working tree. For lines that only exist at the base (deleted or
replaced code) the file's old text is extracted on the fly, with the same extractors as
the index, and each old definition is looked up in the index by kind and qualified
name: the same definition now (edited), the same name elsewhere (moved), or, for a
definition that is gone, the code that still names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from indexer.extract.context import stored_context
from indexer.extract.extractor import load_extractors
from indexer.extract.pipeline import content_hash
from indexer.extract.source import SourceFile
from indexer.graph.facts import FileFacts, NodeFact
from indexer.graph.vocabulary import NodeKind
from indexer.harness import Manifest
from indexer.query.index import Index, Node


@dataclass
class OldFile:
    nodes: list[NodeFact]  # node 0 is the file
    error: str | None = None


class OldSide:
    """Extracts base versions of files and finds their definitions in the index."""

    def __init__(self, manifest: Manifest, index: Index) -> None:
        self.manifest = manifest
        self.index = index
        self._extractors = None
        self._context = None

    def extract(self, path: str, language: str, data: bytes) -> OldFile:
        if self._extractors is None:
            self._extractors = load_extractors(self.manifest)
            self._context = stored_context(self.index.meta)
        facts = FileFacts(path, language, content_hash(data), len(data))
        facts.add_node(NodeKind.FILE.value, path.rsplit("/", 1)[-1], path, 1, 1, None)
        src = SourceFile(path, data, language, self._context)
        problems = []
        for extractor in self._extractors:
            if not extractor.wants(src):
                continue
            try:
                extractor.extract(src, facts)
            except Exception as exc:  # the old side is advisory: report, do not stop
                problems.append(f"{extractor.name}: {type(exc).__name__}: {exc}")
        return OldFile(facts.nodes, "; ".join(problems) or None)

    def find(self, fact: NodeFact, path: str) -> list[Node]:
        """Index nodes for an old definition: same file first, then anywhere."""
        candidates = [
            node
            for node in self.index.find(fact.qualname, [fact.kind])
            if node.qualname == fact.qualname
        ]
        signature = fact.attrs.get("signature")
        if signature is not None:
            exact = [node for node in candidates if node.attrs.get("signature") == signature]
            candidates = exact or candidates
        here = [node for node in candidates if node.path == path]
        return here or candidates

    def users_of(self, name: str) -> list[Node]:
        """Nodes whose code names ``name`` (by its last identifier): the users of a
        definition that no longer exists."""
        rows = self.index.conn.execute(
            "SELECT DISTINCT src_id FROM refs WHERE target_key = ?", (name,)
        ).fetchall()
        return self.index.nodes(row[0] for row in rows)
