"""A project's own attribute macros: object-like macros that expand to attributes only.

``VISION_API at::Tensor nms(...)``, ``MYLIB_PUBLIC torch::Tensor f(...)``,
``#define HD __host__ __device__``: a project names its export, inline and CUDA
qualifiers itself, in its headers, often one way per platform. tree-sitter reads the
unknown name as the return type and the real type as part of the name, so ``f`` is not
defined and its callers link to nothing. A macro whose every definition (in the tree's
headers or the file itself) expands to attributes, qualifiers, nothing, or other such
macros is blanked where it is used, like ``TORCH_API`` (indexer/cpp/preprocess.py);
what it marks (``__global__``, ``__device__``) is kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from indexer.cpp.brackets import closing_paren

# `#define NAME body` (not `NAME(`): upper-case names only, which is how C and C++
# projects spell such macros and keeps the search for their uses cheap.
OBJECT_DEFINE = re.compile(
    r"#[ \t]*define[ \t]+([A-Z_][A-Z0-9_]*)(?=[ \t\r\n/])((?:[^\n]*\\\r?\n)*[^\n]*)"
)
_CONTINUATION = re.compile(r"\\\r?\n")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_TOKEN = re.compile(r"\s*(?:(\[\[)|([A-Za-z_]\w*))")
# Words an attribute macro may expand to, and what the CUDA ones mark.
_WORDS = frozenset(
    {
        "inline",
        "static",
        "constexpr",
        "__inline",
        "__inline__",
        "__forceinline",
        "__forceinline__",
        "__noinline__",
        "__restrict",
        "__restrict__",
        "__host__",
        "__device__",
        "__global__",
    }
)
_CALLED = frozenset({"__attribute__", "__declspec", "__launch_bounds__", "alignas"})
# PyTorch's attribute macros, which indexer/cpp/preprocess.py blanks by name in every
# tree: C10_* object-like macros that expand to attributes (or nothing), ...
C10_ATTRIBUTES = (
    "HOST",
    "ALWAYS_INLINE",
    "ALWAYS_INLINE_ATTRIBUTE",
    "ALWAYS_INLINE_UNLESS_MOBILE",
    "NOINLINE",
    "UNUSED",
    "NODISCARD",
    "EXPORT",
    "IMPORT",
    "HIDDEN",
    "DEPRECATED",
    "RESTRICT",
    "HOST_CONSTEXPR",
    "HOST_CONSTEXPR_VAR",
    "HOST_CONSTEXPR_EXCEPT_WIN_CUDA",
    "CONSTEXPR_EXCEPT_WIN_CUDA",
    "LAUNCH_BOUNDS_0",
)
# ... others of PyTorch and the CUDA libraries it builds on, ...
OTHER_ATTRIBUTES = (
    "GPU_LAMBDA",
    "RESTRICT",
    "PYTORCH_QNNP_INTERNAL",
    "TENSORIMPL_MAYBE_VIRTUAL",
    "CUTLASS_HOST",
    "CUTE_HOST",
    "VISIBILITY_HIDDEN",
)
# ... macros that make a kernel or a device function, by what they mark, ...
MARKING = {
    "CUTLASS_GLOBAL": "global",
    "MAYBE_GLOBAL": "global",
    "CUTLASS_DEVICE": "device",
    "CUTE_DEVICE": "device",
    "CUTLASS_HOST_DEVICE": "host_device",
    "CUTE_HOST_DEVICE": "host_device",
    "JITERATOR_HOST_DEVICE": "host_device",
}
# ... and export macros, found by their tail (TORCH_API, C10_API, AOTI_TORCH_EXPORT).
_KNOWN_TAIL = re.compile(r"[A-Z][A-Z0-9_]*_(?:API|EXPORT)\Z")
_BUILTIN = {
    **{f"C10_{name}": "" for name in C10_ATTRIBUTES},
    "C10_HOST": "host",
    "C10_DEVICE": "device",
    "C10_HOST_DEVICE": "host_device",
    **{name: "" for name in OTHER_ATTRIBUTES},
    **MARKING,
}


def builtin(name: str) -> bool:
    """Whether preprocess blanks ``name`` by itself, in every tree."""
    return name in _BUILTIN or _KNOWN_TAIL.match(name) is not None


# A mark outranks none; a kernel outranks a device function (a macro defined as
# ``__global__`` for CUDA and as nothing elsewhere marks a kernel).
_MARK_RANK = {"": 0, "host": 1, "device": 2, "host_device": 3, "global": 4}


def _include_guard(text: str, name: str, at: int) -> bool:
    """``#ifndef NAME`` just before ``#define NAME``: a header's include guard."""
    before = text[max(0, at - 200) : at].rstrip().rsplit("\n", 1)[-1]
    return re.fullmatch(r"#[ \t]*ifndef[ \t]+" + re.escape(name) + r"[ \t]*", before) is not None


