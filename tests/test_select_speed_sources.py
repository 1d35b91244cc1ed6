"""The walk's source judgments parse a class's, a function's or a top-level block's own
lines instead of the whole file; where those lines mislead (a column-0 ``class`` line in
a string, a body cut short by a column-0 string line) the whole file decides. These
answers must equal the whole-file ones."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from indexer.select.class_source import class_defines, local_classes
from indexer.select.module_scope import ModuleStatements
from indexer.select.receivers import _assigned_at_module_level, _bound_otherwise

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


def _written(tmp_path: Path) -> ModuleStatements:
    (tmp_path / "mod.py").write_text(SOURCE, encoding="utf-8")
    return ModuleStatements(tmp_path)


def _line(text: str, occurrence: int = 1) -> int:
    lines = SOURCE.splitlines()
    found = [number for number, line in enumerate(lines, 1) if text in line]
    return found[occurrence - 1]


def test_nested_definitions_are_found_through_a_body_cut_by_a_string(tmp_path: Path) -> None:
    """``outer``'s body holds a string with a column-0 line: its own lines do not parse
    alone, so the whole file says where ``inner`` is."""
    statements = _written(tmp_path)
    outer = _line("def outer(flag):")
    inner_body = _line("return flag")
    assert statements.deferred("mod.py", outer, inner_body)
    assert not statements.deferred("mod.py", outer, _line("return inner"))
    decorated = _line("@decorate")
    lambda_line = _line("return lambda y")
    assert statements.deferred("mod.py", decorated, lambda_line)
    assert statements.deferred("mod.py", _line("def helper(x):"), lambda_line)


def test_each_line_of_a_module_level_table_is_its_statement(tmp_path: Path) -> None:
    statements = _written(tmp_path)
    first = statements.use("mod.py", _line('"a": helper'), "helper", compiled=False)
    second = statements.use("mod.py", _line('"b": outer'), "outer", compiled=False)
    assert first.names == second.names == frozenset({"TABLE"})
    assert not first.run_at_import


def test_anchored_searches_match_at_line_and_word_starts_only() -> None:
    text = "xTABLE = 1\n  TABLE = 2\nfor x in items: pass\nimport collections as c\n"
    assert not _assigned_at_module_level("TABLE", text)
    assert _assigned_at_module_level("TABLE", text + "TABLE = 3\n")
    assert _bound_otherwise("x", text)  # for x in
    assert _bound_otherwise("c", text)  # as c
    assert not _bound_otherwise("ollections", text)
    assert not _bound_otherwise("tems", "for y in items: pass\n")
