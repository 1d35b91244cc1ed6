"""Same-length blanking of the tokens tree-sitter-cpp cannot parse, before parsing.

tree-sitter-cpp knows nothing of CUDA (``__global__``, ``kernel<<<grid, block>>>(...)``)
nor of attribute macros (``class TORCH_API Foo``, ``C10_HOST_DEVICE``, a project's own
``MYLIB_PUBLIC``: indexer/cpp/attribute_macros.py), and recovers from them with ERROR
nodes that can swallow whole classes. Replacing each such
token by as many spaces keeps every byte offset, line and column, so the parse of the
prepared bytes reports positions of the original file. What was blanked is remembered:
``__global__`` / ``__device__`` positions make kernels and device functions, and the
``<<<`` positions make launch sites.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from indexer.cpp import attribute_macros
from indexer.cpp.attribute_macros import C10_ATTRIBUTES, MARKING, OTHER_ATTRIBUTES
from indexer.cpp.brackets import closing_paren
from indexer.cpp.objc import as_cpp

if TYPE_CHECKING:
    from indexer.cpp.shared_macros import SharedMacros

# A macro's argument list: strings, and parentheses nested twice.
_ARGUMENTS = rb'\((?:"(?:[^"\\\n]|\\.)*"|[^()"]|\((?:[^()]|\([^()]*\))*\))*\)'


def _names(names) -> bytes:
    return b"|".join(name.encode() for name in sorted(names, key=len, reverse=True))


# (pattern, needles: run it only on files holding one). Each pattern starts with a literal
# or a small set of first letters, which the regex engine scans for quickly.
_PASSES = (
    (
        # CUDA qualifiers and __attribute-like__ names
        re.compile(
            rb"__(?:(?P<mark>global|device|host)|forceinline|noinline|shared|constant|managed"
            rb"|grid_constant|at_align|ubsan_ignore_[a-z_]+?)__(?!\w)"
            rb"|__launch_bounds__\s*" + _ARGUMENTS
        ),
        (b"__",),
    ),
    (
        re.compile(
            rb"C10_(?:(?P<mark>HOST_DEVICE|DEVICE)|" + _names(C10_ATTRIBUTES) + rb")(?!\w)"
            rb"|C10_(?:LAUNCH_BOUNDS_[12]|DEPRECATED_MESSAGE)\s*"
            + _ARGUMENTS
            # Diagnostic pragmas as macros: C10_CLANG_DIAGNOSTIC_PUSH(), ..._IGNORE("-W...")
            + rb"|C10_(?:CLANG_)?DIAGNOSTIC_\w+(?:\s*"
            + _ARGUMENTS
            + rb")?"
        ),
        (b"C10_",),
    ),
    # Code-generation templates (TensorBody.h): ${tensor_method_declarations}
    (re.compile(rb"\$\{\w+\}"), (b"${",)),
)
# Each of the other attribute macros is a literal of its own (a single alternation of
# names with no common prefix would be tried at every byte); rare, so looked for only in
# files holding one of these needles.
_RARE_NEEDLES = (b"CUTLASS_", b"CUTE_", b"_GLOBAL", b"JITERATOR_", b"GPU_LAMBDA", b"RESTRICT")
_RARE_NEEDLES += (b"PYTORCH_QNNP_INTERNAL", b"TENSORIMPL_MAYBE_VIRTUAL", b"VISIBILITY_HIDDEN")
_RARE_PASSES = (
    *(
        (re.compile(rb"(?P<mark>" + name.encode() + rb")(?!\w)"), (name.encode(),))
        for name in MARKING
    ),
    *(
        (re.compile(rb"(?P<mark>)" + name.encode() + rb"(?!\w)"), (name.encode(),))
        for name in OTHER_ATTRIBUTES
    ),
)
# Export macros (TORCH_API, C10_API, TORCH_CUDA_CPP_API, AOTI_TORCH_EXPORT...): found by
# their tail, then extended back over the upper-case name.
_EXPORT = re.compile(rb"_(?:API|EXPORT)(?!\w)")
# Launch configurations never span a statement or a block.
_LAUNCH = re.compile(rb"<<<[^;{}]*?>>>")
_CONTINUATION = re.compile(rb"\\\r?\n")
# Long runs of lines holding nothing but numeric literals, commas and braces are data
# tables: nothing to index, and in a big file (SobolEngineOpsUtils.cpp: 2 MB of direction
# numbers) the bulk of the parse. A run is blanked only when its braces balance.
_NUMBER_TABLE = re.compile(rb"(?:^[ \t]*[-+0-9a-fA-FxXuUlL.{}, \t]*,[ \t]*\r?\n){256,}", re.M)
_LARGE = 256 * 1024
# A file's own object-like macro that opens or closes a namespace
# (``#define NLOHMANN_JSON_NAMESPACE_BEGIN namespace nlohmann {``): its uses are written
# out, padded to the same length, or every brace after them is off by one.
_NAMESPACE_MACRO = re.compile(
    rb"#[ \t]*define[ \t]+(\w+)[ \t]+(namespace[ \t]+[\w:]+[ \t]*\{|\})[ \t]*\r?\n"
)
_SPACES_KEEP_NEWLINES = bytes(10 if byte == 10 else 32 for byte in range(256))
# Braces, and what holds braces that are not code: comments, string and char literals.
_BRACE_TOKENS = re.compile(
    rb"[{}]|//[^\n]*|/\*.*?\*/|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'", re.S
)
_FUNCTION_LIKE_DEFINE = re.compile(rb"#[ \t]*define[ \t]+(\w+)\(")
_BUILTIN_TYPE = re.compile(rb"\b(?:unsigned|signed|short|long|char|int|float|double|bool|void)\b")
_DIRECTIVE = re.compile(rb"#[ \t]*(ifdef|ifndef|if|elif|else|endif)\b")
_IDENTIFIER_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_UPPER_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass(slots=True)
class Prepared:
    """The bytes to parse, and the offsets of what was blanked in them."""

    data: bytes
    global_at: list[int] = field(default_factory=list)  # `__global__`, CUTLASS_GLOBAL
    device_at: list[int] = field(default_factory=list)  # `__device__`, C10_DEVICE
    host_at: list[int] = field(default_factory=list)  # `__host__`
    host_device_at: list[int] = field(default_factory=list)  # C10_HOST_DEVICE
    launch_at: list[int] = field(default_factory=list)  # `<<<`
    macro_use_at: list[int] = field(default_factory=list)  # blanked uses of macros
    shared_macros_used: dict[str, None] = field(default_factory=dict)  # their names, in order


def _free_standing(data: bytes, start: int) -> bool:
    """Not the tail of a longer identifier, and not the name a #define defines."""
    if start and data[start - 1] in _IDENTIFIER_BYTES:
        return False
    return data[max(0, start - 7) : start] != b"define "


