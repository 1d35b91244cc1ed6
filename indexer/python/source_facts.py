"""The walk's questions about Python source, answered once at extraction.

The impact walk needs three judgments of a file's text (docs/selection.md, "Facts judged
at extraction"); they are made here, from the tree the extractor parsed, and kept in the
index, so that a selection reads no source:

- on each ``references`` ref, ``named_only`` when its line names the target without
  running it (``indexer.python.call_facts``);
- on each function node, ``nested``: the lines of functions and lambdas nested in it
  (calling it runs none of them);
- the facts of each module-level statement of a library module
  (``indexer.python.statement_facts``).
"""

from __future__ import annotations

import ast

from indexer.graph.facts import FileFacts
from indexer.python.call_facts import runs_named
from indexer.python.pysource import FUNCTIONS
from indexer.python.receivers import Receivers
from indexer.python.statement_facts import module_statements, nested_spans


def judge_source(
    facts: FileFacts,
    tree: ast.Module,
    text: str,
    definitions: list[tuple[ast.AST, int]],
    library: bool,
) -> None:
    """Write the judgments of one parsed file into its ``facts``; ``definitions``: each
    definition's ast and node; ``library``: the file's module is library code (its
    top-level statements are asked about; a test file's are not)."""
    lines = text.splitlines()
    path = facts.path
    receivers = Receivers(lambda _path: tree, lambda _path: lines)
    for ref in facts.refs:
        if ref.kind != "references" or not ref.target:
            continue
        node = facts.nodes[ref.src]
        where = (node.line, node.end_line)
        if not runs_named(lines, receivers, path, ref.line, ref.target, where):
            ref.attrs["named_only"] = True
    for definition, index in definitions:
        if isinstance(definition, FUNCTIONS):
            spans = nested_spans(definition)
            if spans:
                facts.nodes[index].attrs["nested"] = spans
    if library:
        facts.statements = module_statements(tree, path, receivers)
