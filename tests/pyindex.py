"""Helpers for the Python-index tests: one fixture index built per test module."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.query.index import Edge, Index, Node
from tests.helpers import build_private_index, commit_all, make_fixture_repo


def build_fixture(
    factory: pytest.TempPathFactory, name: str, extra: dict[str, str] | None = None
) -> tuple[Path, Index]:
    """Copy a fixture tree (plus ``extra`` files), commit it, index it in a private cache."""
    base = factory.mktemp(f"{name}-index")
    repo = make_fixture_repo(name, base / name)
    if extra:
        for path, text in extra.items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text, encoding="utf-8")
        commit_all(repo, "extra files")
    return repo, build_private_index(repo, base)


def node(index: Index, qualname: str, kind: str | None = None) -> Node:
    found = [n for n in index.find(qualname, [kind] if kind else None) if n.qualname == qualname]
    assert len(found) == 1, (qualname, kind, found)
    return found[0]


def edges_to(index: Index, src: Node, kind: str) -> dict[str, Edge]:
    """Out-edges of ``src`` of one kind, keyed by the target's qualname."""
    return {index.node(edge.dst).qualname: edge for edge in index.out_edges(src.id, [kind])}


def targets(index: Index, src: Node, kind: str) -> set[str]:
    return set(edges_to(index, src, kind))
