"""Reading the facts extraction judged of Python source (``indexer.python.source_facts``):
what the impact walk asks instead of reading the tree."""

from __future__ import annotations

import json
import sqlite3
from typing import Any


def module_statements(
    conn: sqlite3.Connection, file_id: int
) -> list[tuple[int, int, dict[str, Any]]]:
    """The module-level statements of a file: (first line, last line, facts), by line.
    A row whose facts cannot be read (a damaged or crafted index) is left out: its lines
    are then in no kept statement, which the walk reads as run at import (more, not less)."""
    statements = []
    for line, end_line, raw in conn.execute(
        "SELECT line, end_line, facts FROM py_statements WHERE file_id = ? ORDER BY line",
        (file_id,),
    ):
        try:
            facts = json.loads(raw)
        except (TypeError, ValueError, RecursionError):
            continue
        if isinstance(facts, dict):
            statements.append((line, end_line, facts))
    return statements
