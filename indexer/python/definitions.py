"""The structure pass of the Python extractor: a node for every module-level binding and
definition (classes, functions, methods; their test, fixture and utility kinds), in
source order, and the test conventions read at module level (device-generic and
parametrized instantiation)."""

from __future__ import annotations

import ast
from typing import Any

from indexer.python import testconv
from indexer.python.scope import callee_name, dotted_chain


def doc_line(node: ast.AST) -> str | None:
    try:
        doc = ast.get_docstring(node)  # type: ignore[arg-type]
    except TypeError:
        return None
    if not doc:
        return None
    for line in doc.splitlines():
        if line.strip():
            return line.strip()[:200]
    return None


def _holds_a_table(value: ast.expr) -> bool:
    """A container display, or a call given one (``LazyDict({...})``, ``frozenset({...})``)."""
    displays = (ast.Dict, ast.List, ast.Tuple, ast.Set)
    if isinstance(value, displays):
        return True
    return isinstance(value, ast.Call) and any(
        isinstance(arg, displays) for arg in (*value.args, *(k.value for k in value.keywords))
    )


def _short(node: ast.expr) -> str:
    text = repr(node.value) if isinstance(node, ast.Constant) else ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


def signature(args: ast.arguments) -> str:
    """Parameter names and defaults, as written (annotations left out)."""
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults.extend(args.defaults)
    parts = []
    for index, (arg, default) in enumerate(zip(positional, defaults, strict=False)):
        parts.append(arg.arg if default is None else f"{arg.arg}={_short(default)}")
        if args.posonlyargs and index == len(args.posonlyargs) - 1:
            parts.append("/")
    if args.vararg:
        parts.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        parts.append("*")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
        parts.append(arg.arg if default is None else f"{arg.arg}={_short(default)}")
    if args.kwarg:
        parts.append("**" + args.kwarg.arg)
    return "(" + ", ".join(parts) + ")"


