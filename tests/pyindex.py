"""Helpers for the Python-index tests: one fixture index built per test module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.query.index import Edge, Index, Node
from indexer.workspace import Workspace
from tests.helpers import commit_all, make_fixture_repo


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
    saved = {key: os.environ.get(key) for key in ("TORCHTALK_CACHE_DIR", "TORCHTALK_CONFIG_DIR")}
    os.environ["TORCHTALK_CACHE_DIR"] = str(base / "cache")
    os.environ["TORCHTALK_CONFIG_DIR"] = str(base / "config")
    try:
        result = build_index(Workspace.resolve(repo), show_progress=False)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return repo, Index(result.db_path)


def node(index: Index, qualname: str, kind: str | None = None) -> Node:
    found = [n for n in index.find(qualname, [kind] if kind else None) if n.qualname == qualname]
    assert len(found) == 1, (qualname, kind, found)
    return found[0]


def edges_to(index: Index, src: Node, kind: str) -> dict[str, Edge]:
    """Out-edges of ``src`` of one kind, keyed by the target's qualname."""
    return {index.node(edge.dst).qualname: edge for edge in index.out_edges(src.id, [kind])}


def targets(index: Index, src: Node, kind: str) -> set[str]:
    return set(edges_to(index, src, kind))
