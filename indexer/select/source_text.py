"""What placement reads in a changed file's text, with no index: its code tokens without
comments or layout (a code change from a comment- or whitespace-only one), and the names
C++ code outside every function defines (docs/selection.md, "From the diff to changed
entities")."""

from __future__ import annotations

import io
import re
import token as token_types
import tokenize
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter
from tree_sitter import Tree

from indexer.diff import Hunk
from indexer.extract.source import cpp_parser

_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# Nodes whose children are declarations in their own right (load_time.py reads it too).
CONTAINERS = frozenset(
    {
        "translation_unit",
        "declaration_list",
        "namespace_definition",
        "linkage_specification",
        "preproc_if",
        "preproc_ifdef",
        "preproc_else",
        "preproc_elif",
        "preproc_elifdef",
    }
)
# Children of a container that are part of its own syntax, not declarations.
_CONTAINER_SYNTAX = {"namespace_identifier", "nested_namespace_specifier", "string_literal"}
_DECLARATIONS = {
    "declaration",
    "field_declaration",
    "type_definition",
    "alias_declaration",
    "struct_specifier",
    "class_specifier",
    "union_specifier",
    "enum_specifier",
    "concept_definition",
    "template_declaration",
    "static_assert_declaration",
    "friend_declaration",
}
_NAME_LEAVES = {
    "identifier",
    "field_identifier",
    "type_identifier",
    "namespace_identifier",
    "destructor_name",
    "operator_name",
}
_CUDA_QUALIFIERS = re.compile(
    rb"__(global|device|host|shared|forceinline|launch_bounds|constant|managed|restrict)__"
)
Span = tuple[float, float]  # lines of one side of a hunk (see ``_span``)
_LAYOUT = {token_types.NL, tokenize.ENCODING, token_types.ENDMARKER}
_BY_TYPE = {token_types.INDENT, token_types.DEDENT, token_types.NEWLINE}
# A type comment is read at run time: TorchScript compiles `def f(x):  # type: (int) -> int`
# by it (torch.jit.annotations.get_type_line), so it is code, not a comment.
_TYPE_COMMENT = re.compile(r"#\s*type:")


@dataclass
class Scope:
    names: set[str] = field(default_factory=set)
    undecidable: list[str] = field(default_factory=list)  # why names cannot bound the change
    unplaced: list[int] = field(default_factory=list)  # lines of statements with no name
    last_include: int = 0  # line of the file's last #include

    def merge(self, other: Scope) -> None:
        self.names |= other.names
        self.undecidable += other.undecidable
        self.unplaced += other.unplaced


def _lines(node: tree_sitter.Node) -> range:
    start, end = node.start_point, node.end_point
    last = end[0] - (end[1] == 0 and end[0] > start[0])
    return range(start[0] + 1, last + 2)


def _declarator_names(node: tree_sitter.Node | None, out: set[str]) -> None:
    """The identifier a declarator declares, through pointers, arrays, functions, inits."""
    while node is not None:
        if node.type in _NAME_LEAVES:
            out.add(node.text.decode("utf-8", "replace").lstrip("~"))
            return
        if node.type in ("qualified_identifier", "template_function", "template_type"):
            inner = node.child_by_field_name("name")
            node = inner if inner is not None else None
            continue
        node = node.child_by_field_name("declarator") or next(
            (c for c in node.named_children if c.type in _NAME_LEAVES), None
        )


def _defined_names(node: tree_sitter.Node) -> set[str]:
    names: set[str] = set()
    if node.type == "template_declaration":
        for child in node.named_children:
            if child.type != "template_parameter_list":
                names |= _defined_names(child)
        return names
    name = node.child_by_field_name("name")
    if name is not None:
        _declarator_names(name, names)
    for child in node.children_by_field_name("declarator"):
        _declarator_names(child, names)
    type_node = node.child_by_field_name("type")
    if type_node is not None and type_node.child_by_field_name("body") is not None:
        names |= _defined_names(type_node)  # struct S {...} s;
    if node.type == "enum_specifier":
        body = node.child_by_field_name("body")
        for item in body.named_children if body is not None else ():
            enumerator = item.child_by_field_name("name")
            if enumerator is not None:
                names.add(enumerator.text.decode("utf-8", "replace"))
    return names