class DefinitionPass:
    """Mixin of :class:`indexer.python.extractor.FileIndexer`: the structure pass."""

    def _forced_test_classes(self, body: list[ast.stmt]) -> set[str]:
        """Classes named in instantiate_*_tests(...) calls are tests whatever their bases."""
        if not self.is_test:
            return set()
        forced = set()
        for call in testconv.module_level_calls(body):
            name = callee_name(call.func)
            instantiates = name in (testconv.DEVICE_GENERIC_CALL, testconv.PARAMETRIZED_CALL)
            if instantiates and call.args and isinstance(call.args[0], ast.Name):
                forced.add(call.args[0].id)
        return forced

    def _collect(self, body: list[ast.stmt], forced: set[str]) -> None:
        """Module-level bindings, in source order, and a node for every definition."""
        test_classes: set[str] = set()
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self._import(stmt, self.module_node, self.scope, lazy=False)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function(stmt, self.module_node, self.modname, None)
            elif isinstance(stmt, ast.ClassDef):
                is_test = self.is_test and testconv.is_test_class(stmt, test_classes, forced)
                if is_test:
                    test_classes.add(stmt.name)
                self._class(stmt, self.module_node, self.modname, is_test, top=True)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self._module_assign(stmt)
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                self.module_vars.add(stmt.target.id)
            else:
                for field_name in ("body", "orelse", "finalbody"):
                    children = getattr(stmt, field_name, None)
                    if children and isinstance(children, list):
                        self._collect(children, forced)
                for handler in getattr(stmt, "handlers", ()) or ():
                    self._collect(handler.body, forced)
                for case in getattr(stmt, "cases", ()) or ():
                    self._collect(case.body, forced)

    def _module_assign(self, stmt: ast.Assign | ast.AnnAssign) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for target in targets:
            if not isinstance(target, ast.Name):
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        self.module_vars.add(node.id)
                continue
            alias = self.alias_of(value, self.scope) if value is not None else None
            if isinstance(value, ast.Call):  # f = helper(...): a definition of f
                end = getattr(stmt, "end_lineno", None) or stmt.lineno
                self.var_lines[target.id] = [stmt.lineno, end]
            if alias is not None:
                if target.id not in self.scope.defs:
                    self.scope.aliases[target.id] = alias
            elif target.id not in self.scope.aliases and target.id not in self.scope.defs:
                self.module_vars.add(target.id)
                if value is not None:
                    self.var_names.setdefault(target.id, set()).update(
                        node.id for node in ast.walk(value) if isinstance(node, ast.Name)
                    )
                    if _holds_a_table(value):
                        self.table_vars.add(target.id)

    def _function(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef,
        parent: int,
        parent_qual: str,
        cls: dict[str, Any] | None,
    ) -> int:
        name = node.name
        attrs: dict[str, Any] = {"signature": signature(node.args)}
        doc = doc_line(node)
        if doc:
            attrs["doc"] = doc
        if isinstance(node, ast.AsyncFunctionDef):
            attrs["async"] = True
        decorators = [d for d in (testconv.decorator_name(dec) for dec in node.decorator_list) if d]
        if decorators:
            attrs["decorators"] = decorators
        dotted = f"{parent_qual}.{name}"
        ops_use = None
        if cls is not None and cls["test"] and name.startswith("test"):
            kind, qualname = "test_function", f"{cls['qualname']}::{name}"
            attrs["pyname"] = dotted
        elif (
            cls is None
            and self.is_test
            and name.startswith("test")
            and not testconv.is_fixture(node)
        ):
            kind, qualname = "test_function", f"{self.path}::{name}"
            attrs["pyname"] = dotted
        elif cls is None and (testconv.is_fixture(node) or self.is_utility):
            kind, qualname = "test_utility", dotted
            attrs["py_kind"] = "function"
            if testconv.is_fixture(node):
                attrs["fixture"] = True
        else:
            kind, qualname = "python_function", dotted
            if cls is not None:
                attrs["method"] = True
        if kind == "test_function":
            attrs.update(testconv.parametrization(node))
            ops_use = testconv.ops_decorator(node, self.ops_aliases)
            if ops_use is not None:
                text = ast.unparse(ops_use.op_list)
                attrs["opinfo_list"] = text if len(text) <= 120 else text[:117] + "..."
            dtypes = testconv.literal_dtypes(node)
            if dtypes:
                attrs["dtypes"] = dtypes
        end = getattr(node, "end_lineno", None) or node.lineno
        index = self.facts.add_node(kind, name, qualname, node.lineno, end, parent, **attrs)
        self.facts.add_local_edge(parent, index, "contains", node.lineno)
        if kind == "test_function" and ops_use is not None:
            self.ops_tests.append((index, ops_use))
        if parent == self.module_node:
            self.scope.defs[name] = index
            self.scope.def_quals[name] = dotted
        self.defs.append((node, index, cls["dotted"] if cls else None))
        self.def_nodes[id(node)] = index
        self.def_class[index] = cls["dotted"] if cls else None
        if cls is not None and kind == "python_function":
            self.methods.setdefault(cls["node"], []).append((index, node.lineno))
        return index

    def _class(
        self, node: ast.ClassDef, parent: int, parent_qual: str, is_test: bool, top: bool
    ) -> int:
        dotted = f"{parent_qual}.{node.name}"
        attrs: dict[str, Any] = {}
        doc = doc_line(node)
        if doc:
            attrs["doc"] = doc
        # ``@torch.jit.script`` on a class compiles its methods when the module is imported.
        decorators = [d for d in (testconv.decorator_name(dec) for dec in node.decorator_list) if d]
        if decorators:
            attrs["decorators"] = decorators
        if is_test:
            kind, qualname = "test_class", f"{self.path}::{node.name}"
            attrs["pyname"] = dotted
        elif top and self.is_utility:
            kind, qualname = "test_utility", dotted
            attrs["py_kind"] = "class"
        else:
            kind, qualname = "python_class", dotted
        end = getattr(node, "end_lineno", None) or node.lineno
        index = self.facts.add_node(kind, node.name, qualname, node.lineno, end, parent, **attrs)
        self.facts.add_local_edge(parent, index, "contains", node.lineno)
        if top:
            self.scope.defs[node.name] = index
            self.scope.def_quals[node.name] = dotted
        self.class_dotted[index] = dotted
        self.defs.append((node, index, None))
        self.def_nodes[id(node)] = index
        info = {"test": is_test, "qualname": qualname, "dotted": dotted, "node": index}
        for stmt in self._class_body(node.body):
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):  # class-level lists, which @ops decorators in the class body may name
                self.class_values.setdefault(index, {})[stmt.targets[0].id] = stmt.value
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function(stmt, index, dotted, info)
            elif isinstance(stmt, ast.ClassDef):
                self._class(stmt, index, dotted, False, top=False)
        return index

    @staticmethod
    def _class_body(body: list[ast.stmt]):
        for stmt in body:
            if isinstance(stmt, (ast.If, ast.Try)):
                yield from DefinitionPass._class_body(stmt.body)
                yield from DefinitionPass._class_body(stmt.orelse)
            else:
                yield stmt

    def _class_bases(self) -> None:
        for node, index, _ in self.defs:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = []
            for base in node.bases:
                chain = dotted_chain(base)
                if chain is None:
                    continue
                bases.append(self.scope.expand(chain) or ".".join(chain))
            if bases:
                self.facts.nodes[index].attrs["bases"] = bases

    def _apply_instantiations(self, body: list[ast.stmt]) -> None:
        if not self.is_test:
            return
        for call in testconv.module_level_calls(body):
            name = callee_name(call.func)
            if name not in (testconv.DEVICE_GENERIC_CALL, testconv.PARAMETRIZED_CALL):
                continue
            if not call.args or not isinstance(call.args[0], ast.Name):
                continue
            index = self.scope.defs.get(call.args[0].id)
            if index is None or self.facts.nodes[index].kind != "test_class":
                continue
            attrs = self.facts.nodes[index].attrs
            if name == testconv.PARAMETRIZED_CALL:
                attrs["parametrized"] = True
                continue
            variants, exact = testconv.device_variants(call, call.args[0].id)
            attrs["device_generic"] = True
            attrs["variants"] = sorted(set(attrs.get("variants", [])) | set(variants))
            if not exact:
                attrs["variants_exact"] = False
            attrs.setdefault("instantiated_at", call.lineno)
