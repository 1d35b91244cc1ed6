"""String-keyed registries in the Python extractor: entries, what they load, who names them.

A harness's ``[registries] tables`` names files whose string-keyed tables load a class
by name at run time (vLLM: the model registry, ``"LlamaForCausalLM": ("llama",
"LlamaForCausalLM")``, imported lazily; the quantization method table, ``"fp8":
Fp8Config``; the tests' examples table, ``"LlamaForCausalLM":
_HfExamplesInfo("meta-llama/Llama-3.2-1B-Instruct")``). Each key of such a table becomes
a ``registry_entry`` node that ``registers`` what it loads: a ``("module", "Class")``
pair or a class name is the class; a call's string arguments are other names of the key
(a model id: an entry of its own that ``registers`` the key's entries). The code holding
the table ``references`` each entry, so a reached entry reaches the table's users as
before. ``[registries] decorators`` register a class under their first string argument
(``@register_quantization_config("my_quant")``).

Test-side code (test files, test utilities, anything under the test directories) names
entries by their strings: every string constant shaped like a key or a model id is a
``registry`` ref, resolved by the link step to the entries so named (none: dropped).
docs/selection.md "Registries" describes what selection makes of them.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from typing import Any

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.python.scope import absolute_module, callee_name, dotted_chain

ENTRY = NodeKind.REGISTRY_ENTRY.value
REGISTERS = EdgeKind.REGISTERS.value
SCHEME = "registry"  # the ref scheme of a string naming entries (resolve.resolve_registry)
# What a key or a model id looks like: one word, or two joined by '/' (org/model); no
# spaces, so prose, paths and format strings are not names.
NAME_SHAPE = re.compile(r"[A-Za-z0-9][\w.+\-]*(?:/[\w.+\-]+)?\Z")
MAX_NAME = 200
# The name of the entry standing for a model id no table maps (no string has its shape).
ANY_ID = "*"


# What an org/name string is when it is recognisably no model id: a media type
# (``application/json``), or a file by its extension (``csrc/ops.cpp``,
# ``examples/template.jinja``). Fixed lists, not the tree's directories: a string's
# resolution must not depend on files an update may add (indexer/relink.py).
MEDIA_TYPES = frozenset({"application", "audio", "font", "image", "multipart", "text", "video"})
# fmt: off
FILE_EXTENSIONS = frozenset({
    "bin", "c", "cc", "cpp", "csv", "cu", "cuh", "gz", "h", "hpp", "jinja", "jpeg", "jpg",
    "json", "jsonl", "md", "mp4", "parquet", "png", "pt", "py", "pyi", "safetensors", "sh",
    "toml", "txt", "wav", "yaml", "yml",
})
# fmt: on


def could_be_model_id(value: str) -> bool:
    """Whether an ``org/name`` string no table maps may name a checkpoint (and so load any
    architecture): not a media type nor a file name (indexer/python/resolve.py
    ``resolve_registry``); hub ids have dots too (``Llama-3.2-1B``), never these suffixes."""
    owner, _, name = value.partition("/")
    if owner.casefold() in MEDIA_TYPES:
        return False
    stem, dot, suffix = name.rpartition(".")
    return not (dot and stem and suffix.casefold() in FILE_EXTENSIONS)


def is_table_file(path: str, patterns: list[str]) -> bool:
    return any(path == p or fnmatch.fnmatchcase(path, p) for p in patterns)


def is_name(value: str) -> bool:
    return 1 < len(value) <= MAX_NAME and NAME_SHAPE.match(value) is not None


def _string(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class RegistryTables:
    """The entries of one file: its registry tables (if the harness names the file) and
    its registering decorators."""

    # ``indexer``: the extractor's FileIndexer (not imported: it imports this module);
    # ``tree``: its parse of the file, read again here for imports inside functions.
    def __init__(self, indexer: Any, decorators: frozenset[str], tree: ast.Module) -> None:
        self.fi = indexer
        self.decorators = decorators
        self.tree = tree
        self.package = indexer.modname if indexer.is_package else indexer.modname.rpartition(".")[0]
        self._imports: dict[str, str] | None = None
        self._aliased: dict[str, int] = {}  # key -> line of its first alias (a model id)

    # --- tables --------------------------------------------------------------------------

    def tables(self) -> None:
        self._tables(self.tree.body, self.fi.module_node, self.fi.modname)
        if self._aliased:
            self._any_id()

    def _any_id(self) -> None:
        """The entry a model id no table maps stands for: a test loading one may load any
        architecture this file's tables give ids to (its checkpoint's config decides),
        so it ``registers`` every such key (docs/selection.md "Registries")."""
        first = min(self._aliased.values())
        wildcard = self.fi.facts.add_node(
            ENTRY, ANY_ID, f"{self.fi.modname}[any model id no table maps]", first, first,
            self.fi.module_node, table="*",
        )  # fmt: skip
        for key, line in sorted(self._aliased.items()):
            self.fi.emit_ref(wildcard, REGISTERS, SCHEME, key, line)

    def _tables(self, body: list[ast.stmt], owner: int, owner_qual: str) -> None:
        for stmt in body:
            node = self.fi.def_nodes.get(id(stmt))
            if node is not None:
                inner = self.fi.facts.nodes[node]
                self._tables(stmt.body, node, inner.qualname)  # type: ignore[attr-defined]
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if names and isinstance(stmt.value, ast.Dict):
                    self._table(stmt.value, owner, f"{owner_qual}.{names[0]}", names[0])
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner_body = getattr(stmt, field, None)
                if isinstance(inner_body, list):
                    stmts = [s for s in inner_body if isinstance(s, ast.stmt)]
                    for handler in inner_body:
                        if isinstance(handler, ast.ExceptHandler):
                            stmts.extend(handler.body)
                    self._tables(stmts, owner, owner_qual)

    def _table(self, table: ast.Dict, owner: int, qual: str, var: str) -> None:
        chosen: list[tuple[str, int, ast.expr]] = []  # keys whose class is chosen at run time
        classes = 0
        for key_node, value in zip(table.keys, table.values, strict=True):
            key = _string(key_node)
            if key is None:
                continue  # a spread of another table (``**other``): its own entries
            line = key_node.lineno  # type: ignore[union-attr]
            pair = string_pair(value)
            if pair is not None:
                module, name = pair
                if "." not in module and self.package:
                    module = f"{self.package}.{module}"
                entry = self._entry(key, f"{qual}[{key}]", owner, line, var)
                self.fi.emit_ref(entry, REGISTERS, "py", f"{module}.{name}", line)
                classes += 1
            elif isinstance(value, ast.Call):
                for alias, alias_line in self._aliases(value, key):
                    self._aliased.setdefault(key, line)
                    entry = self._entry(
                        alias, f"{qual}[{key}]={alias}", owner, alias_line, var, key
                    )
                    self.fi.emit_ref(entry, REGISTERS, SCHEME, key, alias_line)
            elif isinstance(value, (ast.Name, ast.Attribute)):
                dotted = self._dotted(value)
                if dotted is None:
                    chosen.append((key, line, value))
                    continue
                entry = self._entry(key, f"{qual}[{key}]", owner, line, var)
                self.fi.emit_ref(entry, REGISTERS, "py", dotted, line)
                classes += 1
        if not classes:
            return  # no class in the table (``{"hash": module_hash}``): no registry
        for key, line, value in chosen:
            # A class chosen at run time (``"deepseek_v4_fp8": deepseek_config``, a local
            # set in branches): the entry loads whatever the code holding the table may
            # choose, so it registers that code, and a test naming the key is kept with
            # what reaches it (docs/selection.md "Registries").
            entry = self._entry(
                key, f"{qual}[{key}]", owner, line, var, unresolved=ast.unparse(value)
            )
            self.fi.emit_local(entry, owner, REGISTERS, line)

    def _entry(
        self,
        name: str,
        qual: str,
        owner: int,
        line: int,
        table: str,
        alias_of: str | None = None,
        unresolved: str | None = None,
    ) -> int:
        attrs: dict[str, str] = {"table": table}
        if alias_of is not None:
            attrs["alias_of"] = alias_of
        if unresolved is not None:
            attrs["unresolved"] = unresolved
        entry = self.fi.facts.add_node(ENTRY, name, qual, line, line, owner, **attrs)
        # The code holding the table names the entry, as it named the class before: what
        # reaches the entry reaches the table's users (docs/selection.md "Registries").
        self.fi.emit_local(owner, entry, self.fi.use_kind(owner), line)
        return entry

    @staticmethod
    def _aliases(call: ast.Call, key: str) -> list[tuple[str, int]]:
        """The name-shaped strings a call is given (``_HfExamplesInfo("org/model",
        extras={"v2": "org/model-v2"})``): each names the key's class too."""
        found: dict[str, int] = {}
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            for node in ast.walk(arg):
                value = _string(node)  # type: ignore[arg-type]
                if value is not None and value != key and "/" in value and is_name(value):
                    found.setdefault(value, node.lineno)  # type: ignore[attr-defined]
        return sorted(found.items())

    def _dotted(self, value: ast.expr) -> str | None:
        chain = dotted_chain(value)
        if chain is None:
            return None
        dotted = self.fi.scope.expand(chain)
        if dotted is not None:
            return dotted
        head = self._file_imports().get(chain[0])  # an import inside a function
        return ".".join([head, *chain[1:]]) if head else None

    def _file_imports(self) -> dict[str, str]:
        """Every name an import statement of the file binds, wherever it stands."""
        if self._imports is None:
            self._imports = {}
            for node in ast.walk(self.tree):
                if isinstance(node, ast.ImportFrom):
                    module = absolute_module(
                        node.module, node.level, self.fi.modname, self.fi.is_package
                    )
                    if module is None:
                        continue
                    for alias in node.names:
                        if alias.name != "*":
                            self._imports[alias.asname or alias.name] = f"{module}.{alias.name}"
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            self._imports[alias.asname] = alias.name
        return self._imports

    # --- decorators ----------------------------------------------------------------------

    def decorated(self) -> None:
        """``@register_x("name") class C``: an entry "name" that registers C."""
        for stmt in ast.walk(self.tree):
            if not isinstance(stmt, ast.ClassDef):
                continue
            node = self.fi.def_nodes.get(id(stmt))
            if node is None:
                continue
            for decorator in stmt.decorator_list:
                if not isinstance(decorator, ast.Call):
                    continue
                if callee_name(decorator.func) not in self.decorators or not decorator.args:
                    continue
                key = _string(decorator.args[0])
                if key is None:
                    continue
                cls = self.fi.facts.nodes[node]
                entry = self.fi.facts.add_node(
                    ENTRY, key, f"{cls.qualname}[{key}]", decorator.lineno, decorator.lineno,
                    self.fi.module_node, decorator=callee_name(decorator.func),
                )  # fmt: skip
                self.fi.emit_local(entry, node, REGISTERS, decorator.lineno)


def string_pair(node: ast.expr | None) -> tuple[str, str] | None:
    """("module.path", "Name") as string constants, or None: a table's lazy import of a
    class (the registries here, and the extractor's string tables of other code)."""
    if not isinstance(node, ast.Tuple) or len(node.elts) != 2:
        return None
    texts = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if len(texts) != 2 or not texts[1].isidentifier():
        return None
    if not all(part.isidentifier() for part in texts[0].split(".")):
        return None
    return texts[0], texts[1]
