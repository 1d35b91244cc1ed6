"""One translation unit through libclang: the tree's definitions and calls as the compiler
resolved them, and the files it included.

Runs in a worker process and returns plain data (:class:`TuFacts`, JSON-ready, so the
per-TU cache can keep it). Only cursors located in the source tree are visited: a TU of a
torch extension includes ~5,000 headers of torch, pybind11 and the standard library, and
walking them would cost more than the parse. What is taken:

* each function definition in the tree (USR, name, qualified name, file, the line of its
  name and its extent, the USRs of the methods it overrides);
* each call written in such a definition, credited to it, including calls written inside a
  macro expansion (clang puts them at the use's line) and in lambdas, with the callee the
  compiler chose: the overload by argument types, the member of the template
  instantiation, the virtual method (and whether the call is virtual: not
  ``Base::method()``), and for ``F::apply(...)`` of an autograd function also
  ``F::forward`` and ``F::backward``, which torch's ``Function<F>::apply`` runs;
* a call the compiler could not resolve (a dependent name in a template, a call through a
  pointer) is recorded without a callee: the fast graph's guess for it stays;
* the lines of the tree's files the preprocessor skipped (``#ifdef WITH_CUDA`` in a CPU
  build): the compiler says nothing of the calls there, so the fast graph's stay too.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from indexer.extract.discover import wanted_language
from indexer.harness import Manifest
from indexer.precise.toolchain import clang_arguments

AUTOGRAD_METHODS = ("forward", "backward")
_MAX_REASONS = 3


@dataclass
class TuJob:
    file: str  # absolute
    directory: str
    arguments: tuple[str, ...]
    root: str  # the source tree, real path
    autograd_templates: tuple[str, ...]  # class templates whose ``apply`` runs F::forward
    manifest: Manifest  # which of the tree's files the index holds (the others are not walked)


@dataclass
class TuFacts:
    file: str  # repo-relative main file
    ok: bool
    reason: str = ""  # why it failed
    seconds: float = 0.0
    errors_in_tree: int = 0  # error diagnostics in the tree's own files
    errors_outside: int = 0  # ... in system or dependency headers (GCC's intrinsics)
    first_errors: list[str] = field(default_factory=list)
    closure: list[str] = field(default_factory=list)  # every file read, real paths
    includes: list[str] = field(default_factory=list)  # those in the tree, repo-relative
    # [usr, name, qualname, path, name_line, start_line, end_line, [overridden usrs]]
    definitions: list[list[Any]] = field(default_factory=list)
    # [caller usr, line, name written, callee or None, column]; callee: {usr, name,
    # qualname, def, decl ([path or None, line]), virtual, via}
    calls: list[list[Any]] = field(default_factory=list)
    skipped: list[list[Any]] = field(default_factory=list)  # [path, first line, last line]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TuFacts:
        return cls(**data)


_index = None
_lib_ready = False


class _RangeList(ctypes.Structure):
    """libclang's CXSourceRangeList (the skipped preprocessor ranges)."""

    _fields_ = [("count", ctypes.c_uint), ("ranges", ctypes.c_void_p)]


def _cindex():
    """clang.cindex with the two calls the bindings do not wrap, once per process."""
    global _index, _lib_ready
    from clang import cindex

    if not _lib_ready:
        lib = cindex.conf.lib
        lib.clang_getOverriddenCursors.argtypes = [
            cindex.Cursor,
            ctypes.POINTER(ctypes.POINTER(cindex.Cursor)),
            ctypes.POINTER(ctypes.c_uint),
        ]
        lib.clang_getOverriddenCursors.restype = None
        lib.clang_disposeOverriddenCursors.argtypes = [ctypes.POINTER(cindex.Cursor)]
        lib.clang_disposeOverriddenCursors.restype = None
        lib.clang_getAllSkippedRanges.argtypes = [cindex.TranslationUnit]
        lib.clang_getAllSkippedRanges.restype = ctypes.POINTER(_RangeList)
        lib.clang_disposeSourceRangeList.argtypes = [ctypes.POINTER(_RangeList)]
        lib.clang_disposeSourceRangeList.restype = None
        _lib_ready = True
    if _index is None:
        _index = cindex.Index.create()
    return cindex, _index


