"""What placing one changed file yields, and the span lookups placement uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from indexer.graph.vocabulary import NodeKind
from indexer.select.model import ChangedFile, Entity

FUNCTION_KINDS = frozenset({NodeKind.CPP_FUNCTION.value, NodeKind.CUDA_KERNEL.value})
PYTHON_DEF_KINDS = frozenset(
    {
        NodeKind.PYTHON_FUNCTION.value,
        NodeKind.PYTHON_CLASS.value,
        NodeKind.OPINFO.value,
        NodeKind.TEST_FUNCTION.value,
        NodeKind.TEST_CLASS.value,
        NodeKind.TEST_UTILITY.value,
    }
)
MODULE_KINDS = frozenset({NodeKind.PYTHON_MODULE.value, NodeKind.TEST_FILE.value})
MEMBERS_SHOWN = 20  # qualnames listed for a group entity in reports


@dataclass
class FilePlacement:
    changed: ChangedFile
    entities: list[Entity] = field(default_factory=list)
    test_files: dict[str, str] = field(default_factory=dict)  # selected as such -> why
    everything: str | None = None  # why this file selects every test
    notes: list[str] = field(default_factory=list)
    mapped: set[tuple] = field(default_factory=set)  # base definitions already placed


def innermost(nodes: list, line: int):
    best = None
    for node in nodes:
        if node.line <= line <= node.end_line and (
            best is None or node.end_line - node.line < best.end_line - best.line
        ):
            best = node
    return best


def new_span(hunk) -> tuple[int, int]:
    """First and last line of a hunk's new side (for a pure deletion, the lines around
    the gap: the body holding both holds it)."""
    if hunk.new_count:
        return hunk.new_start, hunk.new_start + hunk.new_count - 1
    return hunk.new_start + 1, hunk.new_start
