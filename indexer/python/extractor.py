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
from indexer.python.definitions import DefinitionPass, doc_line
from indexer.python.library_ops import LibraryOps
from indexer.python.modname import PackageLayout
from indexer.python.opinfo import OpinfoScanner
from indexer.python.registries import RegistryTables, is_table_file, string_pair
from indexer.python.scope import (
    Scope,
    absolute_module,
    callee_name,
    dotted_chain,
)
from indexer.python.source_facts import judge_source
from indexer.python.walk import ReferencePass

TEST_KINDS = frozenset({"test_file", "test_class", "test_function"})
DYNAMIC_IMPORTS = frozenset({"importlib.import_module", "__import__", "pytest.importorskip"})
DOCSTRING_WRAPPERS = frozenset({"_add_docstr", "add_docstr"})
OPINFO_HINTS = ("Info(", "ops(", "_db")


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


class FileIndexer(DefinitionPass, ReferencePass):
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
        # Run-time lookups per scope, made into refs once the scope is walked (walk.py).
        self._lookups: dict[int, list[tuple[int, str, ast.expr, int, Any]]] = {}
        self.module_vars: set[str] = set()
        # module variable -> [first, last line] of the assignment binding it to a call's
        # result (max_pool2d = boolean_dispatch(...)): where the name is defined
        self.var_lines: dict[str, list[int]] = {}
        self.var_names: dict[str, set[str]] = {}  # module variable -> names its value uses
        self.table_vars: set[str] = set()  # module variables holding a container display
        self.code_vars: frozenset[str] = frozenset()  # see _code_vars
        self.ops_tests: list[tuple[int, testconv.OpsUse]] = []  # (test node, its @ops)
        self.ops_aliases = testconv.OpsAliases()
        self.class_values: dict[int, dict[str, ast.expr]] = {}  # class node -> name -> value
        # Dotted class -> names its methods read as ``self.name`` without calling them, and
        # names they assign as ``self.name = ...`` (data, not methods).
        self.self_loads: dict[str, set[str]] = {}
        self.self_stores: dict[str, set[str]] = {}
        self.base = None if self.in_package else self.modname.rpartition(".")[0] or None
        self.top_package = self.modname.split(".", 1)[0]
        # String-keyed registries (indexer/python/registries.py): whether this file holds
        # registry tables, and whether its strings name entries (test-side code, where the
        # harness has registries).
        tables = manifest.list("registries", "tables")
        self.registry_decorators = frozenset(manifest.list("registries", "decorators"))
        self.registry_tables = is_table_file(src.path, tables)
        self.registry_names = bool(tables or self.registry_decorators) and (
            self.is_test or self.is_utility or under_any(src.path, list(self.layout.test_dirs))
        )

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
        self.ops_aliases = testconv.OpsAliases.of(tree.body)
        self._collect(tree.body, forced)
        self.code_vars = self._code_vars()
        self._class_bases()
        self._apply_instantiations(tree.body)
        summaries: dict[str, Any] = {}
        text = self.src.text
        if (
            self.is_test or self.is_utility or under_any(self.path, list(self.layout.test_dirs))
        ) and any(hint in text for hint in OPINFO_HINTS):
            summaries = OpinfoScanner(self).scan(tree.body)
        self._import_parent_package()
        self._walk_module(tree.body)
        registries = RegistryTables(self, self.registry_decorators, tree)
        if self.registry_tables:
            registries.tables()
        else:
            self._string_registries(tree.body)
        if self.registry_decorators and any(d in text for d in self.registry_decorators):
            registries.decorated()
        if "library" in text or "custom_op" in text:
            LibraryOps(self).read(tree.body)
        attrs = self.facts.nodes[self.module_node].attrs
        bindings = {k: v for k, v in self.scope.aliases.items() if v is not None}
        if bindings:
            attrs["bindings"] = bindings
        if self.stars:
            attrs["stars"] = self.stars
        variables = sorted(self.module_vars - set(bindings) - set(self.scope.defs))
        if variables:
            attrs["vars"] = variables
        # Names bound to a call's result (a variable, or an alias through a wrapper such as
        # _add_docstr), where no def of the name comes later.
        lines = {
            name: where
            for name, where in sorted(self.var_lines.items())
            if name not in self.scope.defs
        }
        if lines:
            attrs["var_lines"] = lines
        if summaries:
            attrs["opinfo_lists"] = summaries
        self._value_methods()
        definitions = [(definition, node) for definition, node, _ in self.defs]
        judge_source(self.facts, tree, text, definitions, library=not self.is_test)

    def _string_registries(self, body: list[ast.stmt]) -> None:
        """A module-level mapping to ("module", "Class") pairs is a registry that imports
        those classes by name at run time (vLLM's model registry: ``"LlamaForCausalLM":
        ("llama", "LlamaForCausalLM")``, a module of this package, or a dotted one): each
        pair references the class, so a model reached reaches the registry's users."""
        package = self.modname if self.is_package else self.modname.rpartition(".")[0]
        for stmt in body:
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
            if not isinstance(value, ast.Dict):
                continue
            for item in value.values:
                pair = string_pair(item)
                if pair is None:
                    continue
                module, name = pair
                if "." not in module and package:
                    module = f"{package}.{module}"
                self.emit_ref(
                    self.module_node, self.use_kind(self.module_node), "py",
                    f"{module}.{name}", item.lineno,
                )  # fmt: skip

    def _code_vars(self) -> frozenset[str]:
        """Module variables whose value names definitions: registries of the module's own
        (``_ACTIVATION_REGISTRY = LazyDict({"gelu": lambda: GELU(), ...})``), and tables
        of imported ones (``{nn.Linear: nnqd.Linear}``, a container display). A function
        here reading one reaches what it holds (``get_act_fn`` returns an entry), so its
        use is a reference to the module's name, as an importer's would be. A logger or a
        constant is not one. None in a test file: what reaches its module selects it whole,
        and its tests' own edges to it would read as evidence against narrowing it."""
        if self.is_test:
            return frozenset()
        defs = set(self.scope.defs)
        imported = defs | {name for name, target in self.scope.aliases.items() if target}
        return frozenset(
            var
            for var, names in self.var_names.items()
            if names & defs or (var in self.table_vars and names & imported)
        )

    def _value_methods(self) -> None:
        """Record on each class the names its methods hand out as values without calling
        them (``return self.forward_cuda``: vLLM's CustomOp picks its forward that way), so
        that the walk treats those methods, and their overrides, as run through the class."""
        for index, dotted in self.class_dotted.items():
            names = self.self_loads.get(dotted, set()) - self.self_stores.get(dotted, set())
            if names:
                self.facts.nodes[index].attrs["value_methods"] = sorted(names)

    def _module_node(self, tree: ast.Module | None, end: int) -> None:
        doc = doc_line(tree) if tree is not None else None
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

    def _import_parent_package(self) -> None:
        """Importing ``pkg.mod`` runs ``pkg/__init__.py`` first: an import of the parent
        package at line 1, so code the package's import runs reaches the importers of
        every module below it (``from pkg.mod import f`` in a test)."""
        parent = self.modname.rpartition(".")[0]
        if parent and self.in_package:
            self.emit_import(self.module_node, parent, 1, implicit="parent package")

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
