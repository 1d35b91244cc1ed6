"""Which files of a source tree a harness indexes, and in which role."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from indexer.harness import Manifest
from indexer.paths import glob_match, language_of, matches_any, under_any


@dataclass(frozen=True, slots=True)
class SourceEntry:
    path: str  # repo-relative
    language: str
    size: int


def is_test_file(path: str, manifest: Manifest) -> bool:
    if not under_any(path, manifest.list("tests", "dirs")):
        return False
    name = path.rsplit("/", 1)[-1]
    return any(glob_match(name, pattern) for pattern in manifest.list("tests", "patterns"))


def wanted_language(path: str, manifest: Manifest) -> str | None:
    """The language ``path`` is indexed as under ``manifest``, or None if it is not indexed."""
    if matches_any(path, manifest.list("sources", "exclude")):
        return None
    language = language_of(path)
    if language in ("cpp", "cuda"):
        return language if under_any(path, manifest.list("sources", "cpp")) else None
    if language == "python":
        roots = manifest.list("sources", "python") + manifest.list("tests", "dirs")
        return language if under_any(path, roots) else None
    if language == "yaml":
        yamls = manifest.list("bindings", "native_functions") + manifest.list(
            "bindings", "derivatives"
        )
        return language if path in yamls else None
    return None


def discover(source: Path, manifest: Manifest) -> list[SourceEntry]:
    """Every indexed file under ``source``, sorted by path. Hidden directories are skipped."""
    entries: list[SourceEntry] = []
    excludes = manifest.list("sources", "exclude")
    for dirpath, dirnames, filenames in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and not matches_any(f"{rel_dir}{d}/", excludes)
        )
        for filename in filenames:
            rel = rel_dir + filename
            language = wanted_language(rel, manifest)
            if language is None:
                continue
            full = os.path.join(dirpath, filename)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            entries.append(SourceEntry(rel, language, os.path.getsize(full)))
    entries.sort(key=lambda entry: entry.path)
    return entries
