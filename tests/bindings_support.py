"""Shared by the bindings tests: one built index of a fixture tree per test module."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.query.index import Index, Node
from indexer.workspace import Workspace
from tests.helpers import make_fixture_repo


def build_fixture(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, Index]:
    """Copy a fixture tree to a temporary git repo and index it in a private cache."""
    base = tmp_path_factory.mktemp(f"{name}-bindings")
    repo = make_fixture_repo(name, base / name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHTALK_CACHE_DIR", str(base / "cache"))
        patch.setenv("TORCHTALK_CONFIG_DIR", str(base / "config"))
        result = build_index(Workspace.resolve(repo), show_progress=False)
    return repo, Index(result.db_path)


def one(index: Index, qualname: str, kind: str) -> Node:
    nodes = [node for node in index.find(qualname, kinds=[kind]) if node.qualname == qualname]
    assert len(nodes) == 1, f"expected one {kind} {qualname}, found {nodes}"
    return nodes[0]


def out_targets(index: Index, node: Node, kind: str) -> dict[str, list[dict]]:
    """qualname of each target of ``kind`` edges out of ``node`` -> the edges' attrs."""
    targets: dict[str, list[dict]] = {}
    for edge in index.out_edges(node.id, [kind]):
        targets.setdefault(index.node(edge.dst).qualname, []).append(
            {**edge.attrs, "evidence": edge.evidence}
        )
    return targets
