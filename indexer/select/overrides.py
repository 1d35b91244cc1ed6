"""Virtual dispatch in Python: a method runs wherever a method it overrides is called.

``layer.quant_method.apply(layer, x)`` in vLLM's linear.py calls whichever ``apply`` the
configured quantization method defines; the file sees only the base class
(``LinearMethodBase``). So a reached method ``C.m`` also reaches each ancestor's ``m``
(``B.m``): the resolved calls of ``B.m`` and the untyped ``obj.m()`` calls in files that
can see ``B`` are possible calls of ``C.m``. The step's evidence is the ``class C(B)``
line that makes the override.

Ancestors come from the ``bases`` a class node records (dotted names as written,
expanded through the file's imports) resolved to classes in the index; bases outside it
(``torch.nn.Module`` seen from vLLM) end the climb.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from indexer.graph.vocabulary import NodeKind

if TYPE_CHECKING:
    from indexer.query.index import Index

OVERRIDES = "overrides"  # C.m -> B.m: a call of B.m may run C.m
PYTHON_CLASS = NodeKind.PYTHON_CLASS.value
PYTHON_FUNCTION = NodeKind.PYTHON_FUNCTION.value


class ClassHierarchy:
    """Ancestor lookups over one index, cached per class."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._bases: dict[int, list[tuple[int, int | None, int]]] = {}
        self._methods: dict[tuple[int, str], tuple[int, int] | None] = {}
        self._value_methods: dict[int, frozenset[str]] = {}
        self._autograd: dict[int, bool] = {}

    def _direct_bases(self, class_id: int) -> list[tuple[int, int | None, int]]:
        """(base class id, file id, line) of each base of ``class_id`` found in the index."""
        if class_id in self._bases:
            return self._bases[class_id]
        conn = self.index.conn
        row = conn.execute(
            "SELECT attrs, file_id, line FROM nodes WHERE id = ?", (class_id,)
        ).fetchone()
        found: list[tuple[int, int | None, int]] = []
        if row is not None and row[0]:
            names = json.loads(row[0]).get("bases") or ()
            for name in names:
                base = conn.execute(
                    "SELECT id FROM nodes WHERE qualname = ? AND kind = ?", (name, PYTHON_CLASS)
                ).fetchone()
                if base is None:
                    continue
                # The `class C(B)` reference is the evidence; the class line if it is absent.
                edge = conn.execute(
                    "SELECT file_id, line FROM edges WHERE src_id = ? AND dst_id = ?"
                    " AND kind = 'references' LIMIT 1",
                    (class_id, base[0]),
                ).fetchone()
                file_id, line = edge if edge is not None else (row[1], row[2])
                found.append((base[0], file_id, line))
        self._bases[class_id] = found
        return found

    def autograd_function(self, class_id: int) -> bool:
        """Whether the class is an autograd function: it or an indexed ancestor names a base
        called ``Function`` or ``*Function`` (``torch.autograd.Function``,
        ``InplaceFunction``), whose ``apply`` runs its ``forward``, ``setup_context``,
        ``backward``, ``jvp`` and ``vmap``."""
        if class_id not in self._autograd:
            self._autograd[class_id] = False  # a cycle in the bases ends here
            row = self.index.conn.execute("SELECT attrs FROM nodes WHERE id = ?", (class_id,))
            attrs = (row.fetchone() or (None,))[0]
            bases = json.loads(attrs).get("bases") or () if attrs else ()
            self._autograd[class_id] = any(
                base.rsplit(".", 1)[-1].endswith("Function") for base in bases
            ) or any(self.autograd_function(base) for base, _, _ in self._direct_bases(class_id))
        return self._autograd[class_id]

    def value_methods(self, class_id: int) -> frozenset[str]:
        """Method names the class or an ancestor hands out as values (``return
        self.forward_cuda``, recorded by the extractor as ``value_methods``): whichever
        override an instance has runs through the instance, not through a call by name."""
        if class_id in self._value_methods:
            return self._value_methods[class_id]
        self._value_methods[class_id] = frozenset()  # a cycle in the bases ends here
        row = self.index.conn.execute("SELECT attrs FROM nodes WHERE id = ?", (class_id,))
        attrs = (row.fetchone() or (None,))[0]
        names = set(json.loads(attrs).get("value_methods") or ()) if attrs else set()
        for base, _, _ in self._direct_bases(class_id):
            names |= self.value_methods(base)
        self._value_methods[class_id] = frozenset(names)
        return self._value_methods[class_id]

    def _method(self, class_id: int, name: str) -> tuple[int, int] | None:
        """(id, file id) of the method ``name`` the class defines, if it does; asked once
        per class and name (methods of one class climb the same bases)."""
        key = (class_id, name)
        if key not in self._methods:
            conn = self.index.conn
            qualname = conn.execute("SELECT qualname FROM nodes WHERE id = ?", (class_id,))
            self._methods[key] = conn.execute(
                "SELECT id, file_id FROM nodes WHERE qualname = ? AND kind = ?",
                (f"{qualname.fetchone()[0]}.{name}", PYTHON_FUNCTION),
            ).fetchone()
        return self._methods[key]

    def overridden(self, method_id: int) -> list[tuple[int, int, int | None, int]]:
        """(ancestor method id, its file id, evidence file id, evidence line) of the nearest
        definition of the same name along each path up the bases of ``method_id``'s class;
        the evidence is the ``class C(B)`` line of the first step up."""
        conn = self.index.conn
        row = conn.execute(
            "SELECT name, parent_id FROM nodes WHERE id = ? AND kind = ?",
            (method_id, PYTHON_FUNCTION),
        ).fetchone()
        if row is None or row[1] is None:
            return []
        name, owner = row
        found: list[tuple[int, int, int | None, int]] = []
        seen = {owner}
        stack = [(base, file_id, line) for base, file_id, line in self._direct_bases(owner)]
        while stack:
            class_id, file_id, line = stack.pop()
            if class_id in seen:
                continue
            seen.add(class_id)
            method = self._method(class_id, name)
            if method is not None:
                # B.m, once reached, climbs on from its own class with its own evidence.
                found.append((method[0], method[1], file_id, line))
                continue
            stack += [(base, file_id, line) for base, _, _ in self._direct_bases(class_id)]
        return found
