"""The SQLite graph store: one database file per build, renamed into place when complete."""

from indexer.store.db import SCHEMA_VERSION, connect_readonly
from indexer.store.writer import IndexWriter

__all__ = ["SCHEMA_VERSION", "IndexWriter", "connect_readonly"]