def _namespace_macro_uses(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value padded to the name's length) of each use of the file's own
    namespace-opening or -closing macros whose value fits in the name."""
    values = {
        match.group(1): match.group(2)
        for match in _NAMESPACE_MACRO.finditer(data)
        if len(match.group(2)) <= len(match.group(1))
    }
    if not values:
        return []
    uses = re.compile(rb"\b(?:" + _names(name.decode() for name in values) + rb")\b")
    return [
        (match.start(), values[match.group(0)].ljust(len(match.group(0))))
        for match in uses.finditer(data)
        if not _in_directive(data, match.start())
    ]


def _typed_macro_uses(data: bytes) -> list[tuple[int, int]]:
    """Statement uses of the file's own function-like macros whose arguments hold a builtin
    type (``SMALL_INDEX(scalar_t, index_t, unsigned int, 1, 1, -2);`` in Indexing.cu):
    tree-sitter reads them as declarations and, failing, loses the functions around them.
    Their expansion is what extraction reads (indexer/cpp/expand.py)."""
    names = {match.group(1) for match in _FUNCTION_LIKE_DEFINE.finditer(data)}
    if not names:
        return []
    found = []
    for start, opened in sorted(_called(data, names)):
        if _in_directive(data, start):
            continue
        line_start = data.rfind(b"\n", 0, start) + 1
        if data[max(0, line_start - 3) : line_start].rstrip().endswith(b"\\"):
            continue  # a line of a multi-line #define
        close = closing_paren(data, opened)
        if close < 0 or not _BUILTIN_TYPE.search(data, opened + 1, close):
            continue
        if data[close + 1 : close + 64].lstrip().startswith(b";"):
            found.append((start, close + 1))
    return found


def _called(data: bytes, names: set[bytes]) -> Iterator[tuple[int, int]]:
    """(start, offset of the '(') of each whole-word ``name (`` in ``data``. A file has
    few macros: a find per name is faster than compiling an alternation per file."""
    size = len(data)
    for name in names:
        start = data.find(name)
        while start >= 0:
            after = start + len(name)
            if not start or data[start - 1] not in _IDENTIFIER_BYTES:
                opened = after
                while opened < size and data[opened] in b" \t\r\n\f\v":
                    opened += 1
                if opened < size and data[opened] == 0x28:  # (
                    yield start, opened
            start = data.find(name, after)


def _in_directive(data: bytes, start: int) -> bool:
    """Whether ``start`` is on a preprocessor line (its first non-blank byte is '#')."""
    line_start = data.rfind(b"\n", 0, start) + 1
    return data[line_start:start].lstrip().startswith(b"#")


def _split_brace_branches(data: bytes) -> list[tuple[int, int]]:
    """The #elif/#else branches of conditionals whose branches open or close braces they
    do not close or open, e.g. two spellings of one ``struct X {`` header: tree-sitter
    cannot parse both, so only the first branch is kept, as plain code. A conditional
    with one branch that does not balance is blanked whole."""
    spans: list[tuple[int, int]] = []
    stack: list[list[re.Match[bytes]]] = []
    for match in _DIRECTIVE.finditer(data):
        line_start = data.rfind(b"\n", 0, match.start()) + 1
        if data[line_start : match.start()].strip():
            continue  # not at the start of a line
        kind = match.group(1)
        if kind in (b"if", b"ifdef", b"ifndef"):
            stack.append([match])
        elif not stack:
            continue
        elif kind != b"endif":
            stack[-1].append(match)
        else:
            group = stack.pop()
            if len(group) < 2:
                # One branch holding half a block (`#if X` `if (c) {` `#endif`, closed by a
                # later `#if X` `}` `#endif`): neither half parses inside a conditional.
                opening = group[0]
                if _braces(data, opening.end(), match.start(), spans) != 0:
                    while spans and spans[-1][0] >= opening.start():
                        spans.pop()
                    spans.append((opening.start(), _line_end(data, match.start())))
                continue
            group.append(match)
            for opening, closing in itertools.pairwise(group):
                start, end = opening.end(), closing.start()
                if _braces(data, start, end, spans) != 0:
                    # Inner groups are done first: only what they keep counts here, and
                    # what they blanked after the first branch is blanked with it.
                    while spans and spans[-1][0] >= group[1].start():
                        spans.pop()
                    # The kept branch reads as plain code: tree-sitter cannot parse a
                    # conditional holding half a block.
                    bisect.insort(spans, (group[0].start(), _line_end(data, group[0].start())))
                    spans.append((group[1].start(), _line_end(data, match.start())))
                    break
    return spans


def _line_end(data: bytes, start: int) -> int:
    """The end of the (continued) line holding ``start``, before its newline."""
    end = data.find(b"\n", start)
    while end > 0 and data[end - 1 : end] == b"\\":
        end = data.find(b"\n", end + 1)
    return len(data) if end < 0 else end


def _braces(data: bytes, start: int, end: int, blanked: list[tuple[int, int]]) -> int:
    """Opening minus closing braces in [start, end), leaving out the blanked spans of the
    conditionals nested in it. Counted plainly first; when that does not balance, again
    without the braces of comments and literals (``// contiguous") {``)."""
    inner = []
    for index in range(len(blanked) - 1, -1, -1):
        inner_start, inner_end = blanked[index]
        if inner_start < start:
            break
        if inner_end <= end:
            inner.append((inner_start, inner_end))
    balance = _plain_balance(data, start, end)
    for inner_start, inner_end in inner:
        balance -= _plain_balance(data, inner_start, inner_end)
    if balance == 0:
        return 0
    balance = _code_balance(data, start, end)
    for inner_start, inner_end in inner:
        balance -= _code_balance(data, inner_start, inner_end)
    return balance


def _plain_balance(data: bytes, start: int, end: int) -> int:
    return data.count(b"{", start, end) - data.count(b"}", start, end)


def _code_balance(data: bytes, start: int, end: int) -> int:
    balance = 0
    for match in _BRACE_TOKENS.finditer(data, start, end):
        token = match.group(0)
        if token == b"{":
            balance += 1
        elif token == b"}":
            balance -= 1
    return balance


def prepare(data: bytes, shared: SharedMacros | None = None, objc: bool = False) -> Prepared:
    """Blank CUDA qualifiers, attribute macros and launch configurations to spaces, and
    the uses of macros whose expansion extraction reads (the file's own with builtin types
    in their arguments, ``shared`` header macros opening a line); in Objective-C++
    (``objc``), write its blocks and literals as the C++ they stand for."""
    if objc:
        data = as_cpp(data)
    prepared = Prepared(data)
    spans: list[tuple[int, int]] = []
    marks = {
        b"global": prepared.global_at,
        b"device": prepared.device_at,
        b"host": prepared.host_at,
        b"DEVICE": prepared.device_at,
        b"HOST_DEVICE": prepared.host_device_at,
        **{name.encode(): getattr(prepared, f"{kind}_at") for name, kind in MARKING.items()},
    }
    passes = _PASSES
    if any(needle in data for needle in _RARE_NEEDLES):
        passes = _PASSES + _RARE_PASSES
    for pattern, needles in passes:
        if not any(needle in data for needle in needles):
            continue
        for match in pattern.finditer(data):
            start = match.start()
            if not _free_standing(data, start):
                continue
            spans.append((start, match.end()))
            mark = match.group("mark") if pattern.groups else None
            if mark:
                marks[mark].append(start)
    if b"_API" in data or b"_EXPORT" in data:
        for match in _EXPORT.finditer(data):
            start = match.start()
            while start and data[start - 1] in _UPPER_BYTES:
                start -= 1
            if (
                start < match.start()
                and 65 <= data[start] <= 90
                and _free_standing(data, start)
                and not _in_directive(data, start)  # `#ifdef USE_CUDNN_RNN_V8_API`
            ):
                spans.append((start, match.end()))
    tree_attributes = shared.attributes if shared is not None else {}
    for start, end, mark in attribute_macros.uses(
        data, attribute_macros.file_attributes(data, tree_attributes)
    ):
        spans.append((start, end))
        if mark:
            getattr(prepared, f"{mark}_at").append(start)
    uses = _typed_macro_uses(data) if b"define" in data else []
    if shared:
        for name, start, end in shared.statement_uses(data):
            uses.append((start, end))
            prepared.shared_macros_used.setdefault(name, None)
    if uses:
        prepared.macro_use_at = sorted(start for start, _ in uses)
        spans += uses
    if b"<<<" in data:
        for match in _LAUNCH.finditer(data):
            prepared.launch_at.append(match.start())
            spans.append((match.start(), match.end()))
    if b"#if" in data:
        spans += _split_brace_branches(data)
    if len(data) > _LARGE:
        spans += [
            match.span()
            for match in _NUMBER_TABLE.finditer(data)
            if data.count(b"{", *match.span()) == data.count(b"}", *match.span())
        ]
    written = _namespace_macro_uses(data) if b"namespace" in data and b"define" in data else []
    if not spans and not written:
        return prepared
    buffer = bytearray(data)
    for start, end in spans:
        text = data[start:end]
        # Newlines stay, so lines keep their numbers even when a blanked span wraps; so do
        # the backslashes continuing a #define over them (a launch inside a macro body).
        if b"\n" not in text:
            buffer[start:end] = b" " * (end - start)
            continue
        blank = bytearray(text.translate(_SPACES_KEEP_NEWLINES))
        for continued in _CONTINUATION.finditer(text):
            blank[continued.start()] = 0x5C
        buffer[start:end] = blank
    for start, value in written:
        buffer[start : start + len(value)] = value
    prepared.data = bytes(buffer)
    for offsets in (
        prepared.global_at,
        prepared.device_at,
        prepared.host_at,
        prepared.host_device_at,
    ):
        offsets.sort()
    return prepared
