"""The reference pass of the Python extractor: refs from every definition to the names
its code uses, expanded through the file's scopes, in one iterative walk per tree."""

from __future__ import annotations

import ast
from typing import Any

from indexer.python import testconv
from indexer.python.opinfo import OpinfoScanner
from indexer.python.reflection import (
    globals_lookup,
    is_pattern,
    lookup_call,
    name_pattern,
    string_pattern,
)
from indexer.python.registries import SCHEME, is_name
from indexer.python.scope import Scope, dotted_chain, parameter_names
from indexer.python.testconv import OpsUse

# Method names that are common on Python builtins and never Tensor methods: refs to them
# could only stay unresolved.
NOT_TENSOR_METHODS = frozenset(
    {
        *("append", "extend", "items", "keys", "values", "get", "format", "join"),
        *("startswith", "endswith", "strip", "lstrip", "rstrip", "lower", "upper", "update"),
        *("setdefault", "pop", "popleft", "appendleft", "insert", "remove", "discard"),
        *("encode", "decode", "read", "write", "close", "readline", "readlines", "splitlines"),
        *("flush", "seek", "tell", "group", "groups", "match", "search", "findall"),
        *("finditer", "isoformat", "strftime", "exists", "is_file", "is_dir", "mkdir"),
        *("unlink", "glob", "rglob", "iterdir", "resolve", "relative_to", "with_suffix"),
        *("read_text", "write_text", "read_bytes", "write_bytes", "communicate"),
        *("partition", "rpartition", "casefold", "isdigit", "isalpha", "isidentifier"),
        *("ljust", "rjust", "zfill", "center", "lookup", "acquire", "release", "notify"),
        *("put", "get_nowait", "put_nowait", "qsize", "task_done", "submit", "result"),
        *("done", "cancel", "set_result", "set_exception", "add_done_callback", "info"),
        *("debug", "warning", "error", "exception", "critical", "getLogger", "setLevel"),
        "addHandler",
    }
)
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "annotation", "returns", "type_comment"})
# The child fields of each ast node type worth visiting (no contexts, operators or
# annotations): faster than ast.iter_child_nodes, which yields them all.
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f for f in cls._fields if f not in _SKIPPED_FIELDS)
    for cls in vars(ast).values()
    if isinstance(cls, type) and issubclass(cls, ast.AST)
}
_TRY_KINDS = tuple(k for k in (ast.Try, getattr(ast, "TryStar", None)) if k is not None)


def _fields(kind: type) -> tuple[str, ...]:
    return _FIELDS.get(kind, ())


