"""X-macro lists and the macros that write op registrations, read from a file's #defines.

An x-macro list is a function-like macro of one parameter whose body only applies that
parameter to each entry: ``#define AT_FORALL_FP32(_) _(acos) _(pow, Tensor_Scalar)``. A
use ``AT_FORALL_FP32(KERNEL_X)`` applies ``KERNEL_X`` to every entry; inside a
``TORCH_LIBRARY_IMPL`` block that is one registration per entry
(indexer/bindings/xmacro_impls.py). Each entry keeps its own line, the answer to "where
is this op listed".

A registration writer is a function-like macro whose body calls ``.impl(`` (PyTorch's
``KERNEL_DIFFERENT_REDISPATCH_SIGNATURE``), or calls such a macro of the same file: what
a list may be applied to. Headers' lists and writers travel to every file's extraction
in the tree context (indexer/cpp/shared_macros.py), as a list's use and its definition
are in different files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from indexer.cpp.brackets import closing_paren
from indexer.cpp.expand import DEFINE, definition, split_arguments

_IMPL_CALL = re.compile(r"\.\s*impl\s*\(")
_CALLED = re.compile(r"([A-Za-z_]\w*)\s*\(")
_CONTINUATION = re.compile(r"\\\r?\n")
_BLANK = re.compile(r"\s*")


@dataclass(frozen=True, slots=True)
class ListEntry:
    line: int  # 1-based line of the entry in its file
    arguments: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MacroList:
    name: str
    path: str  # the file defining it ('' for the file being read)
    entries: tuple[ListEntry, ...]


def macro_lists(text: str, path: str = "") -> list[MacroList]:
    """Every x-macro list ``text`` defines, in the order written."""
    if "define" not in text:
        return []
    found = []
    for match in DEFINE.finditer(text):
        params = [p.strip() for p in _CONTINUATION.sub(" ", match.group(2))[1:-1].split(",")]
        if len(params) != 1 or not params[0].isidentifier():
            continue
        entries = _entries(text, match.start(3), match.end(3), params[0])
        if entries:
            found.append(MacroList(match.group(1), path, tuple(entries)))
    return found


def _entries(text: str, start: int, end: int, param: str) -> list[ListEntry] | None:
    """The body's ``param(...)`` applications with their lines, or None if the body holds
    anything else (a list that also uses another list, code, a comment)."""
    entries = []
    position = start
    opening = re.compile(re.escape(param) + r"\s*\(")
    while True:
        position = _BLANK.match(text, position).end()
        if text.startswith("\\", position):
            position += 1
            continue
        if position >= end:
            return entries or None
        called = opening.match(text, position)
        if called is None:
            return None
        close = closing_paren(text, called.end() - 1)
        if close < 0 or close >= end:
            return None
        body = _CONTINUATION.sub(" ", text[called.end() : close])
        line = text.count("\n", 0, position) + 1
        entries.append(ListEntry(line, tuple(split_arguments(body))))
        position = close + 1


def registration_writers(text: str) -> list[list]:
    """``[name, params, variadic, body]`` of each macro ``text`` defines that writes an
    ``.impl(`` registration, itself or through another such macro of ``text``."""
    if ".impl" not in text and "impl(" not in text:
        return []
    macros = [
        definition(match.group(1), match.group(2), match.group(3), match.start())
        for match in DEFINE.finditer(text)
    ]
    writing = {macro.name for macro in macros if _IMPL_CALL.search(macro.body)}
    if not writing:
        return []
    changed = True
    while changed:
        changed = False
        for macro in macros:
            if macro.name not in writing and writing & set(_CALLED.findall(macro.body)):
                writing.add(macro.name)
                changed = True
    return [
        [macro.name, macro.params, macro.variadic, macro.body]
        for macro in macros
        if macro.name in writing
    ]
