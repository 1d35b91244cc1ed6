"""PyTorch macros that hide structure from a parser: structured kernels, dispatch stubs,
registration blocks.

``TORCH_IMPL_FUNC(add_out) (...) {...}`` parses as a function whose declarator is itself
a call-like declarator; it expands to ``void structured_add_out::impl(...)``. Dispatch
stub macros are found in the text (they parse as calls, declarations or ERRORs depending
on their arguments) and read with a small balanced-parenthesis scanner.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from indexer.cpp.brackets import closing_paren
from indexer.graph.facts import FILE_NODE, FileFacts
from indexer.graph.vocabulary import EdgeKind, NodeKind

# macro -> (class-name suffix, member) of what it expands to.
STRUCTURED = {
    "TORCH_IMPL_FUNC": "impl",
    "TORCH_META_FUNC": "meta",
    "TORCH_META_FUNC2": "meta",
    "TORCH_PRECOMPUTE_META_FUNC": "meta",
    "TORCH_PRECOMPUTE_META_FUNC2": "meta",
}

DECLARE = "DECLARE_DISPATCH"
DEFINE = "DEFINE_DISPATCH"

_QUALIFIED = re.compile(
    r"(?:::)?[A-Za-z_]\w*(?:\s*<[^()]*?>)?(?:\s*::\s*[A-Za-z_~]\w*(?:\s*<[^()]*?>)?)*"
)
_SPACES = re.compile(r"\s+")
_REACH = 4000  # characters a use's arguments may span: an unclosed '(' stops here


def split_arguments(text: str) -> list[str]:
    """Top-level comma-separated arguments of a macro argument list (without its parens),
    angle brackets grouping: names to read (``DECLARE_DISPATCH(fn_t<A, B>, stub)``), not
    text to substitute, for which the preprocessor's rule is ``expand.split_arguments``."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last or parts:
        parts.append(last)
    return parts


def structured(macro: str, arguments: list[str]) -> tuple[str, list[str]] | None:
    """(node name, qualname components under the enclosing namespace) of a structured kernel.

    TORCH_IMPL_FUNC(add_out) -> ('add_out', ['structured_add_out', 'impl']);
    TORCH_META_FUNC2(add, Tensor) -> ('add', ['structured_add_Tensor', 'meta']).
    """
    member = STRUCTURED.get(macro)
    if member is None or not arguments or not arguments[0]:
        return None
    name = arguments[0]
    suffix = "_".join(arguments) if macro.endswith("2") else name
    return name, [f"structured_{suffix}", member]


def registration_label(macro: str, arguments: list[str]) -> str:
    """TORCH_LIBRARY_IMPL(aten, CPU, m) -> 'TORCH_LIBRARY_IMPL(aten, CPU)': the module
    variable (the last argument) is not part of what the block registers."""
    kept = arguments[:-1] if len(arguments) > 1 else arguments
    return f"{macro}({', '.join(kept)})"


def macro_label(macro: str, arguments: list[str]) -> str:
    return f"{macro}({', '.join(_SPACES.sub(' ', argument) for argument in arguments)})"


def callable_name(expression: str) -> str | None:
    """The function an argument like '&at::native::add_kernel' or 'static_cast<fn>(&k)' names."""
    text = expression.strip()
    if not text or text == "nullptr" or text.startswith("["):
        return None
    if "(" in text:  # a cast: the callable is inside the last parentheses
        text = text[text.rfind("(") + 1 :].rstrip(") ")
    text = text.lstrip("&* ").strip()
    match = _QUALIFIED.match(text)
    return _SPACES.sub("", match.group(0)) if match else None


@dataclass(slots=True)
class MacroUse:
    macro: str
    arguments: list[str]
    offset: int  # byte offset of the macro name
    line: int


def find_macro_uses(data: bytes, pattern: re.Pattern[bytes]) -> Iterator[MacroUse]:
    """Uses of the macros ``pattern`` matches (group 1 = name, ending at the '('), skipping
    #define bodies and comment lines."""
    for match in pattern.finditer(data):
        start = match.start(1)
        line_start = data.rfind(b"\n", 0, start) + 1
        prefix = data[line_start:start].lstrip()
        if prefix.startswith((b"#", b"//", b"*", b"/*")):
            continue
        previous_end = line_start - 1
        if previous_end > 0 and data[max(0, previous_end - 2) : previous_end].rstrip().endswith(
            b"\\"
        ):
            continue  # a continuation line of a multi-line #define
        close = closing_paren(data, match.end() - 1, _REACH)
        if close < 0:
            continue
        arguments = split_arguments(data[match.end() : close].decode("utf-8", "replace"))
        yield MacroUse(match.group(1).decode(), arguments, start, data.count(b"\n", 0, start) + 1)


def macro_pattern(names: list[str]) -> re.Pattern[bytes] | None:
    if not names:
        return None
    alternatives = b"|".join(
        re.escape(name.encode()) for name in sorted(names, key=len, reverse=True)
    )
    return re.compile(rb"\b(" + alternatives + rb")\s*\(")


def add_dispatch_stubs(
    facts: FileFacts,
    data: bytes,
    pattern: re.Pattern[bytes],
    scope_at: Callable[[int], list[str]],
    usings_at: Callable[[int], list[str]],
    line_of: Callable[[MacroUse], int],
) -> set[str]:
    """``DECLARE_DISPATCH(fn_t, add_stub)`` -> a dispatch_stub node;
    ``REGISTER_DISPATCH(add_stub, &add_kernel)`` (and the per-architecture forms) -> a
    ``dispatches`` ref naming the kernel, with the stub in ``attrs["stub"]``: the resolver
    makes the edge stub -> kernel. One registration per line, whatever the CPU capability
    the file is compiled for: one logical kernel. Returns the names of the stubs the
    file declares or defines (``DEFINE_DISPATCH(add_stub)``), which its code may pass
    along as values."""
    stubs: set[str] = set()
    for use in find_macro_uses(data, pattern):
        if use.macro == DEFINE and use.arguments and use.arguments[0].isidentifier():
            stubs.add(use.arguments[0])
        scope = scope_at(use.offset)
        line = line_of(use)
        if use.macro == DECLARE:
            if len(use.arguments) < 2 or not use.arguments[-1].isidentifier():
                continue
            name = use.arguments[-1]
            stubs.add(name)
            local = facts.add_node(
                NodeKind.DISPATCH_STUB.value,
                name,
                "::".join([*scope, name]),
                line,
                line,
                FILE_NODE,
                macro=use.macro,
                fn_type=use.arguments[0],
            )
            facts.add_local_edge(FILE_NODE, local, EdgeKind.CONTAINS.value, line)
        elif use.macro != DEFINE and len(use.arguments) >= 2:
            kernel = callable_name(use.arguments[-1])
            if kernel is None or not use.arguments[0].isidentifier():
                continue
            attrs: dict[str, object] = {
                "scope": scope,
                "stub": use.arguments[0],
                "macro": use.macro,
            }
            usings = usings_at(use.offset)
            if usings:
                attrs["using"] = usings
            facts.add_ref(FILE_NODE, EdgeKind.DISPATCHES.value, "cpp", kernel, line, **attrs)
    return stubs
