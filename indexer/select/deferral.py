"""Whether calling a reached Python definition runs the reached code.

A module's top-level call of a reached definition runs the changed code at import (then
every importer is affected) only if the call itself runs it. It does not when

- the definition is a function whose every use of reached code sits in a function
  nested in it: ``Seq = as_seq_cls_model(Llama)`` makes a class whose methods call the
  changed code, and runs none of them;
- the definition is a class reached only through methods that constructing it does not
  run (``identity_transform = ComposeTransform([])``, with ``Transform.__call__``
  changed), or through base classes for which this holds.

Anything else counts as run (the conservative reading). The answer is over the walk's
reach so far; the walk asks again when its frontier runs out, since later steps may
reach a constructor (``ImpactWalker.walk``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.select.bridges import placeholders

if TYPE_CHECKING:
    from indexer.query.index import Index, Node
    from indexer.select.reach import Reach

PYTHON_FUNCTION = NodeKind.PYTHON_FUNCTION.value
PYTHON_CLASS = NodeKind.PYTHON_CLASS.value
CONTAINS = EdgeKind.CONTAINS.value
USES = (EdgeKind.CALLS.value, EdgeKind.REFERENCES.value, EdgeKind.CONTAINS.value)
CONSTRUCTION = frozenset({"__init__", "__new__", "__post_init__"})  # what C(...) runs
MAX_DEPTH = 8  # definitions followed to decide that a call runs none of the changed code


class Deferral:
    """Answers "does calling this run the reached code?" over one index."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._used: dict[int, list[tuple[int, int, str]]] = {}  # a definition's uses

    def _uses(self, definition: int) -> list[tuple[int, int, str]]:
        """(dst, line, kind) of what ``definition`` calls, names or contains: asked for
        the same definitions by every walk that reaches them."""
        if definition not in self._used:
            self._used[definition] = self.index.conn.execute(
                f"SELECT dst_id, line, kind FROM edges WHERE src_id = ?"
                f" AND kind IN ({placeholders(USES)})",
                (definition, *USES),
            ).fetchall()
        return self._used[definition]

    def deferred(self, reach: Reach, named: Node, seen: frozenset[int] = frozenset()) -> bool:
        """True when calling ``named`` (a function or a class) runs none of the code the
        walk has reached; False when it may."""
        if named.kind not in (PYTHON_FUNCTION, PYTHON_CLASS):
            return False
        if named.id in seen or len(seen) > MAX_DEPTH:
            return False
        reached = reach.steps.get(named.id)
        if reached is None or reached.src != named.id:
            return False  # reached otherwise than through its own code: it may run it
        seen = seen | {named.id}
        uses = [*self._uses(named.id), (reached.dst, reached.line, reached.kind)]
        # (the last: the step that reached it, a bridged one having no edge)
        for dst, line, kind in uses:
            if dst not in reach.steps:
                continue
            if named.kind == PYTHON_FUNCTION:
                if _nested(named, line):
                    continue  # in a function it only defines
                if not self._deferred_dst(reach, dst, seen):
                    return False
            elif kind == CONTAINS:
                if self.index.node(dst).name in CONSTRUCTION:
                    return False
            elif not (self._is_base(named, dst) and self._deferred_dst(reach, dst, seen)):
                return False  # the class body uses it at definition, or a base runs it
        return True

    def _deferred_dst(self, reach: Reach, dst: int, seen: frozenset[int]) -> bool:
        if reach.kind.get(dst) not in (PYTHON_FUNCTION, PYTHON_CLASS):
            return False
        return self.deferred(reach, self.index.node(dst), seen)

    def _is_base(self, named: Node, dst: int) -> bool:
        qualname = self.index.node(dst).qualname
        return qualname in (named.attrs.get("bases") or ())


def _nested(function: Node, line: int) -> bool:
    """Whether ``line`` lies in a function or lambda nested in ``function`` (the spans
    extraction kept: ``indexer.python.statement_facts.nested_spans``)."""
    return any(first <= line <= last for first, last in function.attrs.get("nested") or ())
