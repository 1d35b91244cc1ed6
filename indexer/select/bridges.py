"""Steps the graph does not hold as edges, bridged by name at walk time.

Calls through code the index never sees (generated at build time), and Python's untyped
method calls and decorator registries, stay unresolved refs in the index. The walk
(:class:`indexer.select.impact.ImpactWalker`, which mixes this class in and provides
``index``) crosses them here, each with the ref's file:line as its evidence:

- an aten op -> C++ calling its generated API (``at::addmm(...)``, ``self.t()``) and
  Python calling its generated bindings (``torch._C._VariableFunctions.add``);
- a Python method called by name -> the ``obj.m()`` calls that may be calls of it, and
  the methods it overrides, whose calls may run it (``indexer.select.overrides``);
- a decorated Python function -> the registry its decorator fills.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.select.overrides import OVERRIDES, ClassHierarchy
from indexer.select.reach import Step

if TYPE_CHECKING:
    from indexer.query.index import Index
    from indexer.select.reach import Reach


# Methods Python runs through their class or an instance's protocol, not by name: using
# the class is using them. Every dunder is one: ``C(...)`` runs ``__init__``, ``c[i]``
# ``__getitem__``, ``a + b`` ``__add__``, ``str(c)`` ``__str__``; no code need name them.
# (Operator dunders were once left out, as syntax on a class as common as Tensor reaches
# every test; the audit of PyTorch's Python then missed the tests indexing torch._numpy's
# ndarray. Reaching every test is what a change to Tensor.__rsub__ can do.)
# ``forward`` runs through nn.Module.__call__.
def runs_implicitly(name: str) -> bool:
    return name == "forward" or (len(name) > 4 and name.startswith("__") and name.endswith("__"))


# What an autograd function's ``apply`` runs (besides ``forward``, implicit already).
AUTOGRAD_METHODS = frozenset({"backward", "setup_context", "jvp", "vjp", "vmap"})
PROPERTY_DECORATORS = frozenset({"property", "cached_property", "setter", "getter", "deleter"})
DECORATED_KINDS = frozenset({NodeKind.PYTHON_FUNCTION.value, NodeKind.PYTHON_CLASS.value})
# a decorated definition -> the registry its decorator fills
REGISTERS = EdgeKind.REGISTERS.value
RARE_METHOD_DEFINITIONS = 3  # a method name defined this rarely is matched by name alone
BATCH = 900


Found = tuple[int, Step, str, int]  # (node reached, how, its kind, its file id)


def _like(text: str) -> str:
    """``text`` as a literal in a LIKE pattern escaped with a backslash."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def placeholders(values: list) -> str:
    return ",".join("?" * len(values))


