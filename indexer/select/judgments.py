"""The walk's judgments of source text, kept across runs next to the index.

Whether a line calls the op it names (``torch.atan2(...)`` or only ``torch.atan2`` in a
table), whether ``x.add(...)`` has a receiver its file shows is no tensor, and what a
module's top-level statement does with a name (``indexer.select.module_scope``) depend
only on the file's content. A selection asks thousands of them, most about library files
no change touches, and parsing their functions is most of a warm walk's time. So the
answers are kept in a sidecar ``index.sqlite.judgments``, each keyed by the hash of the
content it was read from (not the index's record of it: what is judged is what is read),
the line and the name, and the whole file by a hash of the code that judges: a changed
rule starts afresh. The file is written to a temporary file and renamed; one that
cannot be read counts as empty, one that cannot be written is skipped.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from indexer import durable

SUFFIX = ".judgments"
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
    """Answers by key, read from and written to one sidecar (None: in memory only).
    An answer is a bool, or a list of JSON values."""

    def __init__(self, path: Path | None) -> None:
        self.path = path if CODE_VERSION else None
        self._answers: dict[str, Any] = {}
        self._new: dict[str, Any] = {}
        if self.path is not None:
            self._answers = _read(self.path)

    def get(self, key: str) -> Any:
        found = self._new.get(key)
        return self._answers.get(key) if found is None else found

    def put(self, key: str, answer: Any) -> None:
        self._new[key] = answer

    def save(self) -> None:
        """Write the answers if this run added any (temporary file, then rename)."""
        if self.path is None or not self._new:
            return
        answers = {**self._answers, **self._new}
        if len(answers) > MAX_ENTRIES:
            answers = dict(self._new)
        text = json.dumps({"code": CODE_VERSION, "answers": answers}, separators=(",", ":"))
        try:
            durable.write_atomic(self.path, text.encode("utf-8"))
        except OSError:
            return
        self._answers, self._new = answers, {}


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # a cache that does not parse is a miss
        return {}
    if not isinstance(data, dict) or data.get("code") != CODE_VERSION:
        return {}
    answers = data.get("answers")
    if not isinstance(answers, dict):
        return {}
    return {key: value for key, value in answers.items() if isinstance(value, (bool, list))}
