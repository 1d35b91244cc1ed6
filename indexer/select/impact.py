"""From changed entities back to the tests that reach them: reverse reachability.

Edges point from the user to the used, so impact flows backwards along most kinds (a
caller is affected by its callee, an op by its kernel, a test by what it covers). Two
kinds carry impact forwards: a structured kernel ``implements`` its op, and a derivative
entry ``derives`` its op (a changed formula helper reaches the derivative backwards, then
its op forwards).

Python needs care, or one reached class reaches everything:

- a method reaches its class (``contains`` backwards) only if it runs implicitly through
  the class: dunders (``C(...)`` runs ``__init__``), ``forward``, properties. A method
  called by name is reached through the ``obj.m()`` calls naming it, from files that can
  see its class (see ``_method_callers``);
- ``imports`` carries impact only from a module whose import runs changed code (changed
  at module level, or importing such a module). Importing a function runs none of its
  body, and a module that merely names a changed definition affects the users of its
  names (``references`` to it), not everything that imports it.

A decorated function reaches the registry its decorator fills (``@op.register_impl``).
An OpInfo entry reaches the ``@ops`` tests iterating its list through their ``covers``
edges. No depth cap; each node is visited once, so cycles end.

The walk is breadth-first over whole frontiers, one SQL query per 900 nodes, so a
closure of a hundred thousand nodes costs a few hundred queries, not a hundred thousand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.query.index import Index

REVERSE_KINDS = (
    EdgeKind.CALLS.value,
    EdgeKind.LAUNCHES.value,
    EdgeKind.DISPATCHES.value,
    EdgeKind.BINDS.value,
    EdgeKind.DERIVES.value,
    EdgeKind.IMPORTS.value,
    EdgeKind.REFERENCES.value,
    EdgeKind.COVERS.value,
    EdgeKind.INCLUDES.value,
    EdgeKind.EXTERNAL_REF.value,
    EdgeKind.CONTAINS.value,
)
FORWARD_KINDS = (EdgeKind.IMPLEMENTS.value, EdgeKind.DERIVES.value)
CLASS_KINDS = frozenset({NodeKind.PYTHON_CLASS.value, NodeKind.TEST_CLASS.value})
IMPLICIT_METHODS = frozenset({"forward"})  # nn.Module.__call__ runs forward
DECORATED_KINDS = frozenset({NodeKind.PYTHON_FUNCTION.value, NodeKind.PYTHON_CLASS.value})
REGISTERS = "registers"  # a decorated definition -> the registry its decorator fills
RARE_METHOD_DEFINITIONS = 3  # a method name defined this rarely is matched by name alone
PROPERTY_DECORATORS = frozenset({"property", "cached_property", "setter", "getter", "deleter"})
MODULE_KINDS = frozenset(
    {NodeKind.PYTHON_MODULE.value, NodeKind.TEST_FILE.value, NodeKind.FILE.value}
)
_BATCH = 900


@dataclass(frozen=True, slots=True)
class Step:
    """How a node was first reached: the edge, and the node it was reached from."""

    prev: int
    kind: str
    src: int
    dst: int
    file_id: int | None
    line: int


@dataclass
class Reach:
    steps: dict[int, Step | None] = field(default_factory=dict)  # None: a start node
    origin: dict[int, int] = field(default_factory=dict)  # node -> index of its entity
    kind: dict[int, str] = field(default_factory=dict)
    file_id: dict[int, int] = field(default_factory=dict)
    # Modules whose import runs changed code: changed at module level, or importing one
    # that is. A module merely naming a changed definition affects its names' users only.
    import_live: set[int] = field(default_factory=set)

    def chain(self, node_id: int) -> list[Step]:
        """The steps from a start node out to ``node_id``."""
        steps: list[Step] = []
        step = self.steps.get(node_id)
        while step is not None:
            steps.append(step)
            step = self.steps.get(step.prev)
        return steps[::-1]


def _placeholders(values: list) -> str:
    return ",".join("?" * len(values))


class ImpactWalker:
    """Reverse reachability over one index; reusable across walks."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._method_names: dict[str, int] = {}
        self._users_of_file: dict[int, set[int]] = {}

    def _node_rows(self, ids: list[int]) -> list[tuple[int, str, int]]:
        rows = []
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            rows += self.index.conn.execute(
                f"SELECT id, kind, file_id FROM nodes WHERE id IN ({_placeholders(batch)})", batch
            ).fetchall()
        return rows

    def walk(
        self,
        starts: dict[int, int],
        until: Callable[[int], bool] | None = None,
        max_depth: int | None = None,
    ) -> Reach:
        """Everything that reaches the ``starts`` (node id -> entity index).

        ``until(file_id)`` stops the walk as soon as a reached node's file satisfies it
        (to ask only *whether* something is reached); ``max_depth`` caps the hops (None:
        no cap, as selection walks).
        """
        reach = Reach()
        for node_id, kind, file_id in self._node_rows(list(starts)):
            reach.steps[node_id] = None
            reach.origin[node_id] = starts[node_id]
            reach.kind[node_id] = kind
            reach.file_id[node_id] = file_id
            if kind in MODULE_KINDS:
                reach.import_live.add(node_id)
        frontier = list(reach.steps)
        reverse = list(REVERSE_KINDS)
        forward = list(FORWARD_KINDS)
        conn = self.index.conn
        depth = 0
        while frontier and (max_depth is None or depth < max_depth):
            depth += 1
            found: list[tuple[int, Step, str, int]] = []
            explicit = self._explicit_methods(frontier, reach)
            if explicit:
                found += self._method_callers(explicit)
            found += self._registrations(frontier, reach)
            for start in range(0, len(frontier), _BATCH):
                batch = frontier[start : start + _BATCH]
                for src, dst, kind, file_id, line, src_kind, src_file in conn.execute(
                    "SELECT e.src_id, e.dst_id, e.kind, e.file_id, e.line, s.kind, s.file_id"
                    " FROM edges e JOIN nodes s ON s.id = e.src_id"
                    f" WHERE e.dst_id IN ({_placeholders(batch)})"
                    f" AND e.kind IN ({_placeholders(reverse)})",
                    [*batch, *reverse],
                ):
                    if kind == EdgeKind.CONTAINS.value and (
                        src_kind not in CLASS_KINDS or dst in explicit
                    ):
                        continue
                    if kind == EdgeKind.IMPORTS.value and dst not in reach.import_live:
                        continue  # importing a name runs none of its body
                    found.append(
                        (src, Step(dst, kind, src, dst, file_id, line), src_kind, src_file)
                    )
                for src, dst, kind, file_id, line, dst_kind, dst_file in conn.execute(
                    "SELECT e.src_id, e.dst_id, e.kind, e.file_id, e.line, d.kind, d.file_id"
                    " FROM edges e JOIN nodes d ON d.id = e.dst_id"
                    f" WHERE e.src_id IN ({_placeholders(batch)})"
                    f" AND e.kind IN ({_placeholders(forward)})",
                    [*batch, *forward],
                ):
                    if kind == EdgeKind.DERIVES.value and not (
                        reach.kind.get(src) == NodeKind.DERIVATIVE.value
                        and dst_kind == NodeKind.OP.value
                    ):
                        continue
                    found.append(
                        (dst, Step(src, kind, src, dst, file_id, line), dst_kind, dst_file)
                    )
            ops = [n for n in frontier if reach.kind.get(n) == NodeKind.OP.value]
            if ops:
                found += self._dispatcher_callers(ops)
            frontier = []
            for node_id, step, kind, file_id in found:
                if node_id in reach.steps:
                    continue
                reach.steps[node_id] = step
                reach.origin[node_id] = reach.origin[step.prev]
                reach.kind[node_id] = kind
                reach.file_id[node_id] = file_id
                if step.kind == EdgeKind.IMPORTS.value and kind in MODULE_KINDS:
                    reach.import_live.add(node_id)  # importing it runs changed module code
                frontier.append(node_id)
                if until is not None and until(file_id):
                    return reach
        return reach

    def _registrations(self, frontier: list[int], reach: Reach) -> list[tuple[int, Step, str, int]]:
        """A decorated Python function registers itself somewhere (``@op.register_impl``,
        ``@register_decomposition(aten.add)``): whoever calls through that registry runs
        it. The registry is what the decorator names before its last attribute
        (``vllm.ir.ops.rms_norm`` of ``vllm.ir.ops.rms_norm.register_impl``), or an op
        the decorator's arguments name; impact flows forward to it."""
        ids = [n for n in frontier if reach.kind.get(n) in DECORATED_KINDS]
        found = []
        conn = self.index.conn
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            for node_id, line, file_id in conn.execute(
                f"SELECT id, line, file_id FROM nodes WHERE id IN ({_placeholders(batch)})"
                " AND attrs LIKE '%\"decorators\"%'",
                batch,
            ):
                for dst, ref_line, dst_kind, dst_file in conn.execute(
                    "SELECT e.dst_id, e.line, d.kind, d.file_id FROM edges e"
                    " JOIN nodes d ON d.id = e.dst_id"
                    " WHERE e.src_id = ? AND e.line < ? AND d.kind = 'op'",
                    (node_id, line),
                ):
                    step = Step(node_id, REGISTERS, node_id, dst, file_id, ref_line)
                    found.append((dst, step, dst_kind, dst_file))
                for target, ref_line in conn.execute(
                    "SELECT r.target, r.line FROM refs r WHERE r.src_id = ? AND r.line < ?"
                    " AND r.scheme = 'py' AND r.target LIKE '%.%'"
                    " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                    (node_id, line),
                ):
                    for dst, dst_kind, dst_file in self._registry_nodes(target):
                        step = Step(node_id, REGISTERS, node_id, dst, file_id, ref_line)
                        found.append((dst, step, dst_kind, dst_file))
        return found

    def _registry_nodes(self, target: str) -> list[tuple[int, str, int]]:
        """Definitions a decorator's dotted base may name: exactly, or re-exported from a
        submodule of its package (``vllm.ir.ops.rms_norm`` is ``vllm.ir.ops.layernorm.rms_norm``)."""
        base = target.rsplit(".", 1)[0]
        if "." not in base:
            return []
        rows = self.index.conn.execute(
            "SELECT id, kind, file_id FROM nodes WHERE qualname = ? AND kind != 'file'", (base,)
        ).fetchall()
        if rows:
            return rows
        package, _, name = base.rpartition(".")
        return [
            (node_id, kind, file_id)
            for node_id, kind, file_id, qualname in self.index.conn.execute(
                "SELECT id, kind, file_id, qualname FROM nodes WHERE name = ?"
                " AND kind IN ('python_function', 'python_class')",
                (name,),
            )
            if qualname.startswith(package + ".") and qualname.count(".") == base.count(".") + 1
        ]

    def _explicit_methods(self, frontier: list[int], reach: Reach) -> dict[int, str]:
        """Python methods of the frontier that run only when called by name (``obj.m()``),
        id -> name. The others run implicitly, through their class: dunders (``C(...)``
        runs ``__init__``, ``c(...)`` runs ``__call__``), ``forward`` (``module(x)``),
        properties."""
        ids = [n for n in frontier if reach.kind.get(n) == NodeKind.PYTHON_FUNCTION.value]
        explicit: dict[int, str] = {}
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            for node_id, name, attrs in self.index.conn.execute(
                f"SELECT id, name, attrs FROM nodes WHERE id IN ({_placeholders(batch)})"
                " AND attrs LIKE '%\"method\":true%'",
                batch,
            ):
                data = json.loads(attrs)
                decorators = {d.rsplit(".", 1)[-1] for d in data.get("decorators") or ()}
                implicit = (
                    (name.startswith("__") and name.endswith("__"))
                    or name in IMPLICIT_METHODS
                    or bool(decorators & PROPERTY_DECORATORS)
                )
                if data.get("method") and not implicit:
                    explicit[node_id] = name
        return explicit

    def _method_callers(self, methods: dict[int, str]) -> list[tuple[int, Step, str, int]]:
        """Callers of methods by name: ``obj.m(...)`` with a receiver the index cannot
        type stays an unresolved ``py`` ref ``.m``. Such a call is attributed to a method
        ``m`` of class C when the calling file can see C: it is C's own file, or it uses
        C's module (an import, reference or cover edge into that file), or few classes
        define an ``m`` at all (a distinctive name)."""
        found = []
        conn = self.index.conn
        for method_id, name in methods.items():
            method_file = conn.execute(
                "SELECT file_id FROM nodes WHERE id = ?", (method_id,)
            ).fetchone()[0]
            rare = self._definitions_named(name) <= RARE_METHOD_DEFINITIONS
            users = None if rare else self._files_using(method_file)
            for src, file_id, line, src_kind, src_file in conn.execute(
                "SELECT r.src_id, r.file_id, r.line, n.kind, n.file_id"
                " FROM refs r JOIN nodes n ON n.id = r.src_id"
                " WHERE r.target_key = ? AND r.scheme = 'py' AND r.target = ?"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                (name, f".{name}"),
            ):
                if users is not None and src_file != method_file and src_file not in users:
                    continue
                step = Step(method_id, EdgeKind.CALLS.value, src, method_id, file_id, line)
                found.append((src, step, src_kind, src_file))
        return found

    def _definitions_named(self, name: str) -> int:
        if name not in self._method_names:
            self._method_names[name] = self.index.conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE name = ? AND kind = 'python_function'"
                " AND attrs LIKE '%\"method\":true%'",
                (name,),
            ).fetchone()[0]
        return self._method_names[name]

    def _files_using(self, file_id: int) -> set[int]:
        """Files with an edge into ``file_id``'s definitions (importing, naming, testing)."""
        if file_id not in self._users_of_file:
            self._users_of_file[file_id] = {
                row[0]
                for row in self.index.conn.execute(
                    "SELECT DISTINCT e.file_id FROM edges e JOIN nodes d ON d.id = e.dst_id"
                    " WHERE d.file_id = ? AND e.kind IN ('imports', 'references', 'covers',"
                    " 'calls')",
                    (file_id,),
                )
            }
        return self._users_of_file[file_id]

    def _dispatcher_callers(self, op_ids: list[int]) -> list[tuple[int, Step, str, int]]:
        """Code calling aten ops through generated bindings the index never sees: C++'s
        ``at::addmm(...)`` / ``self.t()`` (generated headers) and Python's
        ``torch._C._VariableFunctions.add`` / ``torch._C.add`` / ``torch._VF.add``
        (generated bindings). Such calls stay unresolved refs; they are matched to the
        op by name."""
        found = []
        conn = self.index.conn
        for op in self.index.nodes(op_ids):
            if not op.qualname.startswith("aten::"):
                continue
            keys = [op.name, f"{op.name}_out", f"{op.name}_outf"]
            for src, file_id, line, scheme, target, attrs, src_kind, src_file in conn.execute(
                "SELECT r.src_id, r.file_id, r.line, r.scheme, r.target, r.attrs, n.kind,"
                " n.file_id FROM refs r JOIN nodes n ON n.id = r.src_id"
                f" WHERE r.target_key IN ({_placeholders(keys)}) AND r.scheme IN ('cpp', 'py')"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                keys,
            ):
                if scheme == "cpp" and _calls_op_api(target, attrs, keys):
                    kind = EdgeKind.CALLS.value
                elif scheme == "py" and target.endswith(_python_bindings(op.name)):
                    kind = EdgeKind.REFERENCES.value
                else:
                    continue
                found.append(
                    (src, Step(op.id, kind, src, op.id, file_id, line), src_kind, src_file)
                )
        return found


def _python_bindings(name: str) -> tuple[str, ...]:
    return (f"._C.{name}", f"._C._VariableFunctions.{name}", f"._VF.{name}")


_API_PREFIXES = ("at::", "torch::", "::at::", "c10::")
_TENSOR_TYPES = frozenset({"Tensor", "TensorBase", "Tensor&", "TensorBase&"})


def _calls_op_api(target: str, attrs: str | None, keys: list[str]) -> bool:
    """Whether an unresolved call ``target`` may be the generated API of an op."""
    head, _, last = target.rpartition("::")
    if last.split("<", 1)[0] not in keys:
        return False
    if head:
        return (head + "::").startswith(_API_PREFIXES)
    receiver = json.loads(attrs).get("receiver") if attrs else None
    if receiver is None:
        return True  # an unqualified call or a method on an unknown type: may be the op
    receiver = receiver.replace("const ", "").replace("at::", "").strip()
    return receiver in _TENSOR_TYPES
