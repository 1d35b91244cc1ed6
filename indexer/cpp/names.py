"""C++ names as text: qualified-name components, template arguments, signature keys."""

from __future__ import annotations

import functools
import re

ANONYMOUS = "(anonymous)"

_SPACES = re.compile(r"\s+")
_COMMA = re.compile(r"\s*,\s*")
_INNERMOST_ARGUMENTS = re.compile(r"<[^<>]*>")
_GROUPING = re.compile(r"[<>()\[\]{},]")
_MACRO_NAME = re.compile(r"[A-Z][A-Z0-9_]*\Z")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# A parameter's name: an identifier after some type text, before ',' (or an array suffix).
_PARAMETER_NAME = re.compile(r"(?<=[\w*&>\].])(\s*)\b([A-Za-z_]\w*)(\s*(?:\[[^\]]*\]\s*)*)(?=,)")
_TRAILING_NAME = re.compile(r"(?<![:\w])([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)\Z")
_TYPE_WORDS = frozenset(
    {
        *("int", "char", "long", "short", "double", "float", "bool", "signed", "unsigned"),
        *("void", "auto", "const", "volatile", "size_t", "int64_t", "int32_t", "uint64_t"),
        *("uint32_t", "int8_t", "uint8_t", "int16_t", "uint16_t"),
    }
)


def is_macro_name(name: str) -> bool:
    """ALL_CAPS identifiers are macros by convention (AT_DISPATCH_..., TORCH_CHECK)."""
    return name.isupper() and len(name) > 1 and _MACRO_NAME.match(name) is not None


def strip_templates(text: str) -> str:
    """Drop template argument lists: 'at::vec::Vectorized<float>::loadu' -> '...Vectorized::loadu'.

    An ``operator<``-style name keeps its angle brackets.
    """
    if "<" not in text:
        return text
    if "operator" not in text and "->" not in text:
        # Innermost argument lists first, each pass in C: Foo<Bar<int>>::f -> Foo::f.
        stripped = text
        while "<" in stripped:
            shorter = _INNERMOST_ARGUMENTS.sub("", stripped)
            if shorter == stripped:
                break  # unbalanced: leave the rest to the scan below
            stripped = shorter
        if "<" not in stripped and ">" not in stripped:
            return stripped
    out: list[str] = []
    depth = 0
    i = 0
    n = len(text)
    while i < n:
        if text.startswith("operator", i) and depth == 0:
            out.append(text[i:])  # an operator name ends the qualified name
            break
        char = text[i]
        if char == "<":
            depth += 1
        elif char == ">":
            if depth:
                depth -= 1
        elif depth == 0:
            out.append(char)
        i += 1
    return "".join(out)


def split_qualified(text: str) -> list[str]:
    """'::a::B<T>::f' -> ['a', 'B', 'f']; 'Foo::operator()' -> ['Foo', 'operator()']."""
    if "<" in text:
        text = strip_templates(text)
    if "operator" in text:
        head, _, operator = text.partition("operator")
        head = head.rstrip()
        if (not head or head.endswith("::")) and not (
            operator[:1].isalnum() or operator[:1] == "_"
        ):
            operator = _SPACES.sub(" ", operator).strip()
            spaced = operator[:1].isalpha() or operator[:1] == "_"
            parts = [part.strip() for part in head.split("::") if part.strip()]
            parts.append("operator" + (" " if spaced else "") + operator)
            return parts
    if " " in text or "\n" in text or "\t" in text:
        text = _SPACES.sub("", text)
    return [part for part in text.split("::") if part]


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    start = 0
    for match in _GROUPING.finditer(text):
        char = match.group()
        if char == ",":
            if depth == 0:
                parts.append(text[start : match.start()])
                start = match.end()
        elif char in "<([{":
            depth += 1
        else:
            depth -= 1
    parts.append(text[start:])
    return parts


def _parameter_type(parameter: str) -> str:
    parameter = parameter.split("=", 1)[0].strip() if "=" in parameter else parameter.strip()
    match = _TRAILING_NAME.search(parameter)
    if match and match.start() > 0 and match.group(1) not in _TYPE_WORDS:
        parameter = parameter[: match.start()] + match.group(2)
    parameter = _COMMA.sub(", ", _SPACES.sub(" ", parameter).strip())
    return parameter.replace(" &", "&").replace(" *", "*")


