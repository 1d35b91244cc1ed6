"""What a module-level statement does with a name it mentions: call it while the module
is imported, bind module names to it, or only pass it along.

The impact walk asks this when a module is reached because its top-level code names a
changed definition (``references`` from the module node). The answer is read from the
facts extraction kept for the statement (``indexer.python.statement_facts``):

- the statement calls it (``_TABLE = build_table()``): importing the module runs the
  changed code, so everything importing the module is affected; unless the changed code
  sits in a function or class the called one only defines and returns
  (``Seq = as_seq_cls_model(Llama)`` runs none of the methods of the class it makes):
  then it is bound, as below;
- the statement binds names (``cached = lru_cache(get_tokenizer)``): the users of those
  names are affected, not every user of the module;
- it registers it as an op (``direct_register_custom_op(op_name="x", op_func=f)``, a
  harness's ``[python] op_registrars``): it runs where ``torch.ops.<ns>.x(...)`` is called;
- names bound so are followed through the module's later top-level statements
  (``_ALL = {**_TEXT_MODELS}``, then ``ModelRegistry = Registry(_ALL)``): what they bind
  from them is affected too;
- it does neither (``add_docstr(torch.atan2, ...)``): a compiled op passed along is not
  run by it; a Python definition passed along may be registered somewhere and run later,
  so the module counts as run at import (the conservative reading).

A line in no kept statement (a decorator, a base class, a file that did not parse)
counts as run at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from indexer.query.index import Index
from indexer.query.python_facts import module_statements


@dataclass(frozen=True)
class StatementUse:
    run_at_import: bool  # importing the module may run the named code
    names: frozenset[str]  # module names bound to it (when not run at import)
    op_name: str | None = None  # the op it is registered as (run where that op is called)
    # ``Cls.attr`` it is installed as (``SparseTensor.partition = partition``): run where
    # ``.attr`` is called or ``Cls.attr`` named, not by every importer of the module.
    attribute: str | None = None


RUN = StatementUse(True, frozenset())
Statement = tuple[int, int, dict[str, Any]]


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
        """How the top-level statement at ``line`` of the file uses ``name``.

        ``compiled``: the name is an op or a binding (running it needs a call).
        ``registrars``: names of functions that register a Python function as an op.
        ``deferred``: whether calling ``name`` runs none of the changed code
        (``indexer.select.deferral``), asked only of a statement that calls it.
        """
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
