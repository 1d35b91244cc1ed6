"""The Python extractor: one ``ast`` parse per file, in the worker processes.

For each file it records the module (a ``python_module`` node, or a ``test_file`` node
for a test file), its classes and functions (test classes and functions, test
utilities and fixtures where the harness says so), OpInfo entries, import refs, and refs
from every definition to the names it uses, expanded through the file's aliases
(``ops.rms_norm`` -> ``torch.ops._C.rms_norm``). Imports into a depended-on harness's
package become local ``external_symbol`` nodes with ``external_ref`` edges.
"""

from __future__ import annotations

import ast
from typing import Any

from indexer.extract.discover import is_test_file
from indexer.extract.source import SourceFile
from indexer.graph.facts import FILE_NODE, FileFacts
from indexer.harness import Manifest
from indexer.paths import under_any
from indexer.python import testconv
from indexer.python.modname import PackageLayout
from indexer.python.opinfo import OpinfoScanner
from indexer.python.scope import (
    Scope,
    absolute_module,
    callee_name,
    dotted_chain,
    parameter_names,
)

TEST_KINDS = frozenset({"test_file", "test_class", "test_function"})
DYNAMIC_IMPORTS = frozenset({"importlib.import_module", "__import__", "pytest.importorskip"})
DOCSTRING_WRAPPERS = frozenset({"_add_docstr", "add_docstr"})
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
OPINFO_HINTS = ("Info(", "ops(", "_db")


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


def _doc(node: ast.AST) -> str | None:
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


class PythonExtractor:
    name = "python"

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.layout = PackageLayout.from_manifest(manifest)

    def wants(self, src: SourceFile) -> bool:
        # A .pyi stub declares what runs elsewhere (torch/_C/*.pyi: compiled bindings;
        # parameter.pyi beside parameter.py): its defs would shadow the real ones.
        return src.language == "python" and src.path.endswith(".py")

    def extract(self, src: SourceFile, facts: FileFacts) -> None:
        FileIndexer(self, src, facts).run()