def _visit(node: tree_sitter.Node, lines: set[int], scope: Scope) -> None:
    covered: set[int] = set()
    for child in node.named_children:
        hit = lines.intersection(_lines(child))
        if not hit:
            continue
        covered |= hit
        kind = child.type
        if kind == "comment":
            continue
        condition = node.child_by_field_name("condition") or (
            node.child_by_field_name("name") if node.type == "preproc_ifdef" else None
        )
        if condition is not None and child == condition:
            scope.undecidable.append(f"preprocessor condition (line {min(hit)})")
        elif kind in _CONTAINER_SYNTAX:
            scope.undecidable.append(f"namespace or linkage header (line {min(hit)})")
        elif kind in CONTAINERS:
            _visit(child, hit, scope)
        elif kind in ("preproc_def", "preproc_function_def"):
            if min(hit) < scope.last_include:
                scope.undecidable.append(
                    f"macro defined before an #include (line {min(hit)}): it may change the "
                    "included headers"
                )
            scope.names |= _defined_names(child)
        elif kind == "preproc_include":
            scope.undecidable.append(f"#include (line {min(hit)})")
        elif kind in _DECLARATIONS:
            names = _defined_names(child)
            if names:
                scope.names |= names
            else:
                scope.undecidable.append(f"{kind} with no name (line {min(hit)})")
        elif kind in ("function_definition", "expression_statement"):
            # A function the index does not hold (a registration macro block such as
            # TORCH_LIBRARY_IMPL(...) { ... }) or a macro call at namespace scope.
            scope.unplaced += sorted(hit)
        elif kind == "ERROR":
            scope.undecidable.append(f"unparsable code (line {min(hit)})")
        else:
            scope.undecidable.append(f"{kind} (line {min(hit)})")
    leftover = lines - covered
    if leftover and node.type != "translation_unit":
        scope.undecidable.append(f"{node.type} syntax (line {min(leftover)})")


def outside_scope(tree: tree_sitter.Tree, lines: set[int]) -> Scope:
    """Names defined (or undefined) by changed ``lines`` that lie outside function bodies."""
    scope = Scope(last_include=_last_include(tree.root_node))
    _visit(tree.root_node, set(lines), scope)
    return scope


def _last_include(root: tree_sitter.Node) -> int:
    last = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "preproc_include":
            last = max(last, node.start_point[0] + 1)
        elif node.type in CONTAINERS or node.type == "translation_unit":
            stack.extend(node.named_children)
    return last


def identifiers(data: bytes) -> set[str]:
    return {match.decode("ascii") for match in _IDENTIFIER.findall(data)}


def error_lines(tree: tree_sitter.Tree, data: bytes) -> set[int]:
    """Lines inside ERROR regions: what tree-sitter could not parse there is unknown.

    tree-sitter-cpp does not know CUDA's qualifiers and leaves a one-line ERROR beside
    each (``__global__ void``); those are understood and not counted.
    """
    lines: set[int] = set()
    text_lines = data.split(b"\n")
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if not node.has_error:
            continue
        if node.type == "ERROR":
            row = node.start_point[0]
            if row == node.end_point[0] and _CUDA_QUALIFIERS.search(text_lines[row]):
                continue
            lines.update(_lines(node))
            continue
        stack.extend(node.children)
    return lines


@dataclass(frozen=True, slots=True)
class Token:
    start: int  # first line, 1-based
    end: int  # last line
    text: str
    comment: bool = False


class Untokenizable(Exception):
    """The text cannot be split into tokens (bad Python, say): treat every hunk as code."""


def _outside(node, spans: list[Span]) -> bool:
    first, last = node.start_point[0] + 1, node.end_point[0] + 1
    return not any(first <= hi and last >= lo for lo, hi in spans)


@lru_cache(maxsize=4)
def cpp_tree(data: bytes) -> Tree:
    """The tree-sitter-cpp tree of one side of a changed file: its tokens and its
    placement both read it (a big file takes ~30 ms to parse). Trees are only read."""
    return cpp_parser().parse(data)


