"""The one read path: every question the CLI, the plugin and the MCP server ask goes here."""

from indexer.query.answer import Answer, Item
from indexer.query.index import Edge, Index, Node

__all__ = ["Answer", "Edge", "Index", "Item", "Node"]
