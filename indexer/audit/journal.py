"""The journal that makes a mutation undoable after a crash or a kill.

Before a file is rewritten, its original bytes are saved beside the journal and the
journal names them and the hash of the mutated bytes (each written to a temporary file
and renamed, so either the old or the new state is on disk, never half of one). Restoring
writes the saved bytes back only over exactly the mutated bytes, and checks their hash;
only then is the entry dropped. A file that holds anything else was edited since the
mutation: it is left as it is, with the original beside the journal, and the restore
stops naming both (docs/reliability.md). The next audit repairs first: every entry still
in the journal is a file some run left mutated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from indexer.durable import write_atomic
from indexer.errors import TorchTalkError

JOURNAL = "journal.json"


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass
class Pending:
    path: str  # repo-relative
    sha: str  # digest of the original bytes
    saved: str  # file name of the saved copy, beside the journal
    mutation: str  # the mutation's id, for the repair's message
    mutated: str = ""  # digest of the bytes the mutation wrote ("" in older journals)


class EditedSinceMutation(TorchTalkError):
    """A journaled file holds neither its original nor the mutation: someone edited it."""


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
        self._write([*self.pending(), Pending(path, sha, saved, mutation, digest(data))])
        write_atomic(target, data)

    def restore(self, entry: Pending) -> None:
        original = (self.directory / entry.saved).read_bytes()
        if digest(original) != entry.sha:
            raise OSError(
                f"the saved copy of {entry.path} is damaged ({self.directory / entry.saved})"
            )
        target = self.source / entry.path
        current = digest(target.read_bytes()) if target.is_file() else None
        if current != entry.sha:  # not restored yet, or killed before the mutation landed
            if current is None or current != entry.mutated:
                raise EditedSinceMutation(
                    f"{entry.path} changed since the audit mutated it ({entry.mutation}); "
                    f"it is left as it is and its original is {self.directory / entry.saved}: "
                    f"keep the version you want, then delete {self.file}"
                )
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
