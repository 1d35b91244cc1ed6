"""Whether a module-level class of a Python file defines a method, parsing only the class.

Receiver typing asks this of files that assign ``x = Name(...)`` where the file defines
``class Name``: is ``x.add(...)`` a call of ``Name.add``? Parsing whole library files
costs ~50 ms each, and a selection asks of dozens; the class's own lines (from its
``class`` line to the next line that starts a top-level statement) parse in a fraction
of that.

The answer is the whole file's (``tree``): a chunk that does not parse, or that says
yes (a ``class`` line at column 0 may sit in a string), is checked against the parsed
file. A chunk that parses and lacks the method settles the question: a top-level class
starts at column 0, and a body cut short by a column-0 line of a string or bracket does
not parse.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from functools import lru_cache

from indexer.python.pysource import FUNCTIONS, parse


def local_classes(tree: ast.Module, method: str) -> frozenset[str]:
    """Module-level classes of the file that define ``method``."""
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(item, FUNCTIONS) and item.name == method for item in node.body)
    )


@lru_cache(maxsize=4096)
def _class_line(name: str) -> re.Pattern[str]:
    # ``^class NAME`` without the anchor: a literal first is found by a fast scan; the
    # caller keeps the matches at column 0.
    return re.compile(rf"class\s+{re.escape(name)}\b")


def _starts_statement(text: str) -> bool:
    """Whether a line starts a top-level statement after a class body (not an indented
    line, a blank, a comment or a closing bracket)."""
    return bool(text) and not text[0].isspace() and not text.startswith(("#", ")", "]", "}"))


def class_defines(
    text: str,
    lines: list[str],
    name: str,
    method: str,
    tree: Callable[[], ast.Module | None],
) -> bool:
    """Whether the module-level class ``name`` of the file (``text``, its ``lines``;
    ``tree()`` parses the whole file) defines ``method``."""
    for match in _class_line(name).finditer(text):
        if match.start() and text[match.start() - 1] != "\n":
            continue  # not at column 0
        first = text.count("\n", 0, match.start())
        end = first + 1
        while end < len(lines) and not _starts_statement(lines[end]):
            end += 1
        chunk = parse("\n".join(lines[first:end]))
        if chunk is None or name in local_classes(chunk, method):
            whole = tree()
            return whole is not None and name in local_classes(whole, method)
    return False
