"""Repo-relative path helpers: glob matching with ``**`` and language by file name."""

from __future__ import annotations

import re
from functools import lru_cache

# Objective-C++ (.mm: PyTorch's MPS kernels) is indexed as C++: its own syntax is written
# as C++ before parsing (indexer/cpp/preprocess.py).
OBJC_SUFFIXES = (".mm",)
CPP_SUFFIXES = frozenset(
    {".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".inl", *OBJC_SUFFIXES}
)
CUDA_SUFFIXES = frozenset({".cu", ".cuh"})
HEADER_SUFFIXES = frozenset({".h", ".hpp", ".hh", ".hxx", ".cuh", ".inl"})


def is_utf8(path: str) -> bool:
    """Whether a path read from the file system (undecodable bytes kept as surrogates,
    as ``os`` does) is valid UTF-8: what the index's text columns can store."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(path: str) -> str:
    """``path`` as text any output can carry: the bytes of a name that is not UTF-8
    shown escaped (``b\\xff.py``), a valid name unchanged."""
    if is_utf8(path):
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def language_of(path: str) -> str:
    """The language an extractor keys on: ``cpp``, ``cuda``, ``python``, ``yaml`` or ``other``."""
    suffix = path[path.rfind(".") :].lower() if "." in path.rsplit("/", 1)[-1] else ""
    if suffix in CUDA_SUFFIXES:
        return "cuda"
    if suffix in CPP_SUFFIXES:
        return "cpp"
    if suffix in (".py", ".pyi"):
        return "python"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    return "other"


def is_header(path: str) -> bool:
    return any(path.endswith(suffix) for suffix in HEADER_SUFFIXES)


@lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a repo glob: ``**`` spans directories, ``*`` and ``?`` stay in one segment.

    A pattern with no ``/`` matches the file name at any depth, as in .gitignore.
    """
    if "/" not in pattern:
        pattern = "**/" + pattern
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(path: str, pattern: str) -> bool:
    """Whether repo-relative ``path`` matches ``pattern``; a directory pattern ``d/`` covers d/**."""
    if pattern.endswith("/"):
        pattern += "**"
    return _glob_regex(pattern).match(path) is not None


def matches_any(path: str, patterns: list[str] | tuple[str, ...]) -> str | None:
    """The first pattern ``path`` matches, or None."""
    if _any_regex(tuple(patterns)).match(path) is None:
        return None  # one regex for all: most paths of a tree match no exclude
    for pattern in patterns:
        if glob_match(path, pattern):
            return pattern
    return None


@lru_cache(maxsize=128)
def _any_regex(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching what any of ``patterns`` (repo globs) matches."""
    if not patterns:
        return re.compile(r"(?!)")
    return re.compile(
        "|".join(f"(?:{_glob_regex(p + '**' if p.endswith('/') else p).pattern})" for p in patterns)
    )


def under_any(path: str, directories: list[str] | tuple[str, ...]) -> bool:
    """Whether ``path`` lies in one of ``directories`` (``""`` or ``"."`` is the whole tree)."""
    for directory in directories:
        directory = directory.strip("/")
        if directory in ("", ".") or path == directory or path.startswith(directory + "/"):
            return True
    return False
