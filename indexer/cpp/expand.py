"""Expanding a file's own function-like macros.

ATen writes families of definitions with a macro defined in the same file
(``CREATE_UNARY_TORCH_IMPL_FUNC(abs_out, abs_stub)``, ``DEFINE_BINARY_OP(add)``), and
CUDA extensions launch kernels from one (vLLM's ``LAUNCH_FUSED_ADD_RMS_NORM(8, true)``
inside the host function); macro bodies are preprocessor text that tree-sitter does not
parse. A use is expanded here the way the preprocessor would (parameters, ``#`` and
``##``, ``__VA_ARGS__``, the file's other macros rescanned, nested a few levels): at
namespace scope, the definitions it makes are indexed at the line of the use; inside a
function body, the calls and launches it makes belong to that function. Macros from
other files are expanded only where they define something at namespace or class scope,
and only those the tree's headers define one way (indexer/cpp/shared_macros.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from indexer.cpp.brackets import closing_paren

_MAX_DEPTH = 4
_FIND_LIMIT = 12  # macros in a file up to which uses are found by str.find
_MAX_EXPANSION = 200_000  # characters per use: runaway recursion stops here
_PASTE = re.compile(r"\s*##\s*")
# A macro body's tokens that substitution may touch: strings and '##' (left alone),
# '#name' (stringified if a parameter) and names (replaced if a parameter).
_BODY_TOKEN = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|##|#\s*[A-Za-z_]\w*|[A-Za-z_]\w*")
_TEXT, _PARAMETER, _STRINGIFIED = 0, 1, 2
_CONTINUATION = re.compile(r"\\\r?\n")
FUNCTION_LIKE_DEFINE = re.compile(rb"#[ \t]*define[ \t]+\w+\(")  # a cheap test on bytes
_CALLED_NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")
# `#define NAME(params) body`, the body running over continued lines.
DEFINE = re.compile(r"#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))((?:[^\n]*\\\r?\n)*[^\n]*)")
# What a use inside a function body is worth expanding for: a launch, or a call of a
# function by name (not a member call, not an ALL_CAPS macro, not a keyword).
_CALLS = re.compile(
    r"<<<|(?<![\w.>:])(?!(?:if|for|while|switch|return|sizeof|decltype|alignof|alignas"
    r"|static_assert|catch|defined|noexcept|throw)\b)(?:[A-Za-z_]\w*\s*::\s*)*"
    r"(?:[a-z_]\w*|[A-Z]\w*[a-z]\w*)\s*(?:<[^;{}()]*>\s*)?\("
)


@dataclass(slots=True)
class Macro:
    name: str
    params: list[str]
    variadic: bool
    body: str
    offset: int  # where it is defined: a use sees the latest definition before it
    defines: bool  # its body holds a block: a use at namespace scope defines something
    calls: bool  # its body calls or launches something: a use in a body is worth expanding
    shared: bool = False  # from another file's #define (indexer/cpp/shared_macros.py)
    _template: list[tuple[int, str]] | None = None

    def template(self) -> list[tuple[int, str]]:
        """The body as (kind, text) pieces: text, a parameter, a stringified parameter.
        Made once per macro (a regex per parameter list cost a compile per file)."""
        if self._template is None:
            names = {*self.params, "__VA_ARGS__"} if self.variadic else set(self.params)
            pieces: list[tuple[int, str]] = []
            position = 0
            for match in _BODY_TOKEN.finditer(self.body):
                token = match.group(0)
                if token[0] == "#" and token != "##":
                    kind, name = _STRINGIFIED, token[1:].strip()
                else:
                    kind, name = _PARAMETER, token
                if name not in names:
                    continue  # a string, '##', or another name: text
                pieces.append((_TEXT, self.body[position : match.start()]))
                pieces.append((kind, name))
                position = match.end()
            pieces.append((_TEXT, self.body[position:]))
            self._template = pieces
        return self._template


def definition(name: str, params: str, body: str, offset: int) -> Macro:
    """A function-like macro, with what its body does: defines something ('{'), calls
    something."""
    body = _CONTINUATION.sub(" ", body).strip()
    defines = "{" in body
    calls = _CALLS.search(body) is not None
    params = _CONTINUATION.sub(" ", params)
    names = [param.strip() for param in params.strip()[1:-1].split(",") if param.strip()]
    variadic = bool(names) and names[-1].endswith("...")
    if variadic:
        last = names.pop()[:-3].strip()
        if last:  # GNU named variadic parameter: args...
            names.append(last)
    return Macro(name, names, variadic, body, offset, defines, calls)


# What decides grouping in a macro's argument text: strings, brackets and commas.
_GROUPING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[()\[\]{},]")
_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def definitions(text: str, keep: frozenset[str] = frozenset()) -> list[Macro]:
    """The function-like macros of a file worth expanding, in the order written: those
    that define or call something, themselves or through the file's other macros, and
    those named in ``keep`` (uses the parser was not shown: their expansion is all there
    is of them)."""
    found = [
        definition(match.group(1), match.group(2), match.group(3), match.start())
        for match in DEFINE.finditer(text)
    ]
    calling = {macro.name for macro in found if macro.calls}
    quiet = {macro.name: macro for macro in found if not macro.calls}
    used = {name: set(_CALLED_NAME.findall(macro.body)) for name, macro in quiet.items()}
    changed = True
    while changed:
        changed = False
        for name, macro in quiet.items():
            if not macro.calls and used[name] & calling:
                macro.calls = changed = True
                calling.add(name)
    return [macro for macro in found if macro.defines or macro.calls or macro.name in keep]


def split_arguments(text: str) -> list[str]:
    """Arguments of a macro use, split as the preprocessor does: on commas outside
    parentheses (angle brackets do not group)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for match in _GROUPING.finditer(text):
        char = match.group(0)
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start : match.start()].strip())
            start = match.end()
    parts.append(text[start:].strip())
    return [] if parts == [""] else parts


