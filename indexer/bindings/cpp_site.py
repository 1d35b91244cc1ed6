"""Reading registration sites in a tree-sitter C++ parse.

Small, shared helpers: which code the preprocessor drops (``#if 0``), the namespaces and
``using`` directives in effect at a node (what a ``cpp`` ref carries to its resolver),
string literals, and the C++ callables an argument expression names (``&fn``,
``TORCH_FN(fn)``, ``torch::dispatch(Key, fn)``, a lambda's callees...).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import tree_sitter

ANONYMOUS = "(anonymous)"
_DEAD_CONDITIONS = {"0", "false", "(0)"}
_LIVE_CONDITIONS = {"1", "true", "(1)"}
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
# Calls that only wrap the callable they are given.
WRAPPERS = frozenset(
    {
        "TORCH_FN",
        "TORCH_BOX",
        "TORCH_FN_TYPE",
        "dispatch",
        "makeFromBoxedFunction",
        "makeFromUnboxedFunction",
        "makeUnboxedOnly",
        "overload_cast",
        "static_cast",
        "reinterpret_cast",
        "castPyCFunctionWithKeywords",
        "castPyCFunctionFast",
        "wrap_pybind_function",
        "wrap_pybind_function_no_gil",
    }
)
# Identifiers that are never a callable argument (flags, keys, values).
# Libraries outside any indexed tree: a lambda's calls into them name nothing to link.
_EXTERNAL = re.compile(r"^(?:std|py|pybind11|fmt)::")
_MACRO = re.compile(r"^[A-Z][A-Z0-9_]*$")  # TORCH_CHECK, EXPECT_TRUE: macros, not functions
_NOT_CALLABLE = re.compile(r"^(METH_\w+|k[A-Z]\w*|nullptr|NULL|true|false)$")


def text(node: tree_sitter.Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""


def line(node: tree_sitter.Node) -> int:
    return node.start_point[0] + 1


def end_line(node: tree_sitter.Node) -> int:
    return node.end_point[0] + 1


_DIRECTIVE = re.compile(rb"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$", re.M)
_COMMENT = re.compile(rb"//.*|/\*.*?\*/")


def _constant(condition: bytes) -> bool | None:
    value = _COMMENT.sub(b"", condition).strip()
    if value in (b"0", b"false", b"(0)"):
        return False
    if value in (b"1", b"true", b"(1)"):
        return True
    return None


class DeadCode:
    """Lines the preprocessor certainly drops: ``#if 0`` blocks, the ``#else`` of ``#if 1``.

    Read from the text, not the tree: a directive inside an expression (a PyMethodDef
    table) is an ERROR node to tree-sitter, and must still hide what it guards.
    """

    def __init__(self, data: bytes) -> None:
        self.lines: set[int] = set()
        if b"#" not in data:
            return
        stack: list[list[bool]] = []  # per #if: [this branch is dead, a branch was taken]
        dead_from: int | None = None
        for match in _DIRECTIVE.finditer(data):
            directive, rest = match.group(1), match.group(2)
            line = data.count(b"\n", 0, match.start()) + 1
            was_dead = any(frame[0] for frame in stack)
            if directive in (b"if", b"ifdef", b"ifndef"):
                value = _constant(rest) if directive == b"if" else None
                stack.append([value is False, value is True])
            elif not stack:
                continue
            elif directive == b"elif":
                frame = stack[-1]
                value = _constant(rest)
                frame[0] = frame[1] or value is False
                frame[1] = frame[1] or value is True
            elif directive == b"else":
                frame = stack[-1]
                frame[0] = frame[1]  # dead only if an earlier branch was certainly taken
                frame[1] = True
            else:
                stack.pop()
            now_dead = any(frame[0] for frame in stack)
            if now_dead and not was_dead:
                dead_from = line + 1
            elif was_dead and not now_dead and dead_from is not None:
                self.lines.update(range(dead_from, line))
                dead_from = None

    def covers(self, node: tree_sitter.Node) -> bool:
        return bool(self.lines) and (node.start_point[0] + 1) in self.lines


def in_comment_or_string(node: tree_sitter.Node) -> bool:
    current: tree_sitter.Node | None = node
    while current is not None:
        if current.type in ("comment", "string_literal", "raw_string_literal", "char_literal"):
            return True
        if current.type in ("function_definition", "declaration", "translation_unit"):
            return False
        current = current.parent
    return False


def string_value(node: tree_sitter.Node | None) -> str | None:
    """The value of a string literal, adjacent literals concatenated; None if not one.

    ``TORCH_SELECTIVE_NAME("aten::x")`` / ``TORCH_SELECTIVE_SCHEMA(...)`` are unwrapped.
    """
    if node is None:
        return None
    if node.type == "string_literal":
        return "".join(
            text(child) if child.type == "string_content" else _escape(child)
            for child in node.children
            if child.type in ("string_content", "escape_sequence")
        )
    if node.type == "raw_string_literal":
        raw = text(node)
        start, end = raw.find("("), raw.rfind(")")
        return raw[start + 1 : end] if 0 <= start < end else None
    if node.type == "cast_expression":  # (char*)"name", as PyTorch's method tables write it
        return string_value(node.child_by_field_name("value"))
    if node.type == "concatenated_string":
        parts = [string_value(child) for child in node.named_children]
        return "".join(part for part in parts if part is not None)
    if node.type == "call_expression":
        function = text(node.child_by_field_name("function"))
        if function.startswith("TORCH_SELECTIVE_"):
            arguments = node.child_by_field_name("arguments")
            if arguments is not None and arguments.named_child_count == 1:
                return string_value(arguments.named_children[0])
    if node.type == "parenthesized_expression" and node.named_child_count == 1:
        return string_value(node.named_children[0])
    return None


def _escape(node: tree_sitter.Node) -> str:
    value = text(node)
    return {'\\"': '"', "\\\\": "\\", "\\n": "\n", "\\t": "\t"}.get(value, value)


def arguments_of(call: tree_sitter.Node) -> list[tree_sitter.Node]:
    arguments = call.child_by_field_name("arguments")
    if arguments is None:
        return []
    return [child for child in arguments.named_children if child.type != "comment"]


def plain_name(node: tree_sitter.Node) -> str:
    """A name as written, template arguments and whitespace removed: ``at::native::f``."""
    name = "".join(text(node).split())
    while True:
        stripped = _TEMPLATE_ARGS.sub("", name)
        if stripped == name:
            break
        name = stripped
    return name.lstrip(":")


@dataclass(frozen=True, slots=True)
class Callee:
    name: str  # as written: 'at::native::add_out', 'Generator::seed'
    line: int
    via: str  # 'pointer', 'name', 'lambda'


def callees_in_body(body: tree_sitter.Node, via: str = "lambda") -> list[Callee]:
    """Functions called by name in ``body`` (method calls have no known receiver: skipped)."""
    found: list[Callee] = []
    for node in walk(body):
        if node.type != "call_expression":
            continue
        function = node.child_by_field_name("function")
        if function is None or function.type not in (
            "identifier",
            "qualified_identifier",
            "template_function",
        ):
            continue
        name = plain_name(function)
        last = name.split("::")[-1]
        if name and last not in WRAPPERS and not _MACRO.match(last) and not _EXTERNAL.match(name):
            found.append(Callee(name, line(node), via))
    return found


def callables(node: tree_sitter.Node) -> list[Callee]:
    """The C++ callables an argument expression hands over, as written."""
    kind = node.type
    if kind in ("identifier", "qualified_identifier", "template_function", "field_identifier"):
        name = plain_name(node)
        if not name or _NOT_CALLABLE.match(name.split("::")[-1]):
            return []
        if "DispatchKey::" in name or name.startswith(("c10::k", "at::k", "torch::k")):
            return []
        return [Callee(name, line(node), "name")]
    if kind == "pointer_expression":
        argument = node.child_by_field_name("argument")
        return [
            Callee(c.name, c.line, "pointer") for c in (callables(argument) if argument else [])
        ]
    if kind in ("parenthesized_expression", "cast_expression"):
        inner = node.child_by_field_name("value") or (
            node.named_children[-1] if node.named_children else None
        )
        return callables(inner) if inner is not None else []
    if kind == "lambda_expression":
        body = node.child_by_field_name("body")
        return callees_in_body(body) if body is not None else []
    if kind == "call_expression":
        found: list[Callee] = []
        function = node.child_by_field_name("function")
        wrapper = function is not None and plain_name(function).split("::")[-1] in WRAPPERS
        for argument in arguments_of(node):
            if wrapper or argument.type in ("pointer_expression", "lambda_expression"):
                found.extend(callables(argument))
        if function is not None:
            for template_args in _template_argument_lists(function):
                for argument in template_args.named_children:
                    if argument.type == "pointer_expression" or text(argument).startswith("&"):
                        found.extend(callables(_unwrap_descriptor(argument)))
        return found
    return []


def _unwrap_descriptor(node: tree_sitter.Node) -> tree_sitter.Node:
    if node.type in ("type_descriptor", "expression") and node.named_child_count == 1:
        return node.named_children[0]
    return node


def _template_argument_lists(node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    for child in walk(node):
        if child.type == "template_argument_list":
            yield child


def walk(node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    """Pre-order traversal without recursion."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


