"""Registrations written through a harness's registration macros inside an IMPL block.

PyTorch's Autocast kernels are registered as ``KERNEL_CPU(conv1d, padding,
lower_precision_fp)`` lines inside ``TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)``: each
expands to ``m.impl("aten::conv1d.padding", WrapFunction<...>::call)``. The manifest names
such macros (``[bindings] impl_macros``); a use registers ``OP`` (two arguments: op and
the policy) or ``OP.OVERLOAD`` (three) for the block's dispatch key, at the use's line.
The kernel is a template instantiated by the macro, not a function of the tree: the
registration names none. Read from the text between the block's braces, as the uses have
no semicolons and tree-sitter parses them as whatever it can.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import tree_sitter

from indexer.bindings.cpp_site import DeadCode, in_comment_or_string

_WORD = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True, slots=True)
class MacroImpl:
    name: str  # the op's name, unqualified
    overload: str  # '' for the default overload
    site: tree_sitter.Node  # the macro's name at its use


def _arguments(data: bytes, opening: int) -> list[str] | None:
    """The top-level comma-separated arguments of the call whose ``(`` is at ``opening``."""
    depth = 0
    start = opening + 1
    pieces = []
    for position in range(opening, min(len(data), opening + 400)):
        char = data[position : position + 1]
        if char == b"(":
            depth += 1
        elif char == b")":
            depth -= 1
            if depth == 0:
                pieces.append(data[start:position])
                return [piece.decode("utf-8", "replace").strip() for piece in pieces]
        elif char == b"," and depth == 1:
            pieces.append(data[start:position])
            start = position + 1
    return None


def _in_directive(data: bytes, position: int) -> bool:
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
) -> Iterator[MacroImpl]:
    """Each live use of one of ``macros`` between the block body's braces."""
    if not macros:
        return
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(m.encode()) for m in macros) + rb")\s*\(")
    for match in pattern.finditer(data, body.start_byte, body.end_byte):
        node = root.descendant_for_byte_range(match.start(1), match.end(1))
        if node is None or in_comment_or_string(node) or dead.covers(node):
            continue
        if _in_directive(data, match.start()):
            continue  # a wrapper's own #define: its uses are the registrations
        arguments = _arguments(data, match.end() - 1)
        if arguments is None or len(arguments) not in (2, 3):
            continue
        if not all(_WORD.match(argument) and argument != "__VA_ARGS__" for argument in arguments):
            continue
        yield MacroImpl(arguments[0], arguments[1] if len(arguments) == 3 else "", node)
