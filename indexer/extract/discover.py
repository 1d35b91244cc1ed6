"""Which files of a source tree a harness indexes, and in which role."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from indexer.harness import Manifest
from indexer.paths import glob_match, is_utf8, language_of, matches_any, printable, under_any


@dataclass(frozen=True, slots=True)
class SourceEntry:
    path: str  # repo-relative
    language: str
    size: int


def is_test_file(path: str, manifest: Manifest) -> bool:
    rules = _rules(manifest)
    if not under_any(path, rules.test_dirs):
        return False
    name = path.rsplit("/", 1)[-1]
    return any(glob_match(name, pattern) for pattern in rules.test_patterns)


def wanted_language(path: str, manifest: Manifest) -> str | None:
    """The language ``path`` is indexed as under ``manifest``, or None if it is not indexed."""
    rules = _rules(manifest)
    if matches_any(path, rules.exclude):
        return None
    language = language_of(path)
    if language in ("cpp", "cuda"):
        return language if under_any(path, rules.cpp) else None
    if language == "python":
        return language if under_any(path, rules.python) else None
    if language == "yaml":
        return language if path in rules.yamls else None
    return None


@dataclass(frozen=True, slots=True)
class _Rules:
    """The manifest's lists ``wanted_language`` reads, read once per manifest (it is
    asked for every file of a tree)."""

    exclude: tuple[str, ...]
    cpp: tuple[str, ...]
    python: tuple[str, ...]
    yamls: frozenset[str]
    test_dirs: tuple[str, ...]
    test_patterns: tuple[str, ...]


_RULES: dict[int, tuple[Manifest, _Rules]] = {}


def _rules(manifest: Manifest) -> _Rules:
    held = _RULES.get(id(manifest))
    if held is not None and held[0] is manifest:
        return held[1]
    rules = _Rules(
        tuple(manifest.list("sources", "exclude")),
        tuple(manifest.list("sources", "cpp")),
        tuple(manifest.list("sources", "python") + manifest.list("tests", "dirs")),
        frozenset(
            manifest.list("bindings", "native_functions") + manifest.list("bindings", "derivatives")
        ),
        tuple(manifest.list("tests", "dirs")),
        tuple(manifest.list("tests", "patterns")),
    )
    if len(_RULES) > 16:
        _RULES.clear()
    _RULES[id(manifest)] = (manifest, rules)
    return rules


@dataclass(frozen=True, slots=True)
class TreeProblem:
    """A part of the tree the index cannot hold: an unreadable directory, a file name
    that is not UTF-8. Stored in the index meta and shown by ``torchtalk status``."""

    path: str  # repo-relative, printable (an undecodable name escaped)
    problem: str
    directory: bool = False


def _could_hold_indexed(rel_dir: str, manifest: Manifest) -> bool:
    """Whether files under ``rel_dir`` (``a/b``) may be indexed: it lies under, or holds,
    one of the manifest's source, test or registry paths."""
    roots = [
        *manifest.list("sources", "cpp"),
        *manifest.list("sources", "python"),
        *manifest.list("tests", "dirs"),
        *manifest.list("bindings", "native_functions"),
        *manifest.list("bindings", "derivatives"),
    ]
    for root in roots:
        root = root.strip("/")
        if root in ("", ".") or under_any(rel_dir, [root]) or root.startswith(rel_dir + "/"):
            return True
    return False


def discover(
    source: Path, manifest: Manifest, problems: list[TreeProblem] | None = None
) -> list[SourceEntry]:
    """Every indexed file under ``source``, sorted by path. Hidden directories are skipped.

    What cannot be indexed is appended to ``problems`` rather than skipped silently: a
    directory that cannot be listed (its files would be missing from the index) and a
    file whose name is not UTF-8 (the index stores paths as text).
    """
    entries: list[SourceEntry] = []
    excludes = manifest.list("sources", "exclude")
    found = problems if problems is not None else []

    def unreadable(error: OSError) -> None:
        rel = os.path.relpath(error.filename, source).replace(os.sep, "/")
        if rel == ".":
            raise error  # the tree itself: nothing can be indexed
        if _could_hold_indexed(rel, manifest):
            reason = error.strerror or str(error)
            found.append(TreeProblem(printable(rel), f"directory unreadable: {reason}", True))

    for dirpath, dirnames, filenames in os.walk(source, onerror=unreadable):
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
            try:
                found_stat = os.lstat(os.path.join(dirpath, filename))
            except OSError:
                continue
            if not stat.S_ISREG(found_stat.st_mode):  # a link or not a file
                continue
            if not is_utf8(rel):
                found.append(
                    TreeProblem(printable(rel), "file name is not valid UTF-8: not indexed")
                )
                continue
            entries.append(SourceEntry(rel, language, found_stat.st_size))
    entries.sort(key=lambda entry: entry.path)
    found.sort(key=lambda problem: problem.path)
    return entries
