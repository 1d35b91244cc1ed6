"""Receiver typing parses a class's own lines instead of the whole file; where those
lines mislead (a column-0 ``class`` line in a string) the whole file decides. These
answers must equal the whole-file ones."""

from __future__ import annotations

import ast
import textwrap

from indexer.python.class_source import class_defines, local_classes
from indexer.python.receivers import _assigned_at_module_level, _bound_otherwise

SOURCE = textwrap.dedent(
    '''\
    """Docs with an example at column 0:

    class Trie:
        def add(self, x): ...
    """

    import collections


    class Trie:
        def insert(self, word):
            text = """
    def add(self):
    """
            return text


    class Bag:
        """A bag."""

        def add(self, item):
            self.items.append(item)


    def outer(flag):
        note = """
    def inner():
    """

        def inner():
            return flag

        return inner


    @decorate
    def helper(x):
        return lambda y: x + y


    TABLE = {
        "a": helper,
        "b": outer,
    }
    '''
)


def _tree() -> ast.Module:
    return ast.parse(SOURCE)


def test_a_class_line_in_a_string_is_not_the_class() -> None:
    lines = SOURCE.splitlines()
    text = "\n".join(lines)
    tree = _tree()
    for name in ("Trie", "Bag", "Missing"):
        for method in ("add", "insert", "items"):
            expected = name in local_classes(tree, method)
            assert class_defines(text, lines, name, method, _tree) == expected, (name, method)
    assert not class_defines(text, lines, "Trie", "add", _tree)
    assert class_defines(text, lines, "Bag", "add", _tree)


def test_anchored_searches_match_at_line_and_word_starts_only() -> None:
    text = "xTABLE = 1\n  TABLE = 2\nfor x in items: pass\nimport collections as c\n"
    assert not _assigned_at_module_level("TABLE", text)
    assert _assigned_at_module_level("TABLE", text + "TABLE = 3\n")
    assert _bound_otherwise("x", text)  # for x in
    assert _bound_otherwise("c", text)  # as c
    assert not _bound_otherwise("ollections", text)
    assert not _bound_otherwise("tems", "for y in items: pass\n")