@dataclass
class SiteContext:
    """Namespaces and ``using`` in effect at a site, as a ``cpp`` ref carries them."""

    scope: list[str] = field(default_factory=list)
    using: list[str] = field(default_factory=list)

    def ref_attrs(self) -> dict[str, list[str]]:
        return {"scope": list(self.scope), "using": list(self.using)}


def namespace_path(node: tree_sitter.Node) -> list[str]:
    """Enclosing namespaces of ``node``, outermost first; anonymous as ``(anonymous)``."""
    parts: list[list[str]] = []
    current = node.parent
    while current is not None:
        if current.type == "namespace_definition":
            name = current.child_by_field_name("name")
            parts.append(text(name).replace(" ", "").split("::") if name else [ANONYMOUS])
        current = current.parent
    return [part for group in reversed(parts) for part in group if part]


class UsingIndex:
    """``using namespace X;`` and ``using a::B;`` at namespace level, by position."""

    def __init__(self, root: tree_sitter.Node) -> None:
        self.directives: list[tuple[int, list[str], str]] = []  # (byte, scope, namespace)
        self._collect(root)

    def _collect(self, root: tree_sitter.Node) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            for child in node.children:
                if child.type == "using_declaration":
                    self._add(child)
                elif child.type in (
                    "namespace_definition",
                    "declaration_list",
                    "preproc_if",
                    "preproc_ifdef",
                    "preproc_else",
                    "preproc_elif",
                    "linkage_specification",
                ):
                    stack.append(child)

    def _add(self, node: tree_sitter.Node) -> None:
        body = " ".join(text(node).split()).rstrip(";").strip()
        if body.startswith("using namespace "):
            namespace = body[len("using namespace ") :].strip().lstrip(":")
        elif body.startswith("using ") and "=" not in body and "::" in body:
            # A using-declaration brings one name in; its namespace lets the resolver find it.
            namespace = body[len("using ") :].strip().lstrip(":").rpartition("::")[0]
        else:
            return
        if namespace:
            self.directives.append((node.start_byte, namespace_path(node), namespace))

    def context(self, node: tree_sitter.Node, extra_using: list[str] | None = None) -> SiteContext:
        scope = namespace_path(node)
        using = [
            namespace
            for byte, where, namespace in self.directives
            if byte < node.start_byte and scope[: len(where)] == where
        ]
        return SiteContext(scope, list(dict.fromkeys([*using, *(extra_using or [])])))
