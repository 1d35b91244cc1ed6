"""The journal that makes a mutation undoable after a crash or a kill.

Before a file is rewritten, its original bytes are saved beside the journal and the
journal names them (each written to a temporary file and renamed, so either the old or
the new state is on disk, never half of one). Restoring writes the saved bytes back and
checks their hash; only then is the entry dropped. The next audit repairs first: every
entry still in the journal is a file some run left mutated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from indexer.durable import write_atomic

JOURNAL = "journal.json"


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass
class Pending:
    path: str  # repo-relative
    sha: str  # digest of the original bytes
    saved: str  # file name of the saved copy, beside the journal
    mutation: str  # the mutation's id, for the repair's message


class Journal:
    """Files the audit has changed and not yet restored, under ``directory``."""

    def __init__(self, directory: Path, source: Path) -> None:
        self.directory = directory
        self.source = source
        self.file = directory / JOURNAL

    def pending(self) -> list[Pending]:
        if not self.file.exists():
            return []
        return [Pending(**entry) for entry in json.loads(self.file.read_text())]

    def _write(self, entries: list[Pending]) -> None:
        text = json.dumps([entry.__dict__ for entry in entries], indent=1)
        write_atomic(self.file, text.encode())

    def change(self, path: str, data: bytes, mutation: str) -> None:
        """Save ``path``'s original bytes, journal them, then write ``data`` over it."""
        target = self.source / path
        original = target.read_bytes()
        sha = digest(original)
        saved = f"original-{sha}"
        write_atomic(self.directory / saved, original)
        self._write([*self.pending(), Pending(path, sha, saved, mutation)])
        write_atomic(target, data)

    def restore(self, entry: Pending) -> None:
        original = (self.directory / entry.saved).read_bytes()
        if digest(original) != entry.sha:
            raise OSError(
                f"the saved copy of {entry.path} is damaged ({self.directory / entry.saved})"
            )
        target = self.source / entry.path
        if not target.exists() or target.read_bytes() != original:
            write_atomic(target, original)
        if digest(target.read_bytes()) != entry.sha:
            raise OSError(f"{entry.path} could not be restored")
        self._write([e for e in self.pending() if e.saved != entry.saved or e.path != entry.path])
        if not any(e.saved == entry.saved for e in self.pending()):
            (self.directory / entry.saved).unlink(missing_ok=True)

    def restore_all(self) -> list[Pending]:
        """Restore every pending file (the latest change first); returns what was restored."""
        entries = self.pending()
        for entry in reversed(entries):
            self.restore(entry)
        return entries