def read_body(body: str) -> tuple[str, list[str]] | None:
    """(mark, names it refers to) when ``body`` holds only attributes, qualifiers and
    upper-case names (other macros, decided later); None when it holds anything else."""
    text = _COMMENT.sub(" ", _CONTINUATION.sub(" ", body)).strip()
    words: set[str] = set()
    names: list[str] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            return None if text[position:].strip() else ("", names)
        position = match.end()
        if match.group(1):  # [[nodiscard]], [[deprecated("x")]]
            close = text.find("]]", position)
            if close < 0:
                return None
            position = close + 2
            continue
        word = match.group(2)
        if word in _CALLED:
            opened = position
            while opened < len(text) and text[opened].isspace():
                opened += 1
            close = closing_paren(text, opened) if text[opened : opened + 1] == "(" else -1
            if close < 0:
                return None
            position = close + 1
        elif word in _WORDS:
            words.add(word)
        elif word.isupper():  # another macro: decided with the others
            names.append(word)
        else:
            return None
    return _mark(words), names


def _mark(words: set[str]) -> str:
    if "__global__" in words:
        return "global"
    if "__device__" in words:
        return "host_device" if "__host__" in words else "device"
    return "host" if "__host__" in words else ""


def object_definitions(text: str) -> list[list]:
    """[name, body] of each object-like ``#define`` of ``text`` in the order written; the
    body is None where it holds more than attributes (a constant), and include guards are
    left out."""
    found: list[list] = []
    for match in OBJECT_DEFINE.finditer(text):
        name, body = match.group(1), match.group(2)
        if read_body(body) is None:
            found.append([name, None])
        elif body.strip() or not _include_guard(text, name, match.start()):
            found.append([name, _CONTINUATION.sub(" ", body).strip()])
    return found


def resolve(
    definitions: Mapping[str, Iterable[str | None]], known: Mapping[str, str]
) -> dict[str, str]:
    """Name -> mark of the names whose every body is attributes or names already known
    to be attribute macros (``known``: name -> mark, e.g. the tree's, for a file)."""
    read: dict[str, list[tuple[str, list[str]]]] = {}
    for name, bodies in definitions.items():
        parsed = [None if body is None else read_body(body) for body in bodies]
        if all(item is not None for item in parsed):
            read[name] = parsed  # type: ignore[assignment]
    found: dict[str, str] = {}
    changed = True
    while changed:  # names referring to names: until nothing more is decided
        changed = False
        for name, parsed in read.items():
            if name in found:
                continue
            marks = []
            for mark, names in parsed:
                refers = [_known(other, found, known) for other in names if other != name]
                if any(item is None for item in refers):
                    break
                marks.extend([mark, *refers])  # type: ignore[list-item]
            else:
                found[name] = max(marks or [""], key=_MARK_RANK.__getitem__)
                changed = True
    return found


def _known(name: str, found: Mapping[str, str], known: Mapping[str, str]) -> str | None:
    if name in found:
        return found[name]
    if name in known:
        return known[name]
    if name in _BUILTIN:
        return _BUILTIN[name]
    return "" if _KNOWN_TAIL.match(name) else None


_FUNCTION_LIKE = re.compile(r"#[ \t]*define[ \t]+([A-Za-z_]\w*)\(")


def file_attributes(data: bytes, tree: Mapping[str, str]) -> dict[str, str]:
    """Name -> mark of the attribute macros ``data`` may use that preprocess does not know
    by name: the tree's (``tree``), and the file's own, whose definitions win."""
    names = dict(tree)
    if b"define" in data:
        text = data.decode("latin-1")
        own: dict[str, list[str | None]] = {}
        for name, body in object_definitions(text):
            own.setdefault(name, []).append(body)
        for name in own:
            names.pop(name, None)
        names.update(resolve(own, tree))
        for name in _FUNCTION_LIKE.findall(text):
            names.pop(name, None)
    return {name: mark for name, mark in names.items() if not builtin(name)}


_IDENTIFIER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def uses(data: bytes, names: Mapping[str, str]) -> list[tuple[int, int, str]]:
    """(start, end, mark) of each whole-word use of an attribute macro in ``data``,
    outside preprocessor lines, and not called: a name followed by '(' is some other
    macro of that name (``C10_DEFINE_DEPRECATED_USING`` is both). Names are looked for
    one by one (a project has few)."""
    found = []
    for name, mark in names.items():
        needle = name.encode()
        start = data.find(needle)
        while start >= 0:
            end = start + len(needle)
            if (
                (not start or data[start - 1] not in _IDENTIFIER)
                and (end >= len(data) or data[end] not in _IDENTIFIER)
                and not data[end : end + 64].lstrip().startswith(b"(")
                and not _in_directive(data, start)
            ):
                found.append((start, end, mark))
            start = data.find(needle, end)
    found.sort()
    return found


def _in_directive(data: bytes, start: int) -> bool:
    """Whether ``start`` is on a preprocessor line, continued lines included
    (``#if defined(A) && \\`` then ``defined(B)``)."""
    line_start = data.rfind(b"\n", 0, start) + 1
    while line_start > 1 and (
        data.endswith(b"\\", 0, line_start - 1) or data.endswith(b"\\\r", 0, line_start - 1)
    ):
        line_start = data.rfind(b"\n", 0, line_start - 1) + 1
    return data[line_start:start].lstrip().startswith(b"#")
