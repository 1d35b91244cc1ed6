"""What a module's top-level statement does with a reached name, read from the facts
extraction kept (``indexer.python.statement_facts``): run it at import, bind module names
to it, register it as an op, or only pass it along; and whether calling a reached Python
definition runs the reached code at all (``Deferral``). (docs/selection.md, "Facts
judged at extraction")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.query.index import Index
from indexer.query.python_facts import module_statements

if TYPE_CHECKING:
    from indexer.query.index import Node
    from indexer.select.reach import Reach

PYTHON_FUNCTION = NodeKind.PYTHON_FUNCTION.value
PYTHON_CLASS = NodeKind.PYTHON_CLASS.value
CONTAINS = EdgeKind.CONTAINS.value
USES = (EdgeKind.CALLS.value, EdgeKind.REFERENCES.value, EdgeKind.CONTAINS.value)
CONSTRUCTION = frozenset({"__init__", "__new__", "__post_init__"})  # what C(...) runs
MAX_DEPTH = 8  # definitions followed to decide that a call runs none of the changed code
Statement = tuple[int, int, dict[str, Any]]


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
                f" AND kind IN ({','.join('?' * len(USES))})",
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


@dataclass(frozen=True)
class StatementUse:
    run_at_import: bool  # importing the module may run the named code
    names: frozenset[str]  # module names bound to it (when not run at import)
    op_name: str | None = None  # the op it is registered as (run where that op is called)
    # ``Cls.attr`` it is installed as (``SparseTensor.partition = partition``): run where
    # ``.attr`` is called or ``Cls.attr`` named, not by every importer of the module.
    attribute: str | None = None


class ModuleStatements:
    """The kept facts of the top-level statements of an index's Python files, read once
    per file per walker."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._files: dict[int, list[Statement]] = {}
        self._derived: dict[tuple[int, frozenset[str]], StatementUse] = {}

    def _statements(self, file_id: int) -> list[Statement]:
        if file_id not in self._files:
            self._files[file_id] = module_statements(self.index.conn, file_id)
        return self._files[file_id]

    def _statement_at(self, file_id: int, line: int) -> dict[str, Any] | None:
        return next(
            (facts for first, last, facts in self._statements(file_id) if first <= line <= last),
            None,
        )

    def use(
        self,
        file_id: int,
        line: int,
        name: str,
        compiled: bool,
        registrars: frozenset[str] = frozenset(),
        deferred: Callable[[], bool] = lambda: False,
    ) -> StatementUse:
        """How the top-level statement at ``line`` of the file uses ``name`` (``compiled``:
        an op or binding, run only by a call; ``registrars``: functions registering an op;
        ``deferred``: whether calling ``name`` runs none of the changed code)."""
        facts = self._statement_at(file_id, line)
        if facts is None:
            return RUN  # a decorator or a base class: registration or inheritance
        calls = False
        registered = None
        for callee, typed, *registration in facts.get("calls", ()):
            if callee == name and compiled and typed:
                continue  # SKIPLIST.add(x) on a module-level set: not the op
            if callee == name:
                calls = True
            if callee in registrars and registered is None and registration:
                passed, op = registration
                registered = op if name in passed else None
        if calls and not deferred():
            return RUN
        if registered is not None:
            return StatementUse(False, frozenset(), registered)
        installed = facts.get("install")
        if installed is not None and installed[1] == name:
            return StatementUse(False, frozenset(), None, installed[0])
        if facts.get("mutates"):
            return RUN  # stored into a registry or an object: run later, by anyone
        names = frozenset(facts.get("binds", ()))
        if names:
            return StatementUse(False, names)
        return StatementUse(not compiled, frozenset())

    def derived(self, file_id: int, names: frozenset[str]) -> StatementUse:
        """``names`` and the module names later top-level statements bind from them,
        transitively (``_ALL = {**_TEXT_MODELS}``, then ``ModelRegistry = Registry(_ALL)``):
        their users are affected too. A statement reading one that binds no module name
        (a call, a store into an object) counts as run at import."""
        key = (file_id, names)
        if key not in self._derived:
            self._derived[key] = self._derive(file_id, names)
        return self._derived[key]

    def _derive(self, file_id: int, names: frozenset[str]) -> StatementUse:
        found = set(names)
        grown = True
        while grown:
            grown = False
            for _, _, facts in self._statements(file_id):
                if not found.intersection(facts.get("reads", ())):
                    continue
                bound = set(facts.get("binds", ()))
                if facts.get("mutates") or not bound:
                    return RUN
                if not bound <= found:
                    found |= bound
                    grown = True
        return StatementUse(False, frozenset(found))


RUN = StatementUse(True, frozenset())
