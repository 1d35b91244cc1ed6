"""Qualified names of a source file's code objects, for Pythons whose code objects lack
``co_qualname`` (3.10).

The recorder names a function ``path:qualname`` (``test_x.py:TestFoo.test_bar``), the name
the index gives it. On 3.11+ the code object carries it; on 3.10 only ``co_name``
(``test_bar``) is there, which would name every method and nested function by its bare
name and join with nothing. So on 3.10 the file is compiled again, once, and each code
object named as the compiler named it: 3.10's compiler puts a function's qualified name
in the bytecode that makes it (``LOAD_CONST <code>; LOAD_CONST 'Outer.method';
MAKE_FUNCTION``), and a class body stores its own (``__qualname__ = 'Outer.Nested'``).
Compiling is the cheaper way to that: ``compile`` stays in C, where ``ast.parse`` builds a
Python object per node (on test_stateless.py's 345 files: 0.7 s against 2.8 s).

A code object is found by what it has on 3.10: its first line (a decorated definition
starts at its first decorator) and its name. Where one line holds two code objects of the
same name with different qualified names (``[[y for y in x] for x in z]``), the key is
ambiguous and the caller falls back to the bare name rather than guess.
"""

from __future__ import annotations

import dis
import warnings
from itertools import pairwise
from types import CodeType

_LOAD_CONST = dis.opmap["LOAD_CONST"]
_STORE_NAME = dis.opmap["STORE_NAME"]
_CLASS_BODY_NAMES = ("__name__", "__module__", "__qualname__")


def _class_body_qualname(code: CodeType) -> str | None:
    """A class body begins ``__module__ = __name__; __qualname__ = '<its name>'``."""
    body = code.co_code
    if code.co_names[:3] != _CLASS_BODY_NAMES or len(body) < 8:
        return None
    if body[4] != _LOAD_CONST or body[6] != _STORE_NAME or body[7] != 2:
        return None
    qualname = code.co_consts[body[5]]
    return qualname if isinstance(qualname, str) else None


def _names_given_to_children(code: CodeType) -> dict[int, str]:
    """id(child code) -> the name ``code`` hands MAKE_FUNCTION with it: the constant
    loaded right after the child. Searched for in the bytecode rather than disassembled:
    only the loads of code constants are looked at."""
    children = [(i, c) for i, c in enumerate(code.co_consts) if isinstance(c, CodeType)]
    if not children:
        return {}
    body = code.co_code
    if len(code.co_consts) > 256:  # arguments past one byte: disassemble instead
        pairs = pairwise(dis.get_instructions(code))
        return {
            id(this.argval): following.argval
            for this, following in pairs
            if isinstance(this.argval, CodeType) and isinstance(following.argval, str)
        }
    names: dict[int, str] = {}
    for index, child in children:
        load = bytes((_LOAD_CONST, index))
        at = body.find(load)
        while at != -1 and at % 2:  # an argument byte, not an instruction
            at = body.find(load, at + 1)
        if at == -1 or at + 3 >= len(body) or body[at + 2] != _LOAD_CONST:
            continue
        given = code.co_consts[body[at + 3]]
        if isinstance(given, str):
            names[id(child)] = given
    return names


def qualnames_by_line(source: str) -> dict[tuple[int, str], str | None]:
    """(first line, name) of each code object the source compiles to -> its qualified
    name, None where two share the key; {} when the source does not compile."""
    try:
        with warnings.catch_warnings():  # invalid escapes warn; the run may make that fatal
            warnings.simplefilter("ignore")
            module = compile(source, "<recorded>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return {}
    names: dict[tuple[int, str], str | None] = {}
    parents = [module]
    while parents:
        code = parents.pop()
        given = _names_given_to_children(code)
        for child in code.co_consts:
            if not isinstance(child, CodeType):
                continue
            qualname = (
                getattr(child, "co_qualname", None)
                or _class_body_qualname(child)
                or given.get(id(child))
            )
            if qualname is not None:
                key = (child.co_firstlineno, child.co_name)
                names[key] = qualname if names.get(key, qualname) == qualname else None
            parents.append(child)
    return names