class ReferencePass:
    """Mixin of :class:`indexer.python.extractor.FileIndexer`: the reference pass."""

    def _walk_module(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue
            if id(stmt) in self.def_nodes:
                self._walk_def(stmt)
            elif isinstance(
                stmt, (ast.If, ast.Try, ast.For, ast.While, ast.With, ast.AsyncWith)
            ) or hasattr(stmt, "cases"):
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.stmt):
                        self._walk_module([child])
                    elif isinstance(child, ast.ExceptHandler):
                        if child.type is not None:
                            self.walk_expr(child.type, self.module_node, self.scope)
                        self._walk_module(child.body)
                    elif isinstance(child, ast.match_case):
                        self._walk_module(child.body)
                    else:
                        self.walk_expr(child, self.module_node, self.scope)
            else:
                self.walk_stmts([stmt], self.module_node, self.scope, None)
        for index, use in self.ops_tests:
            self._ops_ref(index, use)
        self._flush_lookups(self.scope)

    def _walk_def(self, node: ast.AST) -> None:
        index = self.def_nodes[id(node)]
        if isinstance(node, ast.ClassDef):
            for expr in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
                self.walk_expr(expr, index, self.scope)
            class_scope = Scope(parent=self.scope)
            for stmt in node.body:
                if id(stmt) in self.def_nodes:
                    self._walk_def(stmt)
                elif isinstance(stmt, (ast.If, ast.Try)):
                    for inner in self._class_body([stmt]):
                        if id(inner) in self.def_nodes:
                            self._walk_def(inner)
                        else:
                            self.walk_stmts([inner], index, class_scope, None)
                else:
                    self.walk_stmts([stmt], index, class_scope, None)
            self._flush_lookups(class_scope)
            if self.facts.nodes[index].kind == "test_class":
                # A test class runs its helpers (setUp, fixtures-as-methods) for every test.
                for child, line in self.methods.get(index, ()):
                    self.emit_local(index, child, "covers", line)
            return
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        cls = self.def_class.get(index)
        for expr in node.decorator_list:
            self.walk_expr(expr, index, self.scope)
        for expr in (*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
            self.walk_expr(expr, index, self.scope)
        fact = self.facts.nodes[index]
        if fact.kind == "test_function" or fact.attrs.get("fixture"):
            self._fixture_refs(node, index, cls)
        self._walk_function_body(node, index, self.scope, cls)

    def _walk_function_body(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
        src: int,
        outer: Scope,
        cls: str | None,
    ) -> None:
        # Parameters hide outer names; assignments hide them from where they happen on
        # (one pass: a use before the assignment would fail at run time anyway).
        scope = Scope(aliases=dict.fromkeys(parameter_names(node.args)), parent=outer)
        if isinstance(node.body, list):
            self.walk_stmts(node.body, src, scope, cls)
        else:
            self.walk_expr(node.body, src, scope, cls)
        self._flush_lookups(scope)

    def _fixture_refs(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, index: int, cls: str | None
    ) -> None:
        if cls is not None:
            parent = self.facts.nodes[self.facts.nodes[index].parent or 0]
            if any(base != "object" for base in parent.attrs.get("bases", [])):
                return  # a class with bases is unittest-style: its methods take no fixtures
        directory = self.path.rpartition("/")[0]
        parametrized = {
            name
            for entry in self.facts.nodes[index].attrs.get("params", ())
            for name in entry.get("argnames") or ()
        }
        for name in parameter_names(node.args):
            if name not in testconv.NOT_FIXTURES and name not in parametrized:
                self.emit_ref(index, "covers", "fixture", name, node.lineno, dir=directory)

    def _ops_ref(self, index: int, use: OpsUse) -> None:
        """The ``opinfo`` ref of an ``@ops(list)`` test: resolved to every entry of the list."""
        arg = use.op_list
        owner = self.facts.nodes[index].parent
        if isinstance(arg, ast.Name) and arg.id in self.class_values.get(owner or 0, {}):
            arg = self.class_values[owner or 0][arg.id]  # a list the test's class defines
        chain = dotted_chain(arg)
        scanner = OpinfoScanner(self)
        summary = scanner.summarize(arg, f"<{self.facts.nodes[index].name}>")
        if chain is not None and summary.parts and not summary.unknown and summary.parts[0][0]:
            target = summary.parts[0][0]
            self.emit_ref(index, "covers", "opinfo", target, use.line)
            return
        self.emit_ref(
            index,
            "covers",
            "opinfo",
            ast.unparse(arg)[:200],
            use.line,
            summary=summary.as_dict(),
        )

    def walk_stmts(self, stmts: list[ast.stmt], src: int, scope: Scope, cls: str | None) -> None:
        local = scope is not self.scope  # a function or class scope: assignments hide names
        for stmt in stmts:
            kind = type(stmt)
            if kind is ast.Assign:
                self.walk_expr(stmt.value, src, scope, cls)  # type: ignore[attr-defined]
                for target in stmt.targets:  # type: ignore[attr-defined]
                    if type(target) is not ast.Name:
                        self.walk_expr(target, src, scope, cls)
                        continue
                    if local:
                        scope.aliases[target.id] = self.alias_of(stmt.value, scope)  # type: ignore[attr-defined]
                    self._string_value(scope, target.id, stmt.value)  # type: ignore[attr-defined]
            elif kind is ast.Expr or kind is ast.Return:
                if stmt.value is not None:  # type: ignore[attr-defined]
                    self.walk_expr(stmt.value, src, scope, cls)  # type: ignore[attr-defined]
            elif kind is ast.Import or kind is ast.ImportFrom:
                self._import(stmt, src, scope, lazy=local)  # type: ignore[arg-type]
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                for expr in (*stmt.decorator_list, *stmt.args.defaults):  # type: ignore[attr-defined]
                    self.walk_expr(expr, src, scope, cls)
                if local:
                    scope.aliases[stmt.name] = None  # type: ignore[attr-defined]
                self._walk_function_body(stmt, src, scope, cls)  # type: ignore[arg-type]
            elif kind is ast.ClassDef:
                for expr in (*stmt.decorator_list, *stmt.bases):  # type: ignore[attr-defined]
                    self.walk_expr(expr, src, scope, cls)
                if local:
                    scope.aliases[stmt.name] = None  # type: ignore[attr-defined]
                body_scope = Scope(parent=scope)
                self.walk_stmts(stmt.body, src, body_scope, None)  # type: ignore[attr-defined]
                self._flush_lookups(body_scope)
            elif kind is ast.AnnAssign:
                if stmt.value is not None:  # type: ignore[attr-defined]
                    self.walk_expr(stmt.value, src, scope, cls)  # type: ignore[attr-defined]
                if type(stmt.target) is ast.Name:  # type: ignore[attr-defined]
                    scope.store(stmt.target.id)  # type: ignore[attr-defined]
                    if local:
                        scope.aliases[stmt.target.id] = None  # type: ignore[attr-defined]
            elif kind in _TRY_KINDS:
                self.walk_stmts(stmt.body, src, scope, cls)  # type: ignore[attr-defined]
                for handler in stmt.handlers:  # type: ignore[attr-defined]
                    if handler.type is not None:
                        self.walk_expr(handler.type, src, scope, cls)
                    if local and handler.name:
                        scope.aliases[handler.name] = None
                    self.walk_stmts(handler.body, src, scope, cls)
                self.walk_stmts(stmt.orelse, src, scope, cls)  # type: ignore[attr-defined]
                self.walk_stmts(stmt.finalbody, src, scope, cls)  # type: ignore[attr-defined]
            elif kind is ast.Global or kind is ast.Nonlocal:
                for name in stmt.names:  # type: ignore[attr-defined]
                    scope.aliases.pop(name, None)
            else:
                for name in _fields(kind):
                    value = getattr(stmt, name)
                    if type(value) is list:
                        if value and isinstance(value[0], ast.stmt):
                            self.walk_stmts(value, src, scope, cls)
                        elif value and type(value[0]) is ast.match_case:
                            for case in value:
                                if case.guard is not None:
                                    self.walk_expr(case.guard, src, scope, cls)
                                self.walk_stmts(case.body, src, scope, cls)
                        else:
                            for item in value:
                                self.walk_expr(item, src, scope, cls)
                    elif value is not None:
                        self.walk_expr(value, src, scope, cls)

    def walk_expr(self, root: ast.AST, src: int, scope: Scope, cls: str | None = None) -> None:
        """Refs from ``src`` to every name ``root`` uses, expanded through ``scope``."""
        local = scope is not self.scope
        consumed = self.consumed
        stack: list[Any] = [root]
        pop, push, extend = stack.pop, stack.append, stack.extend
        while stack:
            node = pop()
            kind = type(node)
            if kind is ast.Name:
                if type(node.ctx) is ast.Load:
                    if not self._chain([node.id], node.lineno, src, scope):
                        self._unbound_name(node, src, scope, cls)
                else:
                    scope.store(node.id)
                    if local:
                        scope.aliases[node.id] = None
            elif kind is ast.Attribute:
                chain = dotted_chain(node)
                if chain is not None:
                    if type(node.ctx) is ast.Load:
                        if not self._chain(chain, node.lineno, src, scope):
                            self._self_attribute(chain, cls, self.self_loads)
                    else:
                        self._self_attribute(chain, cls, self.self_stores)
                else:
                    push(node.value)
            elif kind is ast.Call:
                if id(node) not in consumed:
                    self._call(node, src, scope, cls, stack)
            elif kind is ast.Constant:
                if self.registry_names and type(node.value) is str:
                    self._registry_name(node.value, src, node.lineno)
            elif node is None:
                continue
            elif kind is ast.Lambda:
                for default in node.args.defaults:
                    push(default)
                self._walk_function_body(node, src, scope, cls)
            else:
                if kind is ast.Subscript:
                    self._globals_ref(node, src, scope)
                elif kind is ast.BinOp and type(node.op) is ast.MatMult:
                    self.emit_ref(
                        src, self.use_kind(src), "py", ".matmul", node.lineno,
                        method=True, operator="@",
                    )  # fmt: skip
                for name in _fields(kind):
                    value = getattr(node, name)
                    if type(value) is list:
                        extend(value)
                    elif value is not None:
                        push(value)

    def _registry_name(self, value: str, src: int, line: int) -> None:
        """A string test-side code spells may name a registry entry (an architecture, a
        quantization method, a model id): a ref the link step resolves to the entries so
        named, if any (indexer/python/registries.py)."""
        if is_name(value):
            self.emit_ref(src, self.use_kind(src), SCHEME, value, line)

    def _unbound_name(self, node: ast.Name, src: int, scope: Scope, cls: str | None) -> None:
        """A name no import or definition binds: ``cls`` in a method is its class
        (``return cls(...)`` in a factory classmethod constructs one); a registry of the
        module (see ``code_vars``) is the module's name, as an importer's use would be."""
        name = node.id
        if name == "cls" and cls is not None:
            self.emit_ref(src, self.use_kind(src), "py", cls, node.lineno)
        elif name in self.code_vars and src != self.module_node and self._module_level(name, scope):
            self.emit_ref(src, self.use_kind(src), "py", f"{self.modname}.{name}", node.lineno)

    def _module_level(self, name: str, scope: Scope) -> bool:
        """Whether ``name`` in ``scope`` is the module's, not hidden by a local binding."""
        while scope is not None and scope is not self.scope:
            if name in scope.aliases or name in scope.defs:
                return False
            scope = scope.parent
        return True

    @staticmethod
    def _self_attribute(chain: list[str], cls: str | None, into: dict[str, set[str]]) -> None:
        """Note ``self.name`` read (not called) or written in a method of ``cls``: a method
        read as a value is handed out to run later (see ``value_methods``)."""
        if cls is not None and len(chain) == 2 and chain[0] in ("self", "cls"):
            into.setdefault(cls, set()).add(chain[1])

    def _chain(self, chain: list[str], line: int, src: int, scope: Scope) -> bool:
        """A ref for a dotted use whose root is known; False if the root is not."""
        found = scope.lookup(chain[0])
        if found is None:
            return False
        kind, value = found
        if kind == "local" and len(chain) == 1:
            dst = int(value)
            relation = self.use_kind(src)
            self.emit_local(src, dst, relation, line)
            return True
        dotted = scope.expand(chain)
        if dotted is None:
            return False
        if kind == "local" or self.wants(dotted):
            self.emit_ref(src, self.use_kind(src), "py", dotted, line)
        return True

    def _call(
        self, node: ast.Call, src: int, scope: Scope, cls: str | None, stack: list[ast.AST]
    ) -> None:
        stack.extend(node.args)
        stack.extend(keyword.value for keyword in node.keywords)
        module = self._dynamic_import(node, scope)
        if module is not None:
            self.emit_import(src, module, node.lineno, lazy=True, dynamic=True)
        else:
            self._reflective_call(node, src, scope, cls)
        func = node.func
        if not isinstance(func, ast.Attribute):
            stack.append(func)
            return
        chain = dotted_chain(func)
        if chain is not None and self._chain(chain, node.lineno, src, scope):
            return
        name = func.attr
        receiver = func.value
        if cls is not None and isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            self.emit_ref(
                src, self.use_kind(src), "py", f"{cls}.{name}", node.lineno, receiver=receiver.id
            )
            return
        if (
            cls is not None
            and isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super"
        ):
            self.emit_ref(
                src, self.use_kind(src), "py", f"{cls}.{name}", node.lineno, receiver="super"
            )
            return
        if not (name.startswith("__") or name.startswith("assert") or name in NOT_TENSOR_METHODS):
            self.emit_ref(src, self.use_kind(src), "py", "." + name, node.lineno, method=True)
        stack.append(receiver)

    # --- names looked up at run time (indexer.python.reflection) ------------------------

    def _reflective_call(self, node: ast.Call, src: int, scope: Scope, cls: str | None) -> None:
        """``getattr(owner, name)``, ``globals().get(name)``, and ``import_module`` of a
        computed name: refs to what the name's written parts can match."""
        lookup = lookup_call(node)
        if lookup is not None and scope.lookup("getattr") is None:
            owner = self._owner(lookup[0], scope, cls)
            if owner is not None:
                self._later(scope, src, owner, lookup[1], node.lineno, lookup[0])
            return
        name = globals_lookup(node)
        if name is not None:
            self._later(scope, src, self.modname, name, node.lineno, None)
            return
        module = self._computed_import(node, scope)
        if module is not None:
            self.emit_import(src, module, node.lineno, lazy=True, dynamic=True, pattern=True)

    @staticmethod
    def _string_value(scope: Scope, name: str, value: ast.expr) -> None:
        """Note the pattern of a string a name is assigned (``*`` if it is not one)."""
        pattern = string_pattern(value, scope.string)
        scope.store(name, None if pattern is None or pattern == "*" else pattern)

    def _flush_lookups(self, scope: Scope) -> None:
        """The refs of the scope's run-time lookups, now that every binding of the names
        they use is known (``Scope.string``)."""
        for src, owner, expr, line, receiver in self._lookups.pop(id(scope), ()):
            self._attribute_ref(src, owner, name_pattern(expr, scope.string), line, receiver)

    def _globals_ref(self, node: ast.Subscript, src: int, scope: Scope) -> None:
        name = globals_lookup(node)
        if name is not None and scope.lookup("globals") is None:
            self._later(scope, src, self.modname, name, node.lineno, None)

    def _later(
        self, scope: Scope, src: int, owner: str, name: ast.expr, line: int, receiver: Any
    ) -> None:
        """A lookup's ref, made when its scope has been walked (``_flush_lookups``)."""
        self._lookups.setdefault(id(scope), []).append((src, owner, name, line, receiver))

    def _owner(self, expr: ast.expr, scope: Scope, cls: str | None) -> str | None:
        """The dotted name of what ``getattr`` looks in: a module, a class, an op
        namespace (``torch.ops.ns``), ``self``/``cls`` in a method; None if unknown."""
        if isinstance(expr, ast.Name) and expr.id in ("self", "cls") and cls is not None:
            return cls
        chain = dotted_chain(expr)
        if chain is None:
            return None
        found = scope.lookup(chain[0])
        if found is None:
            return None
        dotted = scope.expand(chain)
        if dotted is None or not (found[0] == "local" or self.wants(dotted)):
            return None
        return dotted

    def _attribute_ref(
        self, src: int, owner: str, pattern: str, line: int, receiver: ast.expr | None
    ) -> None:
        extra: dict[str, Any] = {}
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            extra["receiver"] = receiver.id
        if is_pattern(pattern):
            extra["pattern"] = True
        elif not pattern.isidentifier():
            return
        self.emit_ref(src, self.use_kind(src), "py", f"{owner}.{pattern}", line, **extra)

    def _computed_import(self, call: ast.Call, scope: Scope) -> str | None:
        """The module pattern of ``importlib.import_module(expr[, package])`` or
        ``__import__(expr)`` whose name is computed but starts with written text
        (``"pkg.plugins." + name``, ``f".{name}"`` relative to ``__name__``); None for
        a literal name (a plain import) or one with no written start."""
        if not call.args or isinstance(call.args[0], ast.Constant):
            return None
        chain = dotted_chain(call.func)
        if chain is None:
            return None
        if (scope.expand(chain) or ".".join(chain)) not in (
            "importlib.import_module",
            "__import__",
        ):
            return None
        pattern = name_pattern(call.args[0], scope.string)
        if not is_pattern(pattern) or pattern.startswith("*"):
            return None
        if pattern.startswith("."):
            package = call.args[1] if len(call.args) > 1 else None
            package = next((k.value for k in call.keywords if k.arg == "package"), package)
            if not isinstance(package, ast.Name) or package.id not in ("__name__", "__package__"):
                return None
            base = self.modname
            if package.id == "__package__" and not self.is_package:
                base = self.modname.rpartition(".")[0]
            level = len(pattern) - len(pattern.lstrip("."))
            for _ in range(level - 1):
                base = base.rpartition(".")[0]
            pattern = f"{base}.{pattern[level:]}"
        return pattern
