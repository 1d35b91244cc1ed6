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
