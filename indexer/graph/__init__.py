"""The graph's vocabulary and the facts extractors emit."""

from indexer.graph.facts import FileFacts, NodeFact, RefFact
from indexer.graph.vocabulary import EdgeKind, NodeKind

__all__ = ["EdgeKind", "FileFacts", "NodeFact", "NodeKind", "RefFact"]