def parse_tu(job: TuJob) -> TuFacts:
    started = time.perf_counter()
    rel = os.path.relpath(os.path.realpath(job.file), job.root)
    try:
        cindex, index = _cindex()
    except Exception as exc:  # the library itself cannot load: every TU fails the same way
        return TuFacts(rel, False, f"libclang cannot be loaded: {exc}")
    args = clang_arguments(job.arguments, job.file, job.directory)
    try:
        # The detailed record keeps the ranges the preprocessor skipped.
        tu = index.parse(
            job.file, args=args, options=cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD
        )
    except cindex.TranslationUnitLoadError as exc:
        return TuFacts(rel, False, f"libclang could not parse it ({exc})")
    facts = TuFacts(rel, True)
    walker = _Walker(cindex, job, facts)
    fatal = walker.diagnostics(tu)
    if fatal:
        facts.ok = False
        facts.reason = fatal
    else:
        walker.walk(tu)
        facts.skipped = walker.skipped(tu)
    facts.closure = sorted(walker.closure(tu))
    facts.includes = sorted(
        {path for path in (walker.relative(name) for name in facts.closure) if path}
    )
    facts.seconds = round(time.perf_counter() - started, 3)
    return facts


class _Walker:
    def __init__(self, cindex, job: TuJob, facts: TuFacts) -> None:
        self.ci = cindex
        self.kinds = cindex.CursorKind
        self.root = job.root.rstrip("/") + "/"
        self.manifest = job.manifest
        self.facts = facts
        self.autograd = frozenset(job.autograd_templates)
        self._relative: dict[str, str | None] = {}
        self.seen_definitions: set[str] = set()
        kinds = cindex.CursorKind
        self.function_kinds = frozenset(
            {
                kinds.FUNCTION_DECL,
                kinds.CXX_METHOD,
                kinds.CONSTRUCTOR,
                kinds.DESTRUCTOR,
                kinds.FUNCTION_TEMPLATE,
                kinds.CONVERSION_FUNCTION,
            }
        )
        self.scope_kinds = frozenset(
            {
                kinds.NAMESPACE,
                kinds.CLASS_DECL,
                kinds.STRUCT_DECL,
                kinds.UNION_DECL,
                kinds.CLASS_TEMPLATE,
                kinds.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION,
                kinds.LINKAGE_SPEC,
                kinds.UNEXPOSED_DECL,
            }
        )

    def relative(self, name: str | None) -> str | None:
        """The repo-relative path of a file clang names, or None unless the index holds it
        (outside the tree, or excluded from it: a third_party/ on the include path).

        Clang's names are not normalized (``/../lib/gcc/.../../../../include``), and
        ``..`` must be taken after symlinks: real paths only."""
        if not name:
            return None
        found = self._relative.get(name, "")
        if found == "":
            real = os.path.realpath(name)
            found = real[len(self.root) :] if real.startswith(self.root) else None
            if found is not None and wanted_language(found, self.manifest) not in ("cpp", "cuda"):
                found = None
            self._relative[name] = found
        return found

    def _where(self, cursor) -> tuple[str | None, int]:
        location = cursor.location
        return self.relative(location.file.name if location.file else None), location.line

    # -- diagnostics, includes -----------------------------------------------------

    def diagnostics(self, tu) -> str:
        """Counts the errors; returns the first fatal one (the parse stopped there)."""
        for diagnostic in tu.diagnostics:
            if diagnostic.severity < self.ci.Diagnostic.Error:
                continue
            location = diagnostic.location
            path = self.relative(location.file.name if location.file else None)
            text = f"{path or (location.file.name if location.file else '?')}:{location.line}: {diagnostic.spelling}"
            if diagnostic.severity == self.ci.Diagnostic.Fatal:
                return text
            if path is None and location.file is not None:
                self.facts.errors_outside += 1
                continue
            self.facts.errors_in_tree += 1
            if len(self.facts.first_errors) < _MAX_REASONS:
                self.facts.first_errors.append(text)
        return ""

    def closure(self, tu) -> set[str]:
        files = {os.path.realpath(tu.spelling)}
        for inclusion in tu.get_includes():
            if inclusion.include is not None:
                files.add(os.path.realpath(inclusion.include.name))
        return files

    def skipped(self, tu) -> list[list[Any]]:
        lib = self.ci.conf.lib
        found = lib.clang_getAllSkippedRanges(tu)
        try:
            ranges = ctypes.cast(found.contents.ranges, ctypes.POINTER(self.ci.SourceRange))
            spans = []
            for at in range(found.contents.count):
                start, end = ranges[at].start, ranges[at].end
                path = self.relative(start.file.name if start.file else None)
                if path is not None:
                    spans.append([path, start.line, end.line])
            return sorted(spans)
        finally:
            lib.clang_disposeSourceRangeList(found)

    # -- definitions and calls -----------------------------------------------------

    def walk(self, tu) -> None:
        for cursor in tu.cursor.get_children():
            if self._where(cursor)[0] is not None:
                self._visit(cursor)

    def _visit(self, cursor) -> None:
        kind = cursor.kind
        if kind.is_preprocessing():
            return
        if kind in self.function_kinds:
            if cursor.is_definition():
                self._definition(cursor)
            return
        if kind in self.scope_kinds:
            for child in cursor.get_children():
                # A namespace of the tree holds the tree's code, but an #include inside one
                # brings another file's: look at each child's file.
                if self._where(child)[0] is not None:
                    self._visit(child)

    def _definition(self, cursor) -> None:
        usr = cursor.get_usr()
        path, line = self._where(cursor)
        if not usr or path is None:
            return
        if usr not in self.seen_definitions:
            self.seen_definitions.add(usr)
            extent = cursor.extent
            self.facts.definitions.append(
                [
                    usr,
                    cursor.spelling,
                    self.qualname(cursor),
                    path,
                    line,
                    extent.start.line,
                    extent.end.line,
                    self._overridden(cursor),
                ]
            )
        self._scan(cursor, usr)

    def _scan(self, cursor, caller: str) -> None:
        kinds = self.kinds
        for child in cursor.get_children():
            kind = child.kind
            if kind == kinds.CALL_EXPR:
                self._call(child, caller)
            elif kind in self.function_kinds and child.is_definition():
                self._definition(child)  # a method of a local class: a caller of its own
                continue
            self._scan(child, caller)

    def _call(self, call, caller: str) -> None:
        line = call.location.line
        column = call.location.column  # two calls on one line are two sites
        callee = call.referenced
        written = call.spelling or self._callee_name(call)
        if callee is None or callee.kind not in self.function_kinds:
            # Unresolved (dependent), an overload set, or a call through a variable.
            self.facts.calls.append([caller, line, written, None, column])
            return
        target = self._target(callee)
        if target["virtual"] and self._qualified(call, callee.spelling):
            target["virtual"] = False  # Base::method(): no dynamic dispatch
        self.facts.calls.append([caller, line, written, target, column])
        if callee.spelling == "apply":
            for method in self._autograd_methods(callee):
                entry = self._target(method)
                entry["via"] = "autograd_apply"
                self.facts.calls.append([caller, line, written, entry, column])

    def _callee_name(self, call) -> str:
        """The name a dependent call is written with (clang gives such a call none)."""
        node = call
        for _ in range(4):
            children = list(node.get_children())
            if not children:
                break
            node = children[0]
            if node.spelling and node.kind != self.kinds.UNEXPOSED_EXPR:
                return node.spelling
        return ""

    def _target(self, callee) -> dict[str, Any]:
        definition = callee.get_definition()
        decl_path, decl_line = self._where(callee)
        target: dict[str, Any] = {
            "usr": callee.get_usr(),
            "name": callee.spelling,
            "qualname": self.qualname(callee),
            "def": None,
            "decl": [decl_path, decl_line],
            "virtual": callee.kind == self.kinds.CXX_METHOD and callee.is_virtual_method(),
        }
        if definition is not None:
            def_path, def_line = self._where(definition)
            target["def"] = [def_path, def_line]
            target["usr"] = definition.get_usr() or target["usr"]
        return target

    def _qualified(self, call, name: str) -> bool:
        """Whether the member is named with a qualifier (``obj.Base::run()``)."""
        tokens = [token.spelling for token in call.get_tokens()]
        for at, token in enumerate(tokens):
            if token == name:
                return at > 0 and tokens[at - 1] == "::"
        return False

    def _autograd_methods(self, apply) -> list:
        """F::forward and F::backward for ``apply`` of Function<F> (an autograd template)."""
        owner = apply.semantic_parent
        if owner is None or self.qualname(owner) not in self.autograd:
            return []
        owner_type = owner.type
        if owner_type.get_num_template_arguments() < 1:
            return []
        function = owner_type.get_template_argument_type(0).get_declaration()
        if function is None or self._where(function)[0] is None:
            return []
        return [
            child
            for child in function.get_children()
            if child.kind in self.function_kinds and child.spelling in AUTOGRAD_METHODS
        ]

    def _overridden(self, cursor) -> list[str]:
        if cursor.kind != self.kinds.CXX_METHOD or not cursor.is_virtual_method():
            return []
        lib = self.ci.conf.lib
        found = ctypes.POINTER(self.ci.Cursor)()
        count = ctypes.c_uint(0)
        lib.clang_getOverriddenCursors(cursor, ctypes.byref(found), ctypes.byref(count))
        try:
            return [found[i].get_usr() for i in range(count.value)]
        finally:
            if count.value:
                lib.clang_disposeOverriddenCursors(found)

    def qualname(self, cursor) -> str:
        parts = []
        node = cursor
        kinds = self.kinds
        while node is not None and node.kind != kinds.TRANSLATION_UNIT:
            if node.kind == kinds.LINKAGE_SPEC:
                node = node.semantic_parent
                continue
            parts.append(node.spelling or "(anonymous)")
            node = node.semantic_parent
        return "::".join(reversed(parts))
