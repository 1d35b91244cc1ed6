"""Code that runs when an extension's library loads, and the Python that loads it.

A registration block (``TORCH_LIBRARY`` and the manifest's other library macros: the
dispatcher parses each schema and checks each kernel's signature against it there) and a
namespace-scope static initializer that calls code (``static auto registry =
torch::RegisterOperators().op(...)``) run when the library is loaded. One that fails
aborts the load, and with it every test importing the module that loads the library,
whichever op it names. docs/selection.md "Load-time code" says what counts and why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from indexer.bindings.library import local_wrappers
from indexer.diff import run_git
from indexer.extract.discover import is_test_file
from indexer.graph.vocabulary import NodeKind
from indexer.harness import Manifest
from indexer.paths import under_any
from indexer.select.cpp_scope import CONTAINERS
from indexer.select.model import Entity
from indexer.select.placed import (
    FUNCTION_KINDS,
    MEMBERS_SHOWN,
    PYTHON_DEF_KINDS,
    FilePlacement,
    innermost,
)
from indexer.select.tokens import cpp_tree


def library_macros(manifest: Manifest, *texts: bytes | None) -> set[str]:
    """The macros opening a registration block (``TORCH_LIBRARY_FRAGMENT(ns, m) {``): the
    manifest's, and those ``texts`` define as one (``#define W(N, M) TORCH_LIBRARY(N, M)``,
    as vLLM's registration.h does), as the registration extractor reads them."""
    macros = manifest.list("bindings", "torch_library_macros") + manifest.list(
        "bindings", "registration_wrappers"
    )
    wrappers = [name for text in texts if text for name in local_wrappers(text, macros)]
    return {*macros, *wrappers}


def _block_macro(node, source: bytes, macros: set[str]) -> str | None:
    """The macro of a registration block (it parses as a function definition), else None."""
    declarator = node.child_by_field_name("declarator")
    if declarator is None or declarator.type != "function_declarator":
        return None
    name = declarator.child_by_field_name("declarator")
    if name is None or name.type != "identifier":
        return None
    text = source[name.start_byte : name.end_byte].decode("utf-8", "replace")
    return text if text in macros else None


def _lambda_interiors(node) -> list[tuple[int, int]]:
    """1-based line spans strictly inside the bodies of the lambdas under ``node``: a
    kernel written in place runs when the op is called, not when the block registers it."""
    spans = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "lambda_expression":
            body = current.child_by_field_name("body")
            if body is not None and body.end_point[0] - body.start_point[0] > 1:
                spans.append((body.start_point[0] + 2, body.end_point[0]))
        stack.extend(current.children)
    return spans


def _calls_code(declaration) -> bool:
    """Whether a namespace-scope declaration's initializer runs code: a call in its value,
    or constructor arguments (``static Foo foo(1, 2);``). constexpr/constinit ones are
    evaluated by the compiler."""
    for child in declaration.children:
        if child.type == "type_qualifier" and child.text in (b"constexpr", b"constinit"):
            return False
    for child in declaration.children:
        if child.type != "init_declarator":
            continue
        stack = [c for c in child.children if c.type != "identifier"]
        while stack:
            current = stack.pop()
            if current.type in ("call_expression", "argument_list", "new_expression"):
                return True
            stack.extend(current.children)
    return False


def load_time_lines(source: bytes, lines: Iterable[int], macros: set[str]) -> dict[int, str]:
    """Of ``lines`` (1-based) of a C++ file, those in code the library runs when it loads
    -> what that code is (``the registration block TORCH_LIBRARY_FRAGMENT(torchvision, m)``,
    ``the static initializer of registry``)."""
    wanted = set(lines)
    if not wanted:
        return {}
    found: dict[int, str] = {}
    stack = [cpp_tree(source).root_node]
    while stack:
        node = stack.pop()
        first, last = node.start_point[0] + 1, node.end_point[0] + 1
        hit = [line for line in wanted if first <= line <= last]
        if not hit:
            continue
        if node.type in CONTAINERS:
            stack.extend(node.children)
            continue
        what = None
        skipped: list[tuple[int, int]] = []
        if node.type == "function_definition":
            macro = _block_macro(node, source, macros)
            if macro is not None:
                head = node.child_by_field_name("declarator")
                shown = source[head.start_byte : head.end_byte].decode("utf-8", "replace")
                what = f"the registration block {shown}"
                skipped = _lambda_interiors(node)
        elif node.type == "declaration" and _calls_code(node):
            declarator = next((c for c in node.children if c.type == "init_declarator"), None)
            name = declarator.child_by_field_name("declarator") if declarator else None
            shown = name.text.decode("utf-8", "replace") if name is not None else "a variable"
            what = f"the static initializer of {shown}"
        if what is None:
            continue
        for line in hit:
            if not any(start <= line <= end for start, end in skipped):
                found[line] = what
    return found


@dataclass(frozen=True)
class LoaderLine:
    """A line of the tree's Python that loads its compiled library."""

    path: str
    line: int
    text: str


def loader_lines(source: Path, manifest: Manifest, indexed: Iterable[str]) -> list[LoaderLine]:
    """Lines of the package's indexed Python and of its tests holding one of the
    manifest's ``[python] library_loaders`` (``load_library(`` by default), definitions
    (``def load_library(``) and comments left out.

    Raises OSError when git cannot search the tree."""
    patterns = manifest.list("python", "library_loaders")
    if not patterns:
        return []
    args = ["grep", "-n", "-z", "-I", "-F", "--untracked", "--no-color"]
    for pattern in patterns:
        args += ["-e", pattern]
    result = run_git(source, *args, "--", "*.py", check=False)
    if result.returncode == 1:
        return []
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise OSError(f"git grep failed: {message[-1] if message else result.returncode}")
    indexed = set(indexed)
    roots = manifest.list("python", "packages")
    found = []
    for record in result.stdout.split(b"\n"):
        parts = record.split(b"\0", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        path = parts[0].decode("utf-8", "surrogateescape")
        text = parts[2].decode("utf-8", "replace").strip()
        if path not in indexed:
            continue
        if roots and not under_any(path, roots) and not is_test_file(path, manifest):
            continue  # a script or example beside the package loads a library of its own
        if text.startswith(("def ", "#")):
            continue
        found.append(LoaderLine(path, int(parts[1]), text))
    return found


LOADS_LIBRARY = "loads-library"  # kind of an entity placed for a change to load-time code


class LoadTimePlacement:
    """Mixed into the Placer (``diff``, ``index``, ``manifest``, ``files``, ``_modules``):
    a changed line of load-time code places the Python that loads the library, whose
    importers are every test the failed load breaks."""

    _loaders: list[LoaderLine] | None = None
    _loaders_error: str | None = None

    def _place_load_time(
        self,
        path: str,
        sides: list[tuple[bytes | None, list[int], str]],
        result: FilePlacement,
    ) -> None:
        """``sides``: (text, changed lines, how a line is shown) of the new and the old
        side of a C++ file."""
        macros = library_macros(self.manifest, *(text for text, _, _ in sides))
        changed: list[tuple[str, str]] = []
        for text, lines, shown in sides:
            if text is None or not lines:
                continue
            for line, what in sorted(load_time_lines(text, lines, macros).items()):
                changed.append((f"{shown} {line}", what))
        if not changed:
            return
        where, what = changed[0]
        runs = f"{path} {where} is in {what}, which runs when the library loads"
        if self._loaders is None:
            try:
                indexed = [p for p, row in self.files.items() if row[2] == "python"]
                self._loaders = loader_lines(self.diff.source, self.manifest, indexed)
            except OSError as exc:
                self._loaders, self._loaders_error = [], str(exc)
        if not self._loaders:
            why = (
                f"the Python loading it could not be looked for ({self._loaders_error})"
                if self._loaders_error
                else "no Python of the tree loads a library (none of the manifest's "
                f"[python] library_loaders: {self.manifest.list('python', 'library_loaders')})"
            )
            result.everything = f"{runs}, and {why}: any test may load it"
            return
        nodes = {}
        for loader in self._loaders:
            defs = [n for n in self.index.nodes_in_file(loader.path) if n.kind in PYTHON_DEF_KINDS]
            node = innermost(defs, loader.line)
            for found in [node] if node is not None else self._modules(loader.path):
                nodes.setdefault(found.id, found)
        folded = self._fold_registrations(result, macros)
        first = self._loaders[0]
        shown = [n.qualname for n in nodes.values()]
        result.entities.append(
            Entity(
                f"load-time code of {path} and what loads its library: " + ", ".join(shown),
                LOADS_LIBRARY,
                f"{path}:{where.rsplit(' ', 1)[-1]}",
                f"{runs}: a schema or registration that fails there stops the load, so "
                f"every importer of the code loading it fails ({first.text} @ "
                f"{first.path}:{first.line})",
                [*folded, *nodes],
                members=[*folded.values(), *shown][:MEMBERS_SHOWN],
            )
        )

    def _fold_registrations(self, result: FilePlacement, macros: set[str]) -> dict[int, str]:
        """Take the file's entities that are registration blocks, ops and registrations
        out of ``result`` (id -> qualname): they run, or are made, by load-time code, and
        any test running an op of the library loads it first, so the entity of what loads
        it stands for them, and their walk goes on from it. Left alone, an op no test
        calls would widen to everything."""
        opening = tuple(f"{macro}(" for macro in macros)
        ids = {node_id for entity in result.entities for node_id in entity.node_ids}
        nodes = {node.id: node for node in self.index.nodes(ids)}

        def registered(node_id: int) -> bool:
            node = nodes.get(node_id)
            if node is None:
                return False
            if node.kind in (NodeKind.OP.value, NodeKind.REGISTRATION.value):
                return True
            return node.kind in FUNCTION_KINDS and node.name.startswith(opening)

        folded: dict[int, str] = {}
        kept = []
        for entity in result.entities:
            if entity.node_ids and all(registered(node_id) for node_id in entity.node_ids):
                folded.update((node_id, nodes[node_id].qualname) for node_id in entity.node_ids)
            else:
                kept.append(entity)
        result.entities[:] = kept
        return folded
