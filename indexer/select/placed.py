"""What placing one changed file yields, and the span lookups placement uses."""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
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
    _placed: set[int] = field(default_factory=set, repr=False)
    _placed_upto: int = field(default=0, repr=False)

    def placed_ids(self) -> set[int]:
        """The node ids of the entities so far. Entities are only ever appended, so the
        set is extended with the new ones rather than rebuilt: placing a file of N
        definitions stays linear."""
        for entity in self.entities[self._placed_upto :]:
            self._placed.update(entity.node_ids)
        self._placed_upto = len(self.entities)
        return self._placed


def innermost(nodes: list, line: int):
    best = None
    for node in nodes:
        if node.line <= line <= node.end_line and (
            best is None or node.end_line - node.line < best.end_line - best.line
        ):
            best = node
    return best


def innermost_each(nodes: Iterable, lines: Iterable[int]) -> dict[int, object]:
    """``innermost(nodes, line)`` for every line at once, in one sweep: O((N + L) log N)
    where a lookup per line costs O(N) (a new file of N functions changes N lines)."""
    ordered = sorted(enumerate(nodes), key=lambda item: item[1].line)
    found: dict[int, object] = {}
    open_spans: list[tuple[int, int, object]] = []  # (end_line, list position, node): a heap
    next_start = 0
    for line in sorted(set(lines)):
        while next_start < len(ordered) and ordered[next_start][1].line <= line:
            position, node = ordered[next_start]
            heapq.heappush(open_spans, (node.end_line, position, node))
            next_start += 1
        while open_spans and open_spans[0][0] < line:
            heapq.heappop(open_spans)
        # Every span left holds the line; as many as nest there (a handful). The
        # shortest wins, the earliest listed among equals, as in ``innermost``.
        best = min(
            open_spans, key=lambda span: (span[2].end_line - span[2].line, span[1]), default=None
        )
        found[line] = best[2] if best is not None else None
    return found


def lines_within(lines: Sequence[int], first: int, last: int) -> Sequence[int]:
    """The lines of sorted ``lines`` in [first, last]."""
    return lines[bisect_left(lines, first) : bisect_right(lines, last)]


def new_span(hunk) -> tuple[int, int]:
    """First and last line of a hunk's new side (for a pure deletion, the lines around
    the gap: the body holding both holds it)."""
    if hunk.new_count:
        return hunk.new_start, hunk.new_start + hunk.new_count - 1
    return hunk.new_start + 1, hunk.new_start