def _substitute(macro: Macro, arguments: list[str]) -> str:
    values = dict(zip(macro.params, arguments, strict=False))
    if macro.variadic:
        values["__VA_ARGS__"] = ", ".join(arguments[len(macro.params) :])
    parts = []
    for kind, text in macro.template():
        if kind == _TEXT:
            parts.append(text)
        elif text not in values:  # a parameter with no argument stays as written
            parts.append(text if kind == _PARAMETER else "#" + text)
        elif kind == _PARAMETER:
            parts.append(values[text])
        else:
            parts.append('"' + values[text].replace("\\", "\\\\").replace('"', '\\"') + '"')
    body = "".join(parts)
    return _PASTE.sub("", body) if "##" in body else body


class Expander:
    """The expandable macros of one file and their uses."""

    def __init__(self, macros: list[Macro]) -> None:
        self.by_name: dict[str, list[Macro]] = {}
        for macro in sorted(macros, key=lambda macro: macro.offset):
            self.by_name.setdefault(macro.name, []).append(macro)
        self.pattern: re.Pattern[str] | None = None
        if len(self.by_name) > _FIND_LIMIT:  # few names: found faster than compiled
            names = sorted(self.by_name, key=len, reverse=True)
            alternatives = "|".join(map(re.escape, names))
            self.pattern = re.compile(r"\b(" + alternatives + r")\b(\s*\()?")

    def mentions(self, text: str) -> list[tuple[int, int, str, int | None]]:
        """(start, end of the name, name, just after its '(' if called) of each whole-word
        mention of the file's macros, in order."""
        if self.pattern is not None:
            return [
                (
                    match.start(),
                    match.end(1),
                    match.group(1),
                    match.end() if match.group(2) else None,
                )
                for match in self.pattern.finditer(text)
            ]
        found = []
        size = len(text)
        for name in self.by_name:
            start = text.find(name)
            while start >= 0:
                end = start + len(name)
                if (start == 0 or not _word(text[start - 1])) and (
                    end == size or not _word(text[end])
                ):
                    after = end
                    while after < size and text[after] in " \t\r\n\f\v":
                        after += 1
                    opened = after + 1 if after < size and text[after] == "(" else None
                    found.append((start, end, name, opened))
                start = text.find(name, end)
        found.sort()
        return found

    def _macro(self, name: str, offset: int) -> Macro | None:
        found = None
        for macro in self.by_name.get(name, ()):
            if macro.offset < offset:
                found = macro
        return found

    def expand(self, text: str, offset: int, depth: int = 0) -> str:
        """``text`` with every use of the file's macros expanded (as seen from ``offset``)."""
        if depth >= _MAX_DEPTH:
            return text
        out: list[str] = []
        position = 0
        size = 0
        for start, _, name, opened in self.mentions(text):
            if start < position or opened is None:
                continue
            macro = self._macro(name, offset)
            close = closing_paren(text, opened - 1)
            if macro is None or close < 0:
                continue
            arguments = split_arguments(text[opened:close])
            expanded = self.expand(_substitute(macro, arguments), offset, depth + 1)
            out.append(text[position:start])
            out.append(expanded)
            size += start - position + len(expanded)
            position = close + 1
            if size > _MAX_EXPANSION:
                break
        out.append(text[position:])
        return "".join(out)

    def uses(
        self,
        text: str,
        wanted: Callable[[int, Macro, bool], bool] = lambda offset, macro, called: True,
    ) -> Iterator[tuple[int, int, str]]:
        """(offset, end, expansion) of every use in ``text`` outside #define lines that is
        ``wanted`` (asked before expanding: expansion is the costly part).

        A use is a call ``NAME(args)``, or the bare name passed as an argument to another
        macro (``DISPATCH_BY_KV_CACHE_DTYPE(dtype, kv_dtype, CALL_RESHAPE_AND_CACHE)``),
        which applies it to arguments we cannot see: it expands with its parameters' names.
        """
        for start, end, name, opened in self.mentions(text):
            called = opened is not None
            if not called and not _passed_by_name(text, start, end):
                continue
            macro = self._macro(name, start)
            if macro is None or not wanted(start, macro, called):
                continue
            line_start = text.rfind("\n", 0, start) + 1
            prefix = text[line_start:start].lstrip()
            if prefix.startswith(("#", "//", "*", "/*")):
                continue
            previous = text[max(0, line_start - 3) : line_start].rstrip()
            if previous.endswith("\\"):
                continue  # inside a multi-line #define
            if not called:
                yield start, end, self.expand(_substitute(macro, macro.params), start, 1)
                continue
            close = closing_paren(text, opened - 1)
            if close < 0:
                continue
            arguments = split_arguments(text[opened:close])
            yield start, close + 1, self.expand(_substitute(macro, arguments), start, 1)


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _passed_by_name(text: str, start: int, end: int) -> bool:
    """Whether a name stands alone as an argument: after '(' or ',', before ')' or ','."""
    before = text[max(0, start - 200) : start].rstrip()
    after = text[end : end + 200].lstrip()
    return before.endswith(("(", ",")) and after.startswith((")", ","))
