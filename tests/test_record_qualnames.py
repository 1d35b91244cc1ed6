"""Qualified names read from source (what the recorder names functions by on Python 3.10,
whose code objects have no ``co_qualname``), checked against CPython's own compiler.

On 3.10 the reference is the interpreter's disassembly of the fixture: the name the
compiler hands MAKE_FUNCTION with each code object and, for a class body, the
``__qualname__`` it stores; the module reads the same bytecode by searching it, and must
agree for every def, class, lambda and comprehension. On 3.11+ the module reads
``co_qualname`` and so can only be checked on what it adds: a line that holds two code
objects of one name, and source that does not compile.
"""

from __future__ import annotations

import dis
import sys
import textwrap
from itertools import pairwise
from types import CodeType

import pytest

from indexer.record.qualnames import qualnames_by_line

SOURCE = textwrap.dedent(
    """
    import functools


    def deco(*args):
        return lambda function: function


    class Outer:
        @deco(lambda: 0)
        @deco
        def method(self, default=lambda: 1):
            def inner():
                return [
                    x for x in (lambda: [1])()
                    if (lambda: x)()
                ]
            return inner

        class Nested:
            def deep(self):
                return {key: (lambda: key) for key in range(2)}

        async def coroutine(self):
            async def inner_coroutine():
                pass
            return {item for item in (lambda: [1])()}


    def declares_global():
        global made_global
        def made_global():
            pass
        class Local(Outer, metaclass=type):
            def method(self):
                pass
        return (y for y in
                range(3))


    @deco
    class Decorated:
        def __init__(self):
            self.made = lambda: [z for z in (y for y in range(2))]
    """
)
# more than 256 constants, the last a nested function: its arguments take two bytes
_MANY = ", ".join(f"'c{i}'" for i in range(300))
SOURCE += f"def many_constants():\n    values = [{_MANY}]\n    def late():\n        pass\n"


def _names_given_by_the_compiler_310(code: CodeType) -> dict[CodeType, str]:
    instructions = list(dis.get_instructions(code))
    names: dict[CodeType, str] = {}
    for this, following in pairwise(instructions):
        if isinstance(this.argval, CodeType) and isinstance(following.argval, str):
            names[this.argval] = following.argval
    for child in [c for c in code.co_consts if isinstance(c, CodeType)]:
        body = list(dis.get_instructions(child))
        for this, following in pairwise(body):  # a class body stores its __qualname__
            if following.opname == "STORE_NAME" and following.argval == "__qualname__":
                names[child] = this.argval
    return names


def _compiler_and_ours(code: CodeType, ours: dict) -> list[tuple[str, str | None]]:
    given = _names_given_by_the_compiler_310(code) if sys.version_info < (3, 11) else {}
    pairs = []
    for child in [c for c in code.co_consts if isinstance(c, CodeType)]:
        expected = getattr(child, "co_qualname", None) or given[child]
        pairs.append((expected, ours.get((child.co_firstlineno, child.co_name))))
        pairs.extend(_compiler_and_ours(child, ours))
    return pairs


@pytest.mark.skipif(sys.version_info >= (3, 11), reason="3.11+ reads co_qualname, not this")
def test_every_code_object_is_named_as_the_compiler_names_it() -> None:
    pairs = _compiler_and_ours(compile(SOURCE, "fixture.py", "exec"), qualnames_by_line(SOURCE))
    assert [pair for pair in pairs if pair[0] != pair[1]] == []
    expected = {pair[0] for pair in pairs}
    assert {
        "Outer.method.<locals>.inner.<locals>.<listcomp>.<lambda>",  # in the comprehension
        "Outer.method.<locals>.inner.<locals>.<lambda>",  # its first iterable: outside it
        "Outer.Nested.deep",
        "Outer.coroutine.<locals>.inner_coroutine",
        "made_global",  # declared global where it is defined
        "declares_global.<locals>.Local.method",
        "Decorated.__init__.<locals>.<lambda>.<locals>.<genexpr>",
        "many_constants.<locals>.late",  # past 256 constants: arguments take two bytes
    } <= expected
    assert len(pairs) == 30  # every def, class, lambda and comprehension above


def test_two_code_objects_of_one_line_and_name_are_not_guessed() -> None:
    source = "def f(z):\n    return lambda: (lambda: z)\n"
    names = qualnames_by_line(source)
    assert names[(1, "f")] == "f"
    assert names[(2, "<lambda>")] is None  # f.<locals>.<lambda>, or the one inside it


def test_source_that_does_not_parse_names_nothing() -> None:
    assert qualnames_by_line("def broken(:\n") == {}