def cpp_tokens(data: bytes, spans: list[Span] | None = None) -> list[Token]:
    """tree-sitter-cpp leaves (CUDA too), comments marked; with ``spans``, only those
    of the subtrees overlapping them (a big file's other ~100,000 leaves cost 0.1 s)."""
    tree = cpp_tree(data)
    tokens: list[Token] = []
    cursor = tree.walk()
    visited_children = False
    while True:
        node = cursor.node
        if not visited_children and spans is not None and _outside(node, spans):
            visited_children = True  # nothing of it is asked about
        elif not visited_children:
            if node.type == "comment" or node.child_count == 0:
                if node.end_byte > node.start_byte or node.is_missing:
                    text = data[node.start_byte : node.end_byte].decode("utf-8", "replace")
                    if node.is_missing:
                        text = f"<missing {node.type}>"
                    start, end = node.start_point, node.end_point
                    # A token that ends with its newline ends on the line before.
                    last = end[0] + 1 - (end[1] == 0 and end[0] > start[0])
                    if node.type == "preproc_arg":  # a macro body: comments and layout aside
                        text = " ".join(_strip_cpp_comments(text).split())
                    tokens.append(Token(start[0] + 1, last, text, node.type == "comment"))
                visited_children = True
                continue
            if cursor.goto_first_child():
                continue
            visited_children = True
        elif cursor.goto_next_sibling():
            visited_children = False
        elif not cursor.goto_parent():
            break
    return tokens


def _strip_cpp_comments(text: str) -> str:
    """``text`` without // and /* */ comments, leaving string and char literals alone."""
    out = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char in "\"'":
            j = i + 1
            while j < n and text[j] != char:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def python_tokens(data: bytes) -> list[Token]:
    """Python tokens, comments marked (save type comments); indentation kept as
    INDENT/DEDENT (it is syntax)."""
    tokens: list[Token] = []
    try:
        for tok in tokenize.tokenize(io.BytesIO(data).readline):
            if tok.type in _LAYOUT:
                continue
            text = token_types.tok_name[tok.type] if tok.type in _BY_TYPE else tok.string
            comment = tok.type == token_types.COMMENT and not _TYPE_COMMENT.match(text)
            tokens.append(Token(tok.start[0], tok.end[0], text, comment))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise Untokenizable(str(exc)) from None
    return tokens


def _span(start: int, count: int) -> tuple[int, int]:
    """Lines of one side of a hunk; an empty side is the gap just after ``start``."""
    return (start, start + count - 1) if count else (start + 0.5, start + 0.5)  # type: ignore[return-value]


def _overlapping(tokens: list[Token], lo: float, hi: float) -> list[Token]:
    return [tok for tok in tokens if tok.start <= hi and tok.end >= lo]


def _crosses(tok: Token, lo: float, hi: float) -> bool:
    """Whether a comment has one end inside [lo, hi] and the other outside."""
    inside_start = lo <= tok.start <= hi
    inside_end = lo <= tok.end <= hi
    return inside_start != inside_end


def hunk_changes_code(old: list[Token], new: list[Token], hunk: Hunk) -> bool:
    """Whether ``hunk`` changes anything but comments and layout."""
    sides = []
    for tokens, start, count in (
        (old, hunk.old_start, hunk.old_count),
        (new, hunk.new_start, hunk.new_count),
    ):
        lo, hi = _span(start, count)
        side = _overlapping(tokens, lo, hi)
        if any(tok.comment and _crosses(tok, lo, hi) for tok in side):
            return True
        sides.append([tok.text for tok in side if not tok.comment])
    return sides[0] != sides[1]


def hunk_spans(hunks: list[Hunk], side: str) -> list[Span]:
    """The lines each hunk spans on the ``old`` or ``new`` side."""
    if side == "old":
        return [_span(hunk.old_start, hunk.old_count) for hunk in hunks]
    return [_span(hunk.new_start, hunk.new_count) for hunk in hunks]


def tokens_for(language: str, data: bytes, spans: list[Span] | None = None) -> list[Token]:
    """The file's tokens; for C++ and CUDA only those overlapping ``spans``, if given
    (Python's tokenizer reads a file through)."""
    if language in ("cpp", "cuda"):
        return cpp_tokens(data, spans)
    if language == "python":
        return python_tokens(data)
    raise ValueError(f"no tokenizer for {language}")
