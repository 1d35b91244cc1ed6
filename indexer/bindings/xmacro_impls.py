"""Registrations an IMPL block writes through x-macro lists and the file's own macros.

PyTorch's CUDA Autocast kernels are registered as ``AT_FORALL_FP32(_KERNEL_CUDA_FP32)``
inside ``TORCH_LIBRARY_IMPL(aten, Autocast, m)``: the list (a header's ``#define
AT_FORALL_FP32(_) _(acos) _(asin) ...``) applies the file's ``#define
_KERNEL_CUDA_FP32(...) KERNEL_CUDA(__VA_ARGS__, fp32)`` to each entry, and each
application is a registration. Here a block's statement-level use of a list, or of a
macro of the file (or a header's registration writer), is expanded the way the
preprocessor would (indexer/cpp/expand.py), up to the manifest's ``impl_macros``, which
are read as they are written (indexer/bindings/impl_macros.py), and up to ``VAR.impl(``
calls, read as text: the name from its string literals, a kernel from its last argument
unless that is a template instance. Each registration keeps the use's line and, through
a list, the entry's file:line.

What is not read is said, never dropped: a use of a list the tree does not define (or
defines two ways) with a registering macro, an entry whose expansion writes nothing the
index reads. See docs/harnesses.md (``impl_macros``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tree_sitter

from indexer.bindings.cpp_site import DeadCode, in_comment_or_string
from indexer.bindings.impl_macros import Unread, impl_arguments, in_directive, shorten
from indexer.cpp.brackets import closing_paren
from indexer.cpp.expand import DEFINE, Expander, Macro, definition, split_arguments
from indexer.cpp.macros import callable_name
from indexer.cpp.macros import split_arguments as split_grouped
from indexer.cpp.shared_macros import SharedMacros
from indexer.cpp.xmacro_lists import MacroList, macro_lists

# A statement-level use: NAME( at a line's start (after blanks).
_USE = re.compile(r"(?m)^[ \t]*([A-Za-z_]\w*)[ \t]*\(")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_KEY = re.compile(r"(?:DispatchKey|DeviceType)\s*::\s*(\w+)|\bk([A-Z]\w*)$")
_DISPATCH = re.compile(r"(?:torch::)?dispatch\s*\(\s*[\w:]+\s*,\s*(.*)\)", re.S)
_PLAIN_KERNEL = re.compile(r"(?:TORCH_FN\s*\(\s*\(?)?\s*(&?\s*[\w:]+)\s*\)?\s*\)?")
_MAX_APPLIED = 20_000  # characters of one entry's expansion read for registrations


@dataclass(frozen=True, slots=True)
class ListedImpl:
    namespace: str | None  # from an ``m.impl("ns::op")`` name; None: the block's
    name: str
    overload: str
    site: tree_sitter.Node  # the use in the block
    via: str  # the use as written: ``AT_FORALL_FP32(_KERNEL_CUDA_FP32)``
    listed_at: str | None  # ``path:line`` of the list entry, for a list's use
    kernel: str | None  # a function the registration names, if any
    key: str | None  # a key the ``m.impl`` call names itself, if any


class FileMacros:
    """The macros one file may expand in its blocks: its own, and the tree's lists and
    registration writers (made once per file, on the first block that needs them)."""

    def __init__(
        self, text: str, path: str, impl_macros: list[str], shared: SharedMacros | None
    ) -> None:
        self.impl_macros = frozenset(impl_macros)
        self.shared = shared
        self.path = path
        own = [
            definition(match.group(1), match.group(2), match.group(3), match.start())
            for match in DEFINE.finditer(text)
        ]
        writers = list(shared.writers.values()) if shared is not None else []
        usable = [macro for macro in [*writers, *own] if macro.name not in self.impl_macros]
        self.expander = Expander(usable)
        self.own: dict[str, list[Macro]] = {}
        for macro in own:
            self.own.setdefault(macro.name, []).append(macro)
        self.lists: dict[str, MacroList] = {
            listed.name: listed for listed in macro_lists(text, path)
        }

    def macro(self, name: str, offset: int) -> Macro | None:
        found = None
        for macro in self.own.get(name, ()):
            if macro.offset < offset:
                found = macro
        if found is None and self.shared is not None:
            found = self.shared.writers.get(name)
        return found if name not in self.impl_macros else None

    def macro_list(self, name: str) -> MacroList | None:
        if name in self.lists:
            return self.lists[name]
        return self.shared.lists.get(name) if self.shared is not None else None

    def registering(self, name: str, offset: int) -> bool:
        """Whether a use of ``name`` would write a registration: an impl macro, or a macro
        whose expansion (with its parameters as arguments) names one or ``.impl(``."""
        if name in self.impl_macros:
            return True
        macro = self.macro(name, offset)
        if macro is None:
            return False
        text = self.expander.expand(f"{name}({', '.join(macro.params)})", offset)
        return ".impl" in text or any(
            re.search(rf"\b{re.escape(impl)}\s*\(", text) for impl in self.impl_macros
        )


def listed_impls(
    data: bytes,
    root: tree_sitter.Node,
    body: tree_sitter.Node,
    var: str,
    macros: FileMacros,
    dead: DeadCode,
) -> tuple[list[ListedImpl], list[Unread]]:
    """Registrations the block body writes through lists and macros, and the uses of
    registering macros that could not be read."""
    text = data.decode("latin-1")  # one character per byte: offsets are the parser's
    found: list[ListedImpl] = []
    unread: list[Unread] = []
    for match in _USE.finditer(text, body.start_byte, body.end_byte):
        name = match.group(1)
        if name in macros.impl_macros or name == var:
            continue  # read by impl_macros.py / module_calls
        listed = macros.macro_list(name)
        macro = macros.macro(name, match.start(1)) if listed is None else None
        ambiguous = macros.shared is not None and name in macros.shared.ambiguous_lists
        unknown = listed is None and macro is None and not ambiguous
        if unknown and not _applies_registering(text, match.end(), macros, match.start(1)):
            continue
        node = root.descendant_for_byte_range(match.start(1), match.end(1))
        if node is None or in_comment_or_string(node) or dead.covers(node):
            continue
        if in_directive(data, match.start(1)):
            continue
        close = closing_paren(text, match.end() - 1, 4000)
        line = text.count("\n", 0, match.start(1)) + 1
        if close < 0:
            unread.append(Unread(line, name, "its arguments do not close within 4000 bytes"))
            continue
        arguments = split_arguments(text[match.end() : close])
        via = shorten(text[match.start(1) : close + 1])
        if listed is not None or ambiguous or unknown:
            applied = arguments[0] if len(arguments) == 1 else ""
            if not applied.isidentifier() or not macros.registering(applied, match.start(1)):
                continue  # a list applied to something else: no registration
            if listed is None:
                why = (
                    f"the list {name} is defined differently in several headers"
                    if ambiguous
                    else f"{name} is no x-macro list the tree defines"
                )
                unread.append(Unread(line, via, why))
                continue
            silent = []  # entries expanding to nothing read: one line for the use
            for entry in listed.entries:
                where = f"{listed.path or macros.path}:{entry.line}"
                call = f"{applied}({', '.join(entry.arguments)})"
                written = _registrations(call, match.start(1), macros, var)
                if not written:
                    silent.append(f"{call} (entry at {where})")
                found.extend(
                    ListedImpl(ns, op, overload, node, via, where, kernel, key)
                    for ns, op, overload, kernel, key in written
                )
            if silent:
                why = (
                    f"{len(silent)} of {len(listed.entries)} entries expand to no registration"
                    f" the index reads, first {silent[0]}"
                )
                unread.append(Unread(line, via, why))
        elif macro is not None and macros.registering(name, match.start(1)):
            written = _registrations(text[match.start(1) : close + 1], match.start(1), macros, var)
            if not written:
                unread.append(Unread(line, via, "expands to no registration the index reads"))
            found.extend(
                ListedImpl(ns, op, overload, node, via, None, kernel, key)
                for ns, op, overload, kernel, key in written
            )
    return found, unread


def _applies_registering(text: str, opened: int, macros: FileMacros, offset: int) -> bool:
    """Whether ``NAME(ARG)`` applies a registering macro ``ARG`` (cheap test first)."""
    close = text.find(")", opened, opened + 200)
    applied = text[opened:close].strip() if close >= 0 else ""
    return applied.isidentifier() and macros.registering(applied, offset)


def _registrations(
    call: str, offset: int, macros: FileMacros, var: str
) -> list[tuple[str | None, str, str, str | None, str | None]]:
    """(namespace, op, overload, kernel, key) of each registration ``call`` expands to."""
    expanded = macros.expander.expand(call, offset)[:_MAX_APPLIED]
    written = []
    for impl in macros.impl_macros:
        for use in re.finditer(rf"\b{re.escape(impl)}\s*\(", expanded):
            close = closing_paren(expanded, use.end() - 1)
            arguments = impl_arguments(split_arguments(expanded[use.end() : close]))
            if close >= 0 and arguments is not None:
                written.append((None, arguments[0], arguments[1], None, None))
    for use in re.finditer(rf"\b{re.escape(var)}\s*\.\s*impl\s*\(", expanded):
        close = closing_paren(expanded, use.end() - 1)
        # angle brackets group here: a kernel may be a template instance
        arguments = split_grouped(expanded[use.end() : close]) if close >= 0 else []
        name = "".join(_STRING.findall(arguments[0])) if arguments else ""
        if not name:
            continue
        namespace, _, op = name.rpartition("::")
        op, _, overload = op.partition(".")
        kernel = _kernel(arguments[-1]) if len(arguments) >= 2 else None
        key = _key(arguments[1]) if len(arguments) >= 3 else None
        written.append((namespace or None, op, overload, kernel, key))
    return written


def _kernel(argument: str) -> str | None:
    """The function a registration's kernel argument names, in the plain forms only
    (``&f``, ``f``, ``TORCH_FN(f)``, ``torch::dispatch(KEY, TORCH_FN(f))``): a template
    instance, a boxed or fallthrough kernel, a macro call names none of the tree."""
    match = _DISPATCH.fullmatch(argument.strip())
    written = match.group(1) if match else argument.strip()
    match = _PLAIN_KERNEL.fullmatch(written)
    return callable_name(match.group(1)) if match else None


def _key(argument: str) -> str | None:
    """``torch::kCUDA`` / ``c10::DispatchKey::CUDA`` written in an ``m.impl`` -> the key."""
    match = _KEY.search(argument.strip())
    return (match.group(1) or match.group(2)) if match else None
