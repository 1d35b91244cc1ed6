"""Ops defined and kernels registered from Python with ``torch.library``.

- ``@torch.library.custom_op("ns::name", ...)`` (and ``triton_op``) on a function, or
  ``torch.library.define("ns::name(...) -> ...")``, ``lib.define(schema)`` on a
  ``lib = torch.library.Library("ns", ...)``: an ``op`` node ``ns::name`` (its Python
  spelling ``torch.ops.ns.name``), which dispatches to the decorated function;
- ``@torch.library.register_fake("ns::name")``, ``register_kernel``, ``impl``,
  ``impl_abstract``, ``register_autograd("ns::name", backward, setup_context=...)``,
  ``lib.impl("name", fn, "Key")``, and the methods of a custom op
  (``@my_op.register_fake``, ``my_op.register_autograd(backward)``): a ``registration``
  node of the op, which dispatches to the functions registered, wherever the op is
  defined (C++ or Python; the op finds it by its ``op_impl`` ref).

So a change to a registered function reaches the callers of its op, as a C++ kernel's does.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Protocol

from indexer.bindings.python_names import ops_names
from indexer.bindings.schema import split_op_name
from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.python.scope import dotted_chain

if TYPE_CHECKING:
    from indexer.graph.facts import FileFacts
    from indexer.python.scope import Scope


class FileBeingRead(Protocol):
    """What is read of the file being extracted (``indexer.python.extractor``'s
    ``FileIndexer``, which hands itself over)."""

    facts: FileFacts
    defs: list[tuple[ast.AST, int, str | None]]  # (definition, its node, enclosing class)
    scope: Scope
    module_node: int


DEFINERS = frozenset({"custom_op", "triton_op"})
REGISTRARS = frozenset(
    {"register_fake", "register_kernel", "impl", "impl_abstract", "register_autograd",
     "register_vmap", "register_torch_dispatch", "register_fake_class"}
)  # fmt: skip
OP_METHODS = frozenset(
    {"register_fake", "register_kernel", "register_autograd", "register_vmap",
     "register_torch_dispatch"}
)  # fmt: skip
LIBRARY_MODULES = ("torch.library.", "torch._library.custom_ops.", "torch._custom_ops.")


class LibraryOps:
    """Reads one file's ``torch.library`` definitions and registrations (see above)."""

    def __init__(self, indexer: FileBeingRead) -> None:
        self.indexer = indexer
        self.facts = indexer.facts
        self.ops: dict[str, int] = {}  # qualname -> op node of this file
        self.registrations: dict[str, int] = {}  # qualname -> registration node
        self.custom_ops: dict[str, str] = {}  # function name -> the op it defines
        self.libraries: dict[str, str] = {}  # module variable -> Library namespace

    def read(self, body: list[ast.stmt]) -> None:
        for stmt in _statements(body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                namespace = self._library_namespace(stmt.value)
                if namespace is not None:
                    for target in stmt.targets:
                        if isinstance(target, ast.Name):
                            self.libraries[target.id] = namespace
        for node, index, _cls in self.indexer.defs:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    self._decorator(decorator, node, index)
        for stmt in _statements(body):
            if isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call):
                self._call(stmt.value)
        for qualname, node in self.ops.items():
            line = self.facts.nodes[node].line
            self.facts.add_ref(node, EdgeKind.DISPATCHES.value, "op_impl", qualname, line)

    # --- what a call names --------------------------------------------------------------

    def _library_function(self, func: ast.expr) -> str | None:
        """The ``torch.library`` function a callee is (its last name), else None."""
        chain = dotted_chain(func)
        if chain is None:
            return None
        dotted = self.indexer.scope.expand(chain) or ".".join(chain)
        if dotted.startswith(LIBRARY_MODULES):
            return dotted.rsplit(".", 1)[-1]
        return None

    def _library_namespace(self, call: ast.Call) -> str | None:
        if self._library_function(call.func) == "Library" and call.args:
            return _string(call.args[0])
        return None

    def _decorator(self, decorator: ast.expr, node: ast.FunctionDef, index: int) -> None:
        call = decorator if isinstance(decorator, ast.Call) else None
        func = call.func if call is not None else decorator
        function = self._library_function(func)
        if function in DEFINERS and call is not None and call.args:
            qualname = _qualname(_string(call.args[0]), None)
            if qualname is not None:
                op = self._op(qualname, decorator.lineno)
                self._dispatch(op, index, node.lineno)
                self.custom_ops[node.name] = qualname
            return
        if function in REGISTRARS and call is not None and call.args:
            qualname = _qualname(_string(call.args[0]), None)
            if qualname is not None:
                self._register(qualname, decorator.lineno, [index])
            return
        owner = self._op_method(func)
        if owner is not None:
            self._register(owner, decorator.lineno, [index])

    def _op_method(self, func: ast.expr) -> str | None:
        """The op of ``my_op.register_fake`` (``my_op`` a custom op of this file)."""
        if (
            isinstance(func, ast.Attribute)
            and func.attr in OP_METHODS
            and isinstance(func.value, ast.Name)
        ):
            return self.custom_ops.get(func.value.id)
        return None

    def _call(self, call: ast.Call) -> None:
        func = call.func
        function = self._library_function(func)
        if function == "define" and call.args:
            qualname = _qualname(_string(call.args[0]), None)
            if qualname is not None:
                self._op(qualname, call.lineno)
            return
        if function in REGISTRARS and call.args:
            qualname = _qualname(_string(call.args[0]), None)
            if qualname is not None:
                self._register(qualname, call.lineno, self._functions(call.args[1:], call))
            return
        owner = self._op_method(func)
        if owner is not None:
            self._register(owner, call.lineno, self._functions(call.args, call))
            return
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            namespace = self.libraries.get(func.value.id)
            if namespace is None or not call.args:
                return
            if func.attr == "define":
                qualname = _qualname(_string(call.args[0]), namespace)
                if qualname is not None:
                    self._op(qualname, call.lineno)
            elif func.attr in ("impl", "_register_fake", "_impl_with_aoti_compile"):
                qualname = _qualname(_string(call.args[0]), namespace)
                if qualname is not None:
                    self._register(qualname, call.lineno, self._functions(call.args[1:], call))

    def _functions(self, args: list[ast.expr], call: ast.Call) -> list[int]:
        """The definitions of this file that arguments and keywords name."""
        defs = self.indexer.scope.defs
        found = []
        for value in (*args, *(k.value for k in call.keywords)):
            if isinstance(value, ast.Name) and value.id in defs:
                found.append(int(defs[value.id]))
        return found

    # --- nodes --------------------------------------------------------------------------

    def _op(self, qualname: str, line: int) -> int:
        node = self.ops.get(qualname)
        if node is None:
            namespace, _, rest = qualname.partition("::")
            name, _, overload = rest.partition(".")
            node = self.facts.add_node(
                NodeKind.OP.value, name, qualname, line, line, self.indexer.module_node,
                namespace=namespace, overload=overload, source="torch.library",
                python_names=ops_names(["torch"], namespace, name, overload),
            )  # fmt: skip
            self.ops[qualname] = node
        return node

    def _register(self, qualname: str, line: int, functions: list[int]) -> None:
        source = self.ops.get(qualname)
        if source is None:
            source = self.registrations.get(qualname)
        if source is None:
            namespace, _, rest = qualname.partition("::")
            name, _, overload = rest.partition(".")
            source = self.facts.add_node(
                NodeKind.REGISTRATION.value, name, qualname, line, line, self.indexer.module_node,
                namespace=namespace, overload=overload, source="torch.library",
            )  # fmt: skip
            self.registrations[qualname] = source
        for function in functions:
            self._dispatch(source, function, line)

    def _dispatch(self, source: int, function: int, line: int) -> None:
        self.facts.add_local_edge(source, function, EdgeKind.DISPATCHES.value, line)


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, those in module-level ``if``/``try`` blocks included."""
    found = []
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        found.append(stmt)
        if isinstance(stmt, (ast.If, ast.Try)):
            nested = [*stmt.body, *stmt.orelse]
            if isinstance(stmt, ast.Try):
                nested += [s for handler in stmt.handlers for s in handler.body]
                nested += stmt.finalbody
            stack.extend(reversed(nested))
    return found


def _string(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _qualname(written: str | None, namespace: str | None) -> str | None:
    """``ns::name[.overload]`` of an op name or schema as written, else None."""
    if not written:
        return None
    written_ns, name, overload = split_op_name(written.split("(", 1)[0].strip())
    namespace = written_ns or namespace
    if not namespace or not name.isidentifier():
        return None
    return f"{namespace}::{name}.{overload}" if overload else f"{namespace}::{name}"
