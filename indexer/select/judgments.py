"""The walk's judgments of source text, kept across runs inside the index.

Whether a line calls the op it names (``torch.atan2(...)`` or only ``torch.atan2`` in a
table), whether ``x.add(...)`` has a receiver its file shows is no tensor, and what a
module's top-level statement does with a name (``indexer.select.module_scope``) depend
only on the file's content. A selection asks thousands of them, most about library files
no change touches, and parsing their functions is most of a warm walk's time. So the
refresh keeps the answers its walks made in the index's ``judgments`` table
(``indexer.store.derived``), each keyed by the hash of the content it was read from (not
the index's record of it: what is judged is what is read), the line and the name, and
all of them by a hash of the code that judges: a changed rule starts afresh. An update's
copy of the index carries them over; a selection reads them and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from indexer.store import derived

NAME = "judgments"  # its item in the index's derived data: the code that judged
MAX_ENTRIES = 200_000  # past this (~12 MB), only the last run's answers are kept
# The judging code and what it imports (indexer.python.scope, ...): whole packages, so a
# helper added or changed anywhere in them can never leave old answers standing.
_JUDGING_PACKAGES = ("select", "python")


def _code_version() -> str:
    """A hash of the judging code ('' when it cannot be read: nothing is kept)."""
    digest = hashlib.blake2b(digest_size=8)
    indexer = Path(__file__).resolve().parent.parent
    try:
        for package in _JUDGING_PACKAGES:
            for path in sorted((indexer / package).glob("*.py")):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()


CODE_VERSION = _code_version()


def content_key(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


class Judgments:
    """Answers by key, read from the index ``conn`` reads (None: in memory only), and
    the answers this walker added (``new``: for the refresh to keep). An answer is a
    bool, or a list of JSON values."""

    def __init__(self, conn: sqlite3.Connection | None) -> None:
        self._conn = conn if conn is not None and _kept_by_this_code(conn) else None
        self._read: dict[str, Any] = {}
        self._contents: set[str] = set()  # digests whose answers are in ``_read``
        self.new: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        found = self.new.get(key)
        if found is not None:
            return found
        digest = key.partition(":")[0]
        if self._conn is not None and digest not in self._contents:
            self._read_content(digest)
        return self._read.get(key)

    def _read_content(self, digest: str) -> None:
        """Every answer kept for the content ``digest`` (a key's part before its first
        ':'), in one range query: a walk asks about many lines of each file it reads."""
        self._contents.add(digest)
        rows = self._conn.execute(  # type: ignore[union-attr]
            "SELECT key, answer FROM judgments WHERE key = ? OR (key >= ? AND key < ?)",
            (digest, f"{digest}:", f"{digest};"),  # ';' follows ':'; a key with no ':'
        )
        self._read.update((key, _answer(text)) for key, text in rows)

    def put(self, key: str, answer: Any) -> None:
        self.new[key] = answer


def _kept_by_this_code(conn: sqlite3.Connection) -> bool:
    return bool(CODE_VERSION) and derived.header(conn, NAME, CODE_VERSION) is not None


def _answer(text: str) -> Any:
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):  # a damaged answer is a miss
        return None
    return answer if isinstance(answer, (bool, list)) else None


def store(conn: sqlite3.Connection, answers: dict[str, Any]) -> None:
    """Keep ``answers`` in the index (a writer's connection, in its transaction): beside
    those kept by this code, or instead of all of them when the code changed or they
    grew past ``MAX_ENTRIES``."""
    if not CODE_VERSION:
        return
    (count,) = conn.execute("SELECT COUNT(*) FROM judgments").fetchone()
    if not _kept_by_this_code(conn) or count + len(answers) > MAX_ENTRIES:
        conn.execute("DELETE FROM judgments")
    conn.executemany(
        "INSERT OR REPLACE INTO judgments(key, answer) VALUES (?, ?)",
        [(key, json.dumps(answer, separators=(",", ":"))) for key, answer in answers.items()],
    )
    derived.write(conn, NAME, CODE_VERSION, {}, {})
