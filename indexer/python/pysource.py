"""Parsing Python source read by the walk: quietly (a library's ``"\\("`` in a non-raw
string warns on every parse), and never raising for text that is not Python."""

from __future__ import annotations

import ast
import warnings


def parse(source: str | bytes) -> ast.Module | None:
    """The module parsed from ``source``, or None when it does not parse."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError):
            return None


BLOCKS: tuple[type[ast.stmt], ...] = (
    ast.If,
    ast.Try,
    ast.With,
    ast.For,
    ast.While,
    ast.AsyncWith,
    ast.AsyncFor,
    *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),
)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
DEFINITIONS = (*FUNCTIONS, ast.ClassDef)


def statements(body: list[ast.stmt], *, blocks: bool, definitions: bool) -> list[ast.stmt]:
    """The statements of a body and of the blocks in it (if, try, with, for, while).
    ``blocks``: the block statements themselves are listed too (a ``for`` binds its target);
    ``definitions``: functions and classes are listed (their bodies are never entered)."""
    found: list[ast.stmt] = []
    stack = list(body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, DEFINITIONS):
            if definitions:
                found.append(stmt)
            continue
        if not isinstance(stmt, BLOCKS):
            found.append(stmt)
            continue
        if blocks:
            found.append(stmt)
        for field in ("body", "orelse", "finalbody"):
            stack.extend(getattr(stmt, field, []) or [])
        for handler in getattr(stmt, "handlers", []) or []:
            stack.extend(handler.body)
    return found


def targets(stmt: ast.stmt) -> list[ast.expr]:
    """What a statement binds: assignment targets, a ``for`` target, ``with ... as`` names."""
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return [stmt.target]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in stmt.items if item.optional_vars is not None]
    return []