class FileIndexer:
    """Extraction state for one file: its scope, nodes made so far, refs already emitted."""

    def __init__(self, extractor: PythonExtractor, src: SourceFile, facts: FileFacts) -> None:
        manifest = extractor.manifest
        self.src = src
        self.facts = facts
        self.layout = extractor.layout
        self.path = src.path
        self.modname, self.in_package = self.layout.module_name(src.path, manifest)
        self.is_test = is_test_file(src.path, manifest)
        self.is_utility = under_any(src.path, list(self.layout.utility_dirs))
        self.is_package = src.path.rsplit("/", 1)[-1] in ("__init__.py", "__init__.pyi")
        self.scope = Scope()
        self.module_node = FILE_NODE
        self.consumed: set[int] = set()  # ids of ast nodes already attributed (OpInfo entries)
        self._seen: set[tuple[Any, ...]] = set()
        self._external: dict[str, int] = {}
        self.defs: list[tuple[ast.AST, int, str | None]] = []  # (def, node, enclosing class)
        self.def_nodes: dict[int, int] = {}  # id(ast def) -> node
        self.def_class: dict[int, str | None] = {}  # function node -> enclosing class
        self.methods: dict[int, list[tuple[int, int]]] = {}  # class node -> (method, line)
        self.class_dotted: dict[int, str] = {}  # node -> dotted class name
        self.stars: list[str] = []
        self.module_vars: set[str] = set()
        self.ops_tests: list[tuple[int, ast.Call]] = []
        self.class_values: dict[int, dict[str, ast.expr]] = {}  # class node -> name -> value
        self.base = None if self.in_package else self.modname.rpartition(".")[0] or None
        self.top_package = self.modname.split(".", 1)[0]

    # --- driver ------------------------------------------------------------------------

    def run(self) -> None:
        try:
            tree = ast.parse(self.src.data, filename=self.path)
        except (SyntaxError, ValueError) as exc:
            self.facts.parse_errors += 1
            line = getattr(exc, "lineno", None) or 1
            self.facts.error = f"Python syntax error at line {line}: {getattr(exc, 'msg', exc)}"
            self._module_node(None, 1)
            return
        end = max(1, self.facts.nodes[FILE_NODE].end_line if self.facts.nodes else 1)
        self._module_node(tree, end)
        forced = self._forced_test_classes(tree.body)
        self._collect(tree.body, forced)
        self._class_bases()
        self._apply_instantiations(tree.body)
        summaries: dict[str, Any] = {}
        text = self.src.text
        if (
            self.is_test or self.is_utility or under_any(self.path, list(self.layout.test_dirs))
        ) and any(hint in text for hint in OPINFO_HINTS):
            summaries = OpinfoScanner(self).scan(tree.body)
        self._walk_module(tree.body)
        attrs = self.facts.nodes[self.module_node].attrs
        bindings = {k: v for k, v in self.scope.aliases.items() if v is not None}
        if bindings:
            attrs["bindings"] = bindings
        if self.stars:
            attrs["stars"] = self.stars
        variables = sorted(self.module_vars - set(bindings) - set(self.scope.defs))
        if variables:
            attrs["vars"] = variables
        if summaries:
            attrs["opinfo_lists"] = summaries

    def _module_node(self, tree: ast.Module | None, end: int) -> None:
        doc = _doc(tree) if tree is not None else None
        extra = {"doc": doc} if doc else {}
        if self.is_test:
            self.module_node = self.facts.add_node(
                "test_file", self.path.rsplit("/", 1)[-1], self.path, 1, end, FILE_NODE,
                module=self.modname, **extra,
            )  # fmt: skip
        else:
            self.module_node = self.facts.add_node(
                "python_module", self.modname.rsplit(".", 1)[-1], self.modname, 1, end,
                FILE_NODE, package=self.is_package, **extra,
            )  # fmt: skip
        self.facts.add_local_edge(FILE_NODE, self.module_node, "contains", 1)

    # --- emitting ----------------------------------------------------------------------

    def use_kind(self, src: int) -> str:
        return "covers" if self.facts.nodes[src].kind in TEST_KINDS else "references"

    def emit_ref(
        self, src: int, kind: str, scheme: str, target: str, line: int, **attrs: Any
    ) -> None:
        key = (src, kind, scheme, target)
        if key in self._seen:
            return
        self._seen.add(key)
        if (
            self.base
            and scheme == "py"
            and not attrs.get("method")
            and target.split(".", 1)[0] not in self.layout.own_roots
            and not self.layout.is_external(target)
        ):
            attrs["base"] = self.base  # maybe a sibling module imported by its bare name
        self.facts.add_ref(src, kind, scheme, target, line, **attrs)

    def emit_local(self, src: int, dst: int, kind: str, line: int) -> None:
        key = (src, kind, "local", dst)
        if key in self._seen or src == dst:
            return
        self._seen.add(key)
        self.facts.add_local_edge(src, dst, kind, line)

    def wants(self, dotted: str) -> bool:
        """Whether a dotted name may name something in this index (so a ref is worth it)."""
        layout = self.layout
        if layout.is_external(dotted):
            return ".ops." in dotted  # an extension's own ops live under torch.ops
        if layout.is_own(dotted):
            return True
        top = dotted.split(".", 1)[0]
        if self.in_package and top == self.top_package:
            return True  # the file's own package, declared or not
        return not self.in_package and layout.is_local_candidate(dotted)

    def emit_import(self, src: int, target: str, line: int, **attrs: Any) -> None:
        if self.layout.is_external(target):
            node = self._external.get(target)
            if node is None:
                node = self.facts.add_node(
                    "external_symbol", target.rsplit(".", 1)[-1], target, line, line, FILE_NODE,
                    package=target.split(".", 1)[0],
                )  # fmt: skip
                self._external[target] = node
            key = (self.module_node, "external_ref", "local", node)
            if key not in self._seen:
                self._seen.add(key)
                self.facts.add_local_edge(self.module_node, node, "external_ref", line, **attrs)
            return
        if target == self.modname or not self.wants(target):
            return
        kind = "imports"
        if self.facts.nodes[src].kind in TEST_KINDS:
            kind = "covers"
            attrs["via"] = "import"
        self.emit_ref(src, kind, "py", target, line, **attrs)

    # --- structure pass ----------------------------------------------------------------

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
            if alias is not None:
                if target.id not in self.scope.defs:
                    self.scope.aliases[target.id] = alias
            elif target.id not in self.scope.aliases and target.id not in self.scope.defs:
                self.module_vars.add(target.id)

    def alias_of(self, value: ast.expr, scope: Scope) -> str | None:
        """The dotted name an assignment makes its target stand for, if any."""
        if isinstance(value, ast.Call):
            name = callee_name(value.func)
            if name in DOCSTRING_WRAPPERS and value.args:
                value = value.args[0]
            else:
                return self._dynamic_import(value, scope)
        chain = dotted_chain(value)
        if chain is None:
            return None
        return scope.expand(chain)

    def _dynamic_import(self, call: ast.Call, scope: Scope) -> str | None:
        if not call.args or not isinstance(call.args[0], ast.Constant):
            return None
        module = call.args[0].value
        if not isinstance(module, str) or module.startswith("."):
            return None
        chain = dotted_chain(call.func)
        if chain is None:
            return None
        expanded = scope.expand(chain) or ".".join(chain)
        return module if expanded in DYNAMIC_IMPORTS else None

    def _import(
        self, stmt: ast.Import | ast.ImportFrom, src: int, scope: Scope, lazy: bool
    ) -> None:
        extra = {"lazy": True} if lazy else {}
        line = stmt.lineno
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    scope.aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".", 1)[0]
                    scope.aliases[top] = top
                self.emit_import(src, alias.name, line, **extra)
            return
        module = absolute_module(stmt.module, stmt.level, self.modname, self.is_package)
        if module is None:
            return
        if not self.layout.is_external(module):  # external refs name the symbols imported
            self.emit_import(src, module, line, **extra)
        for alias in stmt.names:
            if alias.name == "*":
                if scope is self.scope:
                    self.stars.append(module)
                continue
            scope.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
            self.emit_import(src, f"{module}.{alias.name}", line, **extra)

    def _function(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef,
        parent: int,
        parent_qual: str,
        cls: dict[str, Any] | None,
    ) -> int:
        name = node.name
        attrs: dict[str, Any] = {"signature": signature(node.args)}
        doc = _doc(node)
        if doc:
            attrs["doc"] = doc
        if isinstance(node, ast.AsyncFunctionDef):
            attrs["async"] = True
        decorators = [d for d in (testconv.decorator_name(dec) for dec in node.decorator_list) if d]
        if decorators:
            attrs["decorators"] = decorators
        dotted = f"{parent_qual}.{name}"
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
            ops_call = testconv.ops_decorator(node)
            if ops_call is not None:
                text = ast.unparse(ops_call.args[0])
                attrs["opinfo_list"] = text if len(text) <= 120 else text[:117] + "..."
            dtypes = testconv.literal_dtypes(node)
            if dtypes:
                attrs["dtypes"] = dtypes
        end = getattr(node, "end_lineno", None) or node.lineno
        index = self.facts.add_node(kind, name, qualname, node.lineno, end, parent, **attrs)
        self.facts.add_local_edge(parent, index, "contains", node.lineno)
        if kind == "test_function" and attrs.get("opinfo_list"):
            self.ops_tests.append((index, testconv.ops_decorator(node)))  # type: ignore[arg-type]
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
        doc = _doc(node)
        if doc:
            attrs["doc"] = doc
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
                yield from FileIndexer._class_body(stmt.body)
                yield from FileIndexer._class_body(stmt.orelse)
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

    # --- refs pass ---------------------------------------------------------------------

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
        for index, call in self.ops_tests:
            self._ops_ref(index, call)

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
                    for inner in FileIndexer._class_body([stmt]):
                        if id(inner) in self.def_nodes:
                            self._walk_def(inner)
                        else:
                            self.walk_stmts([inner], index, class_scope, None)
                else:
                    self.walk_stmts([stmt], index, class_scope, None)
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

    def _ops_ref(self, index: int, call: ast.Call) -> None:
        """The ``opinfo`` ref of an ``@ops(list)`` test: resolved to every entry of the list."""
        arg = call.args[0]
        owner = self.facts.nodes[index].parent
        if isinstance(arg, ast.Name) and arg.id in self.class_values.get(owner or 0, {}):
            arg = self.class_values[owner or 0][arg.id]  # a list the test's class defines
        chain = dotted_chain(arg)
        scanner = OpinfoScanner(self)
        summary = scanner.summarize(arg, f"<{self.facts.nodes[index].name}>")
        if chain is not None and summary.parts and not summary.unknown and summary.parts[0][0]:
            target = summary.parts[0][0]
            self.emit_ref(index, "covers", "opinfo", target, call.lineno)
            return
        self.emit_ref(
            index,
            "covers",
            "opinfo",
            ast.unparse(arg)[:200],
            call.lineno,
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
                    elif local:
                        scope.aliases[target.id] = self.alias_of(stmt.value, scope)  # type: ignore[attr-defined]
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
                self.walk_stmts(stmt.body, src, Scope(parent=scope), None)  # type: ignore[attr-defined]
            elif kind is ast.AnnAssign:
                if stmt.value is not None:  # type: ignore[attr-defined]
                    self.walk_expr(stmt.value, src, scope, cls)  # type: ignore[attr-defined]
                if local and type(stmt.target) is ast.Name:  # type: ignore[attr-defined]
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
                    self._chain([node.id], node.lineno, src, scope)
                elif local:
                    scope.aliases[node.id] = None
            elif kind is ast.Attribute:
                chain = dotted_chain(node)
                if chain is not None:
                    if type(node.ctx) is ast.Load:
                        self._chain(chain, node.lineno, src, scope)
                else:
                    push(node.value)
            elif kind is ast.Call:
                if id(node) not in consumed:
                    self._call(node, src, scope, cls, stack)
            elif kind is ast.Constant or node is None:
                continue
            elif kind is ast.Lambda:
                for default in node.args.defaults:
                    push(default)
                self._walk_function_body(node, src, scope, cls)
            else:
                if kind is ast.BinOp and type(node.op) is ast.MatMult:
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
