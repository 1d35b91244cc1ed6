"""The registry code's vocabulary and helpers are defined once (docs/graph.md): the node
and edge kinds come from indexer/graph/vocabulary.py, the ("module", "Class") reading is
the extractor's, and a table file is parsed once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.python import extractor, registries
from indexer.workspace import Workspace
from tests.helpers import make_fixture_repo

PACKAGE = Path(__file__).resolve().parent.parent / "indexer"
KINDS = {NodeKind.REGISTRY_ENTRY.value, EdgeKind.REGISTERS.value}


def test_the_registry_kinds_are_spelled_only_in_the_vocabulary() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "graph" / "vocabulary.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in KINDS:
                spelled.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r}")
    assert spelled == []


def test_registry_tables_read_module_class_pairs_as_the_extractor_does() -> None:
    assert not hasattr(extractor, "_string_pair")
    assert extractor.string_pair is registries.string_pair
    pair = ast.parse('("llama", "LlamaForCausalLM")', mode="eval").body
    assert registries.string_pair(pair) == ("llama", "LlamaForCausalLM")


def test_a_registry_table_file_is_parsed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """regext's method table imports its configs inside the function: reading those
    imports used the extractor's parse, not a second one of the file."""
    repo = make_fixture_repo("regext", tmp_path / "regext")
    table = (repo / "regext/quantization/__init__.py").read_bytes()
    parses = []
    real = ast.parse

    def counted(source, *args, **kwargs):
        if source in (table, table.decode()):
            parses.append(kwargs.get("filename") or (args[0] if args else "<unknown>"))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counted)
    build_index(Workspace.resolve(repo), jobs=1, show_progress=False)
    assert len(parses) == 1, parses