def _drop_name(match: re.Match[str]) -> str:
    name = match.group(2)
    return match.group(0) if name in _TYPE_WORDS else match.group(3)


def signature_key(parameters: str, trailing: str = "") -> str:
    """The parameter types of a parameter list, names and defaults dropped.

    '(const Tensor& self, int64_t dim = 0) const' -> '(const Tensor&, int64_t) const'.
    """
    inner = parameters.strip()
    if inner.startswith("(") and inner.endswith(")"):
        inner = inner[1:-1]
    if "/" in inner:
        inner = _COMMENTS.sub(" ", inner)
    inner = inner.strip()
    if not inner or inner == "void":
        key = "()"
    elif "=" in inner or "(" in inner:  # defaults or function types: one parameter at a time
        key = "(" + ", ".join(_parameter_type(part) for part in _split_top_level(inner)) + ")"
    else:  # the common case: one pass drops every parameter name
        key = _SPACES.sub(" ", _PARAMETER_NAME.sub(_drop_name, inner + ","))
        key = _COMMA.sub(", ", key[:-1].strip()).replace(" &", "&").replace(" *", "*")
        key = f"({key})"
    return key + (" " + trailing if trailing else "")


def arity(parameters: str) -> tuple[int, int]:
    """(fewest, most) arguments a parameter list accepts; most is -1 when variadic."""
    inner = parameters.strip()
    if inner.startswith("(") and inner.endswith(")"):
        inner = inner[1:-1]
    if "/" in inner:
        inner = _COMMENTS.sub(" ", inner)
    inner = inner.strip()
    if not inner or inner == "void":
        return 0, 0
    parts = _split_top_level(inner) if ("<" in inner or "(" in inner) else inner.split(",")
    most = len(parts)
    fewest = sum(1 for part in parts if "=" not in part and "..." not in part)
    return fewest, (-1 if "..." in parts[-1] else most)


_NOT_SIMPLE = frozenset("<([{=/\"'")
# A parameter's name: an identifier after some type text, before ',' or the end (and not
# itself a type word: `unsigned int`).
_UNNAMED = re.compile(
    r"(?<=[\w*&>\].])\s*\b(?!(?:"
    + "|".join(sorted(_TYPE_WORDS, key=len, reverse=True))
    + r")\b)[A-Za-z_]\w*(?=\s*(?:,|$))"
)


@functools.lru_cache(maxsize=1 << 16)
def parameters(text: str, trailing: str = "") -> tuple[str, tuple[int, int]]:
    """(signature_key, arity) of a parameter list, with a fast path for plain lists (no
    templates, defaults, function types, arrays or comments), most of them: one
    substitution in C drops every parameter name. Memoised: the same lists recur across
    a tree's files (``(const Tensor& self)``), and a worker extracts many files."""
    inner = text.strip()
    if inner[:1] == "(" and inner[-1:] == ")":
        inner = inner[1:-1]
    if not _NOT_SIMPLE.isdisjoint(inner):
        return signature_key(text, trailing), arity(text)
    suffix = " " + trailing if trailing else ""
    stripped = inner.strip()
    if not stripped or stripped == "void":
        return "()" + suffix, (0, 0)
    count = inner.count(",") + 1
    most = -1 if "..." in inner[inner.rfind(",") + 1 :] else count
    key = " ".join(_UNNAMED.sub("", inner).split())
    key = key.replace(" ,", ",").replace(", ", ",").replace(",", ", ")
    key = key.replace(" &", "&").replace(" *", "*")
    return f"({key}){suffix}", (count - (1 if most < 0 else 0), most)


def owner_arguments(written: str) -> str | None:
    """The class a written name belongs to, if written with template arguments (spaces
    dropped): 'at::vec::Vectorized<float>::loadu' -> 'Vectorized<float>'; else None."""
    components: list[str] = []
    depth = 0
    start = 0
    index = 0
    while index < len(written):
        char = written[index]
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif depth == 0 and written.startswith("::", index):
            components.append(written[start:index])
            start = index + 2
            index += 1
        index += 1
    if not components or "<" not in components[-1]:
        return None
    return "".join(components[-1].split())
