"""Code tokens of a file, without comments or layout: to tell a code change from a
comment-only or whitespace-only one.

A hunk changes code when the tokens overlapping its old lines differ from those
overlapping its new lines. A block comment that starts inside a hunk and ends outside
it (or the reverse) may comment code in or out, so such a hunk always counts as code.
"""

from __future__ import annotations

import io
import re
import token as token_types
import tokenize
from dataclasses import dataclass
from functools import lru_cache

from tree_sitter import Tree

from indexer.diff import Hunk
from indexer.extract.source import cpp_parser


@dataclass(frozen=True, slots=True)
class Token:
    start: int  # first line, 1-based
    end: int  # last line
    text: str
    comment: bool = False


class Untokenizable(Exception):
    """The text cannot be split into tokens (bad Python, say): treat every hunk as code."""


Span = tuple[float, float]  # lines of one side of a hunk (see ``_span``)


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


_LAYOUT = {token_types.NL, tokenize.ENCODING, token_types.ENDMARKER}
_BY_TYPE = {token_types.INDENT, token_types.DEDENT, token_types.NEWLINE}


# A type comment is read at run time: TorchScript compiles `def f(x):  # type: (int) -> int`
# by it (torch.jit.annotations.get_type_line), so it is code, not a comment.
_TYPE_COMMENT = re.compile(r"#\s*type:")


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
