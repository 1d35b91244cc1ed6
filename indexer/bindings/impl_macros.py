"""Registrations written through a harness's registration macros inside an IMPL block.

PyTorch's Autocast kernels are registered as ``KERNEL_CPU(conv1d, padding,
lower_precision_fp)`` lines inside ``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)``: each
expands to ``m.impl("aten::conv1d.padding", WrapFunction<...>::call)``. The manifest names
such macros (``[bindings] impl_macros``); a use registers ``OP`` (two arguments: op and
the policy) or ``OP.OVERLOAD`` (three) for the block's dispatch key, at the use's line.
The kernel is a template instantiated by the macro, not a function of the tree: the
registration names none. Read from the text between the block's braces, as the uses have
no semicolons and tree-sitter parses them as whatever it can. A use of another form (four
arguments, a call as an argument, an unclosed parenthesis) is reported as not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tree_sitter

from indexer.bindings.cpp_site import DeadCode, in_comment_or_string
from indexer.cpp.brackets import closing_paren
from indexer.cpp.expand import split_arguments

_WORD = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True, slots=True)
class MacroImpl:
    name: str  # the op's name, unqualified
    overload: str  # '' for the default overload
    site: tree_sitter.Node  # the macro's name at its use


@dataclass(frozen=True, slots=True)
class Unread:
    """A use in a registration block that may register something the index could not
    read: kept on the file (``unread_registrations``), said by trace and the health."""

    line: int
    text: str  # the use, as written (shortened)
    why: str


_REACH = 4000  # bytes a use's arguments may span: an unclosed '(' stops here


def impl_arguments(arguments: list[str]) -> tuple[str, str] | None:
    """(op, overload) of an impl macro's arguments ``(op[, overload], policy)``; None when
    they are not that form."""
    if len(arguments) not in (2, 3):
        return None
    if not all(_WORD.match(argument) and argument != "__VA_ARGS__" for argument in arguments):
        return None
    return arguments[0], arguments[1] if len(arguments) == 3 else ""


def in_directive(data: bytes, position: int) -> bool:
    """Whether ``position`` is on a preprocessor line or its ``\\`` continuation."""
    start = data.rfind(b"\n", 0, position) + 1
    while True:
        if data[start:position].lstrip().startswith(b"#"):
            return True
        if start == 0:
            return False
        position = start - 1  # the previous line's end: continued by a backslash?
        start = data.rfind(b"\n", 0, position) + 1
        if not data[start:position].rstrip(b" \t\r").endswith(b"\\"):
            return False


def macro_impls(
    data: bytes, root: tree_sitter.Node, body: tree_sitter.Node, macros: list[str], dead: DeadCode
) -> tuple[list[MacroImpl], list[Unread]]:
    """Each live use of one of ``macros`` between the block body's braces, and the uses
    whose arguments are not ``(op[, overload], policy)`` (reported, not dropped)."""
    if not macros:
        return [], []
    found: list[MacroImpl] = []
    unread: list[Unread] = []
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(m.encode()) for m in macros) + rb")\s*\(")
    for match in pattern.finditer(data, body.start_byte, body.end_byte):
        node = root.descendant_for_byte_range(match.start(1), match.end(1))
        if node is None or in_comment_or_string(node) or dead.covers(node):
            continue
        if in_directive(data, match.start()):
            continue  # a wrapper's own #define: its uses are the registrations
        line = data.count(b"\n", 0, match.start(1)) + 1
        close = closing_paren(data, match.end() - 1, _REACH)
        if close < 0:
            why = f"its arguments do not close within {_REACH} bytes"
            unread.append(Unread(line, match.group(1).decode(), why))
            continue
        written = data[match.start(1) : close + 1].decode("utf-8", "replace")
        arguments = impl_arguments(
            split_arguments(data[match.end() : close].decode("utf-8", "replace"))
        )
        if arguments is None:
            why = "arguments not (op[, overload], policy) names"
            unread.append(Unread(line, shorten(written), why))
            continue
        found.append(MacroImpl(arguments[0], arguments[1], node))
    return found, unread


def shorten(text: str, limit: int = 120) -> str:
    """A use as one line, cut at ``limit`` characters."""
    flat = " ".join(text.split()).replace("( ", "(")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
