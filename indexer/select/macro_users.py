"""A macro changed in a header: the code that uses it, in every file including the header.

A header changed outside its functions affects everything in the files including it,
since a type or a declaration reaches code that never names it (a struct's layout, an
``auto``). A macro does not: it is text, and changes only the code that spells its name,
or spells a macro whose body does (closed over the header's and the includers' own
``#define``s). So when every changed line outside functions is part of a ``#define``,
the entities are the functions whose bodies mention one of those names, in the header and
in every file including it, and everything in a file that mentions one outside its
functions (a namespace-scope use writes definitions; ``#if NAME`` picks code).

Token pasting can build a name no file spells (``CASE_##T``): a change to a macro whose
name a ``##`` of the scanned files could build falls back to everything in the includers.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from indexer.query.index import Index
from indexer.select.model import Entity
from indexer.select.placed import FUNCTION_KINDS, MEMBERS_SHOWN, innermost

_DEFINE = re.compile(rb"^\s*#\s*define\s+([A-Za-z_]\w*)")
_PASTE = re.compile(rb"(\w*)\s*##\s*(\w*)")
_WORD = re.compile(rb"[A-Za-z_]\w*")


def define_lines(data: bytes) -> dict[int, str]:
    """Line -> the name of the ``#define`` it belongs to (continuation lines included)."""
    found: dict[int, str] = {}
    current: str | None = None
    for number, text in enumerate(data.split(b"\n"), 1):
        if current is None:
            match = _DEFINE.match(text)
            if match:
                current = match.group(1).decode("ascii")
        if current is not None:
            found[number] = current
            if not text.rstrip().endswith(b"\\"):
                current = None
    return found


def changed_macros(
    sides: list[tuple[bytes | None, set[int]]],
) -> set[str] | None:
    """The macros whose ``#define`` holds every changed line of each (text, lines) side;
    None when some changed line is not in one."""
    names: set[str] = set()
    for data, lines in sides:
        if not lines:
            continue
        if data is None:
            return None
        table = define_lines(data)
        for line in lines:
            if line not in table:
                return None
            names.add(table[line])
    return names or None


def _bodies(data: bytes) -> dict[str, bytes]:
    """Each ``#define``'s name -> its text (all its lines)."""
    lines = data.split(b"\n")
    bodies: dict[str, list[bytes]] = {}
    for number, name in define_lines(data).items():
        bodies.setdefault(name, []).append(lines[number - 1])
    return {name: b"\n".join(text) for name, text in bodies.items()}


def macro_users(
    index: Index,
    read: Callable[[str], bytes | None],
    header: str,
    includers: set[str],
    names: set[str],
    evidence: str,
) -> list[Entity] | None:
    """The entities a change to the macros ``names`` of ``header`` affects (see the module
    docstring); None when token pasting could build one of the names."""
    files = {path: read(path) for path in sorted({header, *includers})}
    bodies: dict[str, bytes] = {}
    for data in files.values():
        if data is None:
            continue
        for name, body in _bodies(data).items():
            bodies[name] = bodies.get(name, b"") + b"\n" + body
    for body in bodies.values():
        for left, right in _PASTE.findall(body):
            left_text, right_text = left.decode("ascii"), right.decode("ascii")
            if any(
                (left_text and name.startswith(left_text))
                or (right_text and name.endswith(right_text))
                for name in names
            ):
                return None
    closed = set(names)
    grew = True
    while grew:  # macros whose bodies spell a changed name are changed too
        grew = False
        for name, body in bodies.items():
            if name not in closed and closed & {w.decode("ascii") for w in _WORD.findall(body)}:
                closed.add(name)
                grew = True
    spelled = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in closed) + rb")\b")
    users: dict[int, str] = {}
    whole: list[str] = []
    for path, data in files.items():
        if data is None:
            whole.append(path)  # unreadable: it may use them anywhere
            continue
        if spelled.search(data) is None:
            continue
        nodes = index.nodes_in_file(path)
        functions = [node for node in nodes if node.kind in FUNCTION_KINDS]
        defines = define_lines(data)
        outside = False
        for number, text in enumerate(data.split(b"\n"), 1):
            if number in defines or spelled.search(text) is None:
                continue
            function = innermost(functions, number)
            if function is None:
                outside = True
                break
            users[function.id] = function.qualname
        if outside:
            whole.append(path)
    entities = []
    shown = ", ".join(sorted(names)[:5])
    if users:
        entities.append(
            Entity(
                f"users of {shown}",
                "group",
                evidence,
                f"macro {shown} changed in a header: the functions spelling it (or a macro "
                "using it) in the files including the header",
                list(users),
                members=sorted(users.values())[:MEMBERS_SHOWN],
            )
        )
    if whole:
        ids = [
            node.id for path in whole for node in index.nodes_in_file(path) if node.kind != "file"
        ]
        entities.append(
            Entity(
                f"everything in {len(whole)} files using {shown} outside functions",
                "group",
                evidence,
                f"macro {shown} changed in a header and used outside functions there",
                ids,
                members=sorted(whole)[:MEMBERS_SHOWN],
            )
        )
    return entities
