"""The per-TU cache: a TU's facts, kept while its command and every file it read are unchanged.

The key is a hash of the command (arguments, directory, file) and of the extraction's
version; an entry also records the content hash of each file of the TU's include closure
(system and dependency headers too: a new torch changes what the compiler resolves). A
lookup that finds any of them changed is a miss, so a TU is parsed again exactly when its
include closure holds a changed file (or its command changed). Entries are written to a
temporary file and renamed into place.

A command keeps ``VARIANTS`` entries, one per content of its closure: the newest, and
then those a lookup found, most recent first. An edit that is undone (an audit's mutation
and its restore, a branch switched back) finds the TU's facts of before instead of
parsing it again, also after several different edits in a row: a content that came back
once (the clean tree) outlives contents that were only ever written (each mutation).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from pathlib import Path

from indexer import durable
from indexer.precise.tu import TuFacts, TuJob

# Bumped whenever what a TU yields changes, so old entries are not read as new ones.
EXTRACTION_VERSION = "4"
VARIANTS = 2


def job_key(job: TuJob) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for part in (
        EXTRACTION_VERSION,
        job.file,
        job.directory,
        *job.arguments,
        "\0",
        *job.autograd_templates,
        "\0",
        job.manifest.fingerprint(),
    ):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


class FileHashes:
    """Content hashes of files, each read once per run (TUs share most of their headers)."""

    def __init__(self) -> None:
        self._known: dict[str, str | None] = {}

    def of(self, path: str) -> str | None:
        if path not in self._known:
            try:
                data = Path(path).read_bytes()
            except OSError:
                self._known[path] = None
            else:
                self._known[path] = hashlib.blake2b(data, digest_size=16).hexdigest()
        return self._known[path]


class TuCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hashes = FileHashes()

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json.gz"

    def get(self, job: TuJob) -> TuFacts | None:
        path = self._path(job_key(job))
        variants = self._variants(path)
        for position, variant in enumerate(variants):
            closure = variant.get("closure", {})
            if all(self.hashes.of(file) == sha for file, sha in closure.items()):
                try:
                    facts = TuFacts.from_dict(variant["facts"])
                except (KeyError, TypeError):
                    return None
                if position > 0 or not variant.get("found"):  # else nothing changes
                    variant["found"] = time.time()  # a content that came back: keep it
                    self._write(path, [variant, *variants[:position], *variants[position + 1 :]])
                return facts
        return None

    def _variants(self, path: Path) -> list[dict]:
        try:
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                entry = json.load(handle)
        except (OSError, EOFError, ValueError):
            return []
        if not isinstance(entry, dict):
            return []
        variants = entry.get("variants", [entry])  # an entry of one variant, as first written
        return [v for v in variants if isinstance(v, dict)] if isinstance(variants, list) else []

    def put(self, job: TuJob, facts: TuFacts) -> None:
        if not facts.ok:
            return  # a failed TU is tried again next time: its cause may be fixed meanwhile
        closure = {file: self.hashes.of(file) for file in facts.closure}
        if any(sha is None for sha in closure.values()):
            return  # a file it read is gone already: nothing to keep
        path = self._path(job_key(job))
        older = [v for v in self._variants(path) if v.get("closure") != closure]
        older.sort(key=lambda v: -float(v.get("found") or 0))  # stable: found, then newest
        self._write(path, [{"closure": closure, "facts": facts.as_dict()}, *older])

    def _write(self, path: Path, variants: list[dict]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        variants = variants[:VARIANTS]
        text = json.dumps({"variants": variants})
        durable.write_atomic(path, gzip.compress(text.encode("utf-8"), compresslevel=3))
