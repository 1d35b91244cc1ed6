"""Declaration-writing macros of a tree's headers, for the files that use them.

``TORCH_ARG(double, lr) = 1e-3;`` in an options class writes four accessor methods, and
``REGISTER_OPERATOR_FUNCTOR(aten::add, aten_add, ...)`` an operator functor; the macros
live in headers (torch/arg.h, static/ops.h), their uses in hundreds of other files.
Extraction reads one file, so it sees those definitions only if it is told the headers'
macros: before any file is extracted, the tree's headers are scanned once, and a use of
one of their macros opening a line in another file is expanded like the file's own
macros (indexer/cpp/expand.py): at namespace or class scope, the definitions it writes
are indexed at the line of the use; in a function body, its calls are the function's.

Only macros that write declarations are shared: a body opening with a statement
(``TORCH_CHECK``'s ``if (...) {``, ``C10_CUDA_CHECK``'s ``do {``) is for function bodies,
where expanding it would point every function at the error machinery, at a cost and for
nothing. Only unambiguous ones: a name defined with different bodies in different headers
(per platform, per backend) could be either in a given file, so neither is used. A
file's own definition of a name wins over a header's. Macros the extractors read as what
they mean (dispatch stubs, op registration blocks) are left to them.

Uses are blanked for the parser (``TORCH_ARG(double, lr) = 1e-3;`` otherwise reads as a
broken declaration that loses the class around it), and the blanked uses are exactly
the ones expanded. The per-header table is stored in the index (meta
``cpp_header_macros``) so that an update extracts with what a rebuild would know: an edit
that changes a shared macro re-extracts the files naming it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from indexer.cpp.attribute_macros import object_definitions, resolve
from indexer.cpp.brackets import closing_paren
from indexer.cpp.expand import DEFINE, FUNCTION_LIKE_DEFINE, Macro, definition
from indexer.cpp.macros import STRUCTURED
from indexer.cpp.xmacro_lists import ListEntry, MacroList, macro_lists, registration_writers
from indexer.harness import Manifest
from indexer.paths import is_header

# Header path -> [name, params, variadic, body] of each declaration-writing macro it has,
# [name, None, False, body] of each object-like one (body None: not an attribute macro;
# indexer/cpp/attribute_macros.py), [name, None, False, None, "list", [[line, args]...]]
# of each x-macro list and [name, params, variadic, body, "registering"] of each macro
# writing an op registration (indexer/cpp/xmacro_lists.py).
HeaderMacros = dict[str, list[list]]
LIST, REGISTERS = "list", "registering"

# A use that can define something: the macro's name opening a line, called. (A literal
# '\n' to start with lets the regex engine skip ahead; '^' with MULTILINE is 3x slower.)
_LINE_START_CALL = re.compile(rb"\n[ \t]*([A-Z_][A-Za-z0-9_]*)[ \t]*\(")
_FIRST_LINE_CALL = re.compile(rb"[ \t]*([A-Z_][A-Za-z0-9_]*)[ \t]*\(")
_STATEMENT = re.compile(
    r"(?:do|if|for|while|switch|return|try|throw|case|goto|else|static_assert)\b|[\[({]"
)
# What ends a use's initializer (``TORCH_ARG(T, x) = {};``): a ';' outside brackets.
_INITIALIZER_TOKENS = re.compile(rb"[;(){}\[\]]|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")
_MAX_INITIALIZER = 400


def modelled_macros(manifest: Manifest) -> frozenset[str]:
    """Macros the extractors read as what they mean (dispatch stubs, op registration
    blocks, structured kernels), never as their expansion."""
    return frozenset(
        [
            *manifest.list("bindings", "dispatch_stub_macros"),
            *manifest.list("bindings", "torch_library_macros"),
            *manifest.list("bindings", "pybind_macros"),
            *manifest.list("bindings", "registration_wrappers"),
            *STRUCTURED,
        ]
    )


def header_macros(data: bytes, exclude: frozenset[str] = frozenset()) -> list[list]:
    """The declaration-writing macros of one header's bytes, then its object-like ones, in
    the order written; ``exclude``: names modelled otherwise (dispatch stubs, op
    registration blocks)."""
    if b"define" not in data:
        return []
    text = data.decode("latin-1")
    found = []
    objects = [[name, None, False, body] for name, body in object_definitions(text)]
    if FUNCTION_LIKE_DEFINE.search(data) is None:
        return objects
    for match in DEFINE.finditer(text):
        if match.group(1) in exclude:
            continue
        macro = definition(match.group(1), match.group(2), match.group(3), match.start())
        if macro.defines and _STATEMENT.match(macro.body) is None:
            found.append([macro.name, macro.params, macro.variadic, macro.body])
    lists = [
        [
            listed.name,
            None,
            False,
            None,
            LIST,
            [[e.line, list(e.arguments)] for e in listed.entries],
        ]
        for listed in macro_lists(text)
    ]
    writers = [[*writer, REGISTERS] for writer in registration_writers(text)]
    return found + objects + lists + writers


def scan_headers(
    root: Path, paths: Iterable[str], max_bytes: int, exclude: frozenset[str] = frozenset()
) -> HeaderMacros:
    """The declaration-writing macros of each header among ``paths`` that has some."""
    table: HeaderMacros = {}
    for path in paths:
        if not is_header(path):
            continue
        try:
            data = (root / path).read_bytes()
        except OSError:
            continue  # extraction reports the file
        if len(data) > max_bytes:
            continue
        macros = header_macros(data, exclude)
        if macros:
            table[path] = macros
    return table


class SharedMacros:
    """The unambiguous declaration-writing macros of a tree's headers, by name, its
    attribute macros (name -> what it marks), and its x-macro lists and registration
    writers (indexer/cpp/xmacro_lists.py)."""

    def __init__(self, headers: Mapping[str, list[list]] | None = None) -> None:
        bodies: dict[str, set[tuple]] = {}
        objects: dict[str, list[str | None]] = {}
        lists: dict[str, list[MacroList]] = {}
        writers: dict[str, set[tuple]] = {}
        for path in sorted(headers or {}):
            for entry in headers[path]:
                name, params, variadic, body = entry[:4]
                role = entry[4] if len(entry) > 4 else None
                if role == LIST:
                    listed = tuple(ListEntry(line, tuple(args)) for line, args in entry[5])
                    lists.setdefault(name, []).append(MacroList(name, path, listed))
                elif role == REGISTERS:
                    writers.setdefault(name, set()).add((tuple(params), variadic, body))
                elif params is None:
                    objects.setdefault(name, []).append(body)
                else:
                    bodies.setdefault(name, set()).add((tuple(params), variadic, body))
        # A name some header defines function-like is no attribute anywhere.
        self.attributes: dict[str, str] = {
            name: mark for name, mark in resolve(objects, {}).items() if name not in bodies
        }
        self.by_name: dict[str, Macro] = {}
        self.ambiguous: set[str] = set()
        for name, variants in bodies.items():
            if len(variants) > 1:
                self.ambiguous.add(name)
                continue
            ((params, variadic, body),) = variants
            self.by_name[name] = Macro(
                name, list(params), variadic, body, -1, defines=True, calls=False, shared=True
            )
        # A list or writer defined two ways (per platform) could be either: neither is used,
        # and a use of it is reported as not read (indexer/bindings/xmacro_impls.py).
        self.lists: dict[str, MacroList] = {
            name: found[0] for name, found in lists.items() if len(found) == 1
        }
        self.ambiguous_lists = {name for name, found in lists.items() if len(found) > 1}
        self.writers: dict[str, Macro] = {}
        for name, variants in writers.items():
            if len(variants) == 1:
                ((params, variadic, body),) = variants
                self.writers[name] = Macro(
                    name, list(params), variadic, body, -1, defines=False, calls=True, shared=True
                )

    def __bool__(self) -> bool:  # whether any use needs expanding
        return bool(self.by_name)

    def statement_uses(self, data: bytes) -> list[tuple[str, int, int]]:
        """(name, start, end) of each use opening a line, with the initializer after it
        if any (``= 1e-3``, up to the ';'): what the parser must not see, and what
        extraction expands instead."""
        if not self.by_name:
            return []
        uses = []
        first = _FIRST_LINE_CALL.match(data)
        matches = itertools.chain([first] if first else [], _LINE_START_CALL.finditer(data))
        for match in matches:
            name = match.group(1).decode("ascii")
            if name not in self.by_name:
                continue
            if data[max(0, match.start() - 3) : match.start()].rstrip().endswith(b"\\"):
                continue  # a line of a multi-line #define
            close = closing_paren(data, match.end() - 1)
            if close < 0:
                continue
            end = close + 1
            rest = data[end : end + 8].lstrip()
            if rest.startswith(b"=") and not rest.startswith(b"=="):
                semicolon = _statement_end(data, end)
                if semicolon >= 0:
                    end = semicolon
            uses.append((name, match.start(1), end))
        return uses

    def meaning(self, name: str) -> tuple | None:
        """What a name expands to (None: not shared), to compare two tables; a list's
        entries with their lines, which its uses' registrations cite."""
        listed = self.lists.get(name)
        writer = self.writers.get(name)
        if listed is not None or writer is not None or name in self.ambiguous_lists:
            return (
                "xmacro",
                (listed.path, listed.entries) if listed else name in self.ambiguous_lists,
                (tuple(writer.params), writer.variadic, writer.body) if writer else None,
                self._declaration_meaning(name),
            )
        return self._declaration_meaning(name)

    def _declaration_meaning(self, name: str) -> tuple | None:
        macro = self.by_name.get(name)
        if macro is None:
            mark = self.attributes.get(name)
            return None if mark is None else ("attribute", mark)
        return (tuple(macro.params), macro.variadic, macro.body)


def _statement_end(data: bytes, start: int) -> int:
    """Offset of the ';' ending the statement at ``start`` (outside brackets); -1 if a
    bracket closes first or none is within reach."""
    depth = 0
    end = min(len(data), start + _MAX_INITIALIZER)
    for match in _INITIALIZER_TOKENS.finditer(data, start, end):
        token = match.group(0)
        if token in (b"(", b"{", b"["):
            depth += 1
        elif token in (b")", b"}", b"]"):
            depth -= 1
            if depth < 0:
                return -1
        elif token == b";" and depth == 0:
            return match.start()
    return -1


def changed_names(before: SharedMacros, after: SharedMacros) -> set[str]:
    """Names whose expansion differs between two tables (added, removed, redefined)."""
    names = {*before.by_name, *after.by_name, *before.attributes, *after.attributes}
    for table in (before, after):
        names.update(table.lists, table.ambiguous_lists, table.writers)
    return {name for name in names if before.meaning(name) != after.meaning(name)}
