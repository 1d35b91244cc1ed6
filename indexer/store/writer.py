"""Writing a new index: a private file, filled, indexed, then renamed over the old one."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from indexer import durable
from indexer.errors import TorchTalkError
from indexer.graph.facts import FileFacts
from indexer.store.db import (
    SCHEMA_VERSION,
    connect_writable,
    create_indexes,
    create_schema,
    insert_file_facts,
    write_meta,
)

# Writes what is derived from the graph into a new index's private file (its path, and
# a writable connection to it, outside any transaction) before it is renamed into place.
Derive = Callable[[Path, sqlite3.Connection], None]


class IndexWriter:
    """Builds ``final_path`` atomically: readers see the old index or the complete new one.

    Use as a context manager; leaving the block by an exception removes the partial file.
    """

    def __init__(self, final_path: Path) -> None:
        self.final_path = final_path
        self._file = durable.Replacement(final_path, tag="building")
        self.tmp_path = self._file.path
        self.conn: sqlite3.Connection = connect_writable(self.tmp_path)
        create_schema(self.conn)
        write_meta(self.conn, {"schema_version": str(SCHEMA_VERSION)})
        self.conn.execute("BEGIN")
        self.files_written = 0

    def add(self, facts: FileFacts) -> int:
        self.files_written += 1
        return insert_file_facts(self.conn, facts)

    def set_meta(self, **values: Any) -> None:
        write_meta(self.conn, values)

    def finish_load(self) -> None:
        """End the bulk load: commit and build the lookup indexes the linker needs."""
        self.conn.execute("COMMIT")
        create_indexes(self.conn)
        self.conn.execute("BEGIN")

    def commit(self, derive: Derive | None = None) -> Path:
        """Finish the file and rename it into place; ``derive`` first writes what is
        derived from the graph into it (``indexer.store.derived``)."""
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        create_indexes(self.conn)
        self.conn.execute("ANALYZE")
        if derive is not None:
            derive(self.tmp_path, self.conn)
        self.conn.close()
        return self._file.install()

    def abort(self) -> None:
        try:
            self.conn.close()
        finally:
            self._file.discard()

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
            if isinstance(exc, (sqlite3.OperationalError, OSError)):  # a full disk, mostly
                reason = getattr(exc, "strerror", None) or str(exc)
                raise TorchTalkError(
                    f"cannot write the index {self.final_path}: {reason}; the previous "
                    "index is kept"
                ) from None
