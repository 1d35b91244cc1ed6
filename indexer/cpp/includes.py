"""``#include`` lines: refs from the extractor, resolved to files of the tree at link time.

Resolution, first rule that finds a file wins: a quoted include relative to the including
file's directory; the path from the source root; the path under an include root (the
harness's C++ source directories and ``aten/src``); a unique file whose path ends with
the included path. Several files ending with it are all kept (the linker marks the edges
ambiguous). System headers stay unresolved, which is expected.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Iterable, Iterator

from indexer.graph.facts import FILE_NODE, FileFacts
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.link.symbols import Ref, Resolution, SymbolTable

SCHEME = "include"
DEFAULT_ROOTS = ("aten/src",)


def add_include_ref(facts: FileFacts, written: str, line: int, roots: list[str]) -> None:
    """One ref for ``#include "x.h"`` / ``#include <x.h>`` (``written`` keeps its quotes)."""
    system = written.startswith("<")
    path = written.strip('<>" \t')
    if path:
        facts.add_ref(
            FILE_NODE, EdgeKind.INCLUDES.value, SCHEME, path, line, system=system, roots=roots
        )


def include_roots(cpp_dirs: Iterable[str]) -> list[str]:
    roots = [d.strip("/") for d in cpp_dirs if d.strip("/") not in ("", ".")]
    return roots + [root for root in DEFAULT_ROOTS if root not in roots]


def _normal(path: str) -> str | None:
    normal = posixpath.normpath(path)
    return None if normal.startswith(("../", "/")) or normal in ("..", ".") else normal


def resolve(refs: list[Ref], symbols: SymbolTable) -> Iterator[Resolution]:
    file_node: dict[str, int] = {}
    by_basename: dict[str, list[str]] = defaultdict(list)
    file_kind = NodeKind.FILE.value  # read once: an enum's value is a property
    for node_id, _, path, _ in symbols.of_kind_rows(file_kind):
        file_node[path] = node_id
        by_basename[path.rsplit("/", 1)[-1]].append(path)
    file_src: dict[int, str] = {}
    for ref in refs:
        includer = file_src.get(ref.file_id)
        if includer is None:
            includer = file_src[ref.file_id] = symbols.paths.get(ref.file_id, "")
        for path in _candidates(ref, includer, file_node, by_basename):
            yield Resolution(ref.id, file_node[path])


def _candidates(
    ref: Ref, includer: str, file_node: dict[str, int], by_basename: dict[str, list[str]]
) -> list[str]:
    target = ref.target
    if not ref.attrs.get("system"):
        local = _normal(posixpath.join(posixpath.dirname(includer), target))
        if local in file_node:
            return [local]
    direct = _normal(target)
    if direct is None:
        return []
    if direct in file_node:
        return [direct]
    for root in ref.attrs.get("roots", DEFAULT_ROOTS):
        rooted = f"{root}/{direct}"
        if rooted in file_node:
            return [rooted]
    suffix = "/" + direct
    return [
        path for path in by_basename.get(direct.rsplit("/", 1)[-1], ()) if path.endswith(suffix)
    ]
