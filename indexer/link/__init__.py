"""Resolving refs (names as written) into edges between nodes of any file."""

from indexer.link.linker import LinkStats, link
from indexer.link.symbols import Ref, Resolution, SymbolTable

__all__ = ["LinkStats", "Ref", "Resolution", "SymbolTable", "link"]