class Bridges:
    """Name-matched steps of the impact walk (see the module docstring)."""

    index: Index

    def __init__(self) -> None:
        self._method_names: dict[str, int] = {}  # method name -> how many define it
        self._users_of_file: dict[int, set[int]] = {}  # file -> files with edges into it
        self._hierarchy: ClassHierarchy | None = None
        self._untyped: dict[str, list[tuple[int, int, int, str, int]]] = {}
        # Per walker, as everything above: answers by name or file, however many reached
        # nodes ask (an op's overloads share a name; a file's definitions its refs).
        self._ops_named: dict[str, bool] = {}
        self._op_api_calls: dict[str, list[tuple[int, str, int, int, str, int]]] = {}
        self._decorator_refs: dict[int, list[tuple[int, str, int]]] = {}
        self._registries: dict[str, list[tuple[int, str, int]]] = {}

    def _registrations(self, frontier: list[int], reach: Reach) -> list[tuple[int, Step, str, int]]:
        """A decorated Python function registers itself somewhere (``@op.register_impl``,
        ``@register_decomposition(aten.add)``): whoever calls through that registry runs
        it. The registry is what the decorator names before its last attribute
        (``vllm.ir.ops.rms_norm`` of ``vllm.ir.ops.rms_norm.register_impl``), or an op
        the decorator's arguments name; impact flows forward to it. Definitions in test
        files register nothing another test file can reach (``@config.patch(...)`` on a
        test): pytest runs them, and their own file is selected already."""
        test_files = self.index.test_file_paths()
        ids = [
            n
            for n in frontier
            if reach.kind.get(n) in DECORATED_KINDS and reach.file_id.get(n) not in test_files
        ]
        found = []
        conn = self.index.conn
        decorated: dict[int, dict[int, int]] = {}  # file id -> node id -> its def line
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            for node_id, line, file_id in conn.execute(
                f"SELECT id, line, file_id FROM nodes WHERE id IN ({placeholders(batch)})"
                " AND attrs LIKE '%\"decorators\"%'",
                batch,
            ):
                decorated.setdefault(file_id, {})[node_id] = line
        for file_id, lines in decorated.items():
            for node_id, line in lines.items():
                for dst, ref_line, dst_kind, dst_file in conn.execute(
                    "SELECT e.dst_id, e.line, d.kind, d.file_id FROM edges e"
                    " JOIN nodes d ON d.id = e.dst_id"
                    " WHERE e.src_id = ? AND e.line < ? AND d.kind = 'op'",
                    (node_id, line),
                ):
                    step = Step(node_id, REGISTERS, node_id, dst, file_id, ref_line)
                    found.append((dst, step, dst_kind, dst_file))
            for src, target, ref_line in self._unresolved_dotted(file_id):
                if src not in lines or ref_line >= lines[src]:
                    continue  # not a decorator line of a reached definition
                for dst, dst_kind, dst_file in self._registry_nodes(target):
                    step = Step(src, REGISTERS, src, dst, file_id, ref_line)
                    found.append((dst, step, dst_kind, dst_file))
        return found

    def _unresolved_dotted(self, file_id: int) -> list[tuple[int, str, int]]:
        """(src, target, line) of the file's unresolved dotted ``py`` refs; refs has no
        index on src_id, so a file's are read once per walker."""
        if file_id not in self._decorator_refs:
            self._decorator_refs[file_id] = self.index.conn.execute(
                "SELECT r.src_id, r.target, r.line FROM refs r WHERE r.file_id = ?"
                " AND r.scheme = 'py' AND r.target LIKE '%.%'"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                (file_id,),
            ).fetchall()
        return self._decorator_refs[file_id]

    def _registry_nodes(self, target: str) -> list[tuple[int, str, int]]:
        if target not in self._registries:
            self._registries[target] = self._find_registry_nodes(target)
        return self._registries[target]

    def _find_registry_nodes(self, target: str) -> list[tuple[int, str, int]]:
        """Definitions a decorator's dotted base may name: exactly, or re-exported from a
        submodule of its package (``vllm.ir.ops.rms_norm`` is ``vllm.ir.ops.layernorm.rms_norm``),
        a module included (``@torch._dynamo.register_backend`` fills a table of that package)."""
        base = target.rsplit(".", 1)[0]
        if "." not in base:
            return []
        rows = self.index.conn.execute(
            "SELECT id, kind, file_id FROM nodes WHERE qualname = ?"
            " AND kind NOT IN ('file', 'test_file')",
            (base,),
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
        properties, and methods the class or an ancestor hands out as values
        (``return self.forward_cuda``: vLLM's CustomOp runs the override an instance has)."""
        ids = [n for n in frontier if reach.kind.get(n) == NodeKind.PYTHON_FUNCTION.value]
        explicit: dict[int, str] = {}
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            for node_id, name, attrs, owner in self.index.conn.execute(
                f"SELECT id, name, attrs, parent_id FROM nodes WHERE id IN ({placeholders(batch)})"
                " AND attrs LIKE '%\"method\":true%'",
                batch,
            ):
                data = json.loads(attrs)
                decorators = {d.rsplit(".", 1)[-1] for d in data.get("decorators") or ()}
                implicit = runs_implicitly(name) or bool(decorators & PROPERTY_DECORATORS)
                if name in AUTOGRAD_METHODS and owner is not None:
                    implicit = implicit or self._classes().autograd_function(owner)
                if data.get("method") and not implicit and not self._handed_out(owner, name):
                    explicit[node_id] = name
        return explicit

    def _handed_out(self, owner: int | None, name: str) -> bool:
        return owner is not None and name in self._classes().value_methods(owner)

    def _classes(self) -> ClassHierarchy:
        if self._hierarchy is None:
            self._hierarchy = ClassHierarchy(self.index)
        return self._hierarchy

    def _untyped_calls(self, name: str) -> list[tuple[int, int, int, str, int]]:
        """(src, file, line, src kind, src file) of the unresolved ``obj.name(...)`` refs:
        read once per walker, however many methods of that name the walk reaches."""
        if name not in self._untyped:
            self._untyped[name] = self.index.conn.execute(
                "SELECT r.src_id, r.file_id, r.line, n.kind, n.file_id"
                " FROM refs r JOIN nodes n ON n.id = r.src_id"
                " WHERE r.target_key = ? AND r.scheme = 'py' AND r.target = ?"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                (name, f".{name}"),
            ).fetchall()
        return self._untyped[name]

    def _method_callers(
        self,
        methods: dict[int, str],
        reached: dict[int, Step | None],
        files: dict[int, int],
    ) -> list[tuple[int, Step, str, int]]:
        """Callers of methods by name: ``obj.m(...)`` with a receiver the index cannot
        type stays an unresolved ``py`` ref ``.m``. Such a call is attributed to a method
        ``m`` of class C when the calling file can see C: it is C's own file, or it uses
        C's module (an import, reference or cover edge into that file), or few classes
        define an ``m`` at all and no op is called ``m`` (a distinctive name: ``x.numel()``
        is a tensor's method, not ``SizeVariable.numel``)."""
        found = []
        for method_id, name in methods.items():
            method_file = files[method_id]  # the methods are reached: their files are known
            rare = self._definitions_named(name) <= RARE_METHOD_DEFINITIONS and not self._op_named(
                name
            )
            users = None if rare else self._files_using(method_file)
            for src, file_id, line, src_kind, src_file in self._untyped_calls(name):
                if src in reached:
                    continue
                if users is not None and src_file != method_file and src_file not in users:
                    continue
                step = Step(method_id, EdgeKind.CALLS.value, src, method_id, file_id, line)
                found.append((src, step, src_kind, src_file))
        return found

    def _overridden(self, methods: dict[int, str]) -> list[tuple[int, Step, str, int]]:
        """Each method's overridden ancestors: a call of ``B.m`` may run ``C.m``."""
        found = []
        for method_id in methods:
            for ancestor, ancestor_file, file_id, line in self._classes().overridden(method_id):
                step = Step(method_id, OVERRIDES, method_id, ancestor, file_id, line)
                found.append((ancestor, step, NodeKind.PYTHON_FUNCTION.value, ancestor_file))
        return found

    def _registered_op_callers(self, definition: int, op_name: str) -> list[Found]:
        """A Python function registered as an op runs where ``torch.ops.<ns>.<op_name>(...)``
        is called: those calls (unresolved ``py`` refs: the op is made at run time) reach it."""
        return [
            (src, Step(definition, EdgeKind.CALLS.value, src, definition, file_id, line), kind, nf)
            for src, file_id, line, kind, nf in self.index.conn.execute(
                "SELECT r.src_id, r.file_id, r.line, n.kind, n.file_id"
                " FROM refs r JOIN nodes n ON n.id = r.src_id"
                " WHERE r.target_key = ? AND r.scheme = 'py' AND r.target LIKE 'torch.ops.%'",
                (op_name,),
            )
        ]

    def _attribute_callers(self, definition: int, attribute: str) -> list[Found]:
        """A Python function installed as ``Cls.attr`` at import runs where ``.attr(...)``
        is called on an object the index cannot type, or ``Cls.attr`` is named (resolved
        or not: the class defines no ``attr`` of its own)."""
        name = attribute.rpartition(".")[2]
        return [
            (src, Step(definition, EdgeKind.CALLS.value, src, definition, file_id, line), kind, nf)
            for src, file_id, line, kind, nf in self.index.conn.execute(
                "SELECT r.src_id, r.file_id, r.line, n.kind, n.file_id"
                " FROM refs r JOIN nodes n ON n.id = r.src_id"
                " WHERE r.target_key = ? AND r.scheme = 'py' AND (r.target = ? OR r.target = ?"
                " OR r.target LIKE ? ESCAPE '\\')",
                (name, f".{name}", attribute, "%." + _like(attribute)),
            )
        ]

    def _op_named(self, name: str) -> bool:
        """Whether an op or binding is called ``name``: then ``x.name()`` is most likely a
        tensor method call, not a call of the few Python methods of that name."""
        if name not in self._ops_named:
            self._ops_named[name] = (
                self.index.conn.execute(
                    "SELECT 1 FROM nodes WHERE name = ? AND kind IN ('op', 'binding') LIMIT 1",
                    (name,),
                ).fetchone()
                is not None
            )
        return self._ops_named[name]

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

    def _dispatcher_callers(
        self, op_ids: list[int], reached: dict[int, Step | None]
    ) -> list[tuple[int, Step, str, int]]:
        """Code calling aten ops through generated bindings the index never sees: C++'s
        ``at::addmm(...)`` / ``self.t()`` (generated headers) and Python's
        ``torch._C._VariableFunctions.add`` / ``torch._C.add`` / ``torch._VF.add``
        (generated bindings). Such calls stay unresolved refs; they are matched to the
        op by name."""
        found = []
        for op in self.index.nodes(op_ids):
            if not op.qualname.startswith("aten::"):
                continue
            for src, kind, file_id, line, src_kind, src_file in self._op_api_callers(op.name):
                if src in reached:
                    continue
                found.append(
                    (src, Step(op.id, kind, src, op.id, file_id, line), src_kind, src_file)
                )
        return found

    def _op_api_callers(self, name: str) -> list[tuple[int, str, int, int, str, int]]:
        """(src, edge kind, file, line, src kind, src file) of the unresolved calls that may
        be the generated API of the aten ops called ``name``: read once per name (an op's
        overloads share it)."""
        if name in self._op_api_calls:
            return self._op_api_calls[name]
        keys = [name, f"{name}_out", f"{name}_outf"]
        calls = []
        for (
            src,
            file_id,
            line,
            scheme,
            target,
            attrs,
            src_kind,
            src_file,
        ) in self.index.conn.execute(
            "SELECT r.src_id, r.file_id, r.line, r.scheme, r.target, r.attrs, n.kind,"
            " n.file_id FROM refs r JOIN nodes n ON n.id = r.src_id"
            f" WHERE r.target_key IN ({placeholders(keys)}) AND r.scheme IN ('cpp', 'py')"
            " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
            keys,
        ):
            if scheme == "cpp" and _calls_op_api(target, attrs, keys):
                kind = EdgeKind.CALLS.value
            elif scheme == "py" and target.endswith(_python_bindings(name)):
                kind = EdgeKind.REFERENCES.value
            else:
                continue
            calls.append((src, kind, file_id, line, src_kind, src_file))
        self._op_api_calls[name] = calls
        return calls


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
