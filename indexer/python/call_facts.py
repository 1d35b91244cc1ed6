"""Whether the line of a reference runs what it names: ``torch.atan2(a, b)`` does,
``torch.atan2`` in a table or a key does not.

Judged once per reference at extraction and kept on the ref (``named_only``), so that the
impact walk reads it instead of the file (docs/selection.md, "Facts judged at
extraction"). It counts as running what it names when

- ``name(`` or ``name (`` is on the line, or the name at the line's end with its
  arguments on the next (``torch.atan2\\n(a, b)``);
- the line keeps it whole to call later (``self.op = torch.ops._C.silu_and_mul``,
  ``return torch.ops.x``);
- a name looked up at run time (``getattr(torch.ops.aten, name)``) is looked up to be
  called: at once, or kept in a variable the enclosing definition calls, or returned;
  not when only passed along (``register_meta(getattr(aten, name))``).

A ``.method(...)`` call whose every receiver on the line its file shows is no tensor
(``memo.add(m)`` on a set) does not run the op ``method`` (``indexer.python.receivers``).
"""

from __future__ import annotations

import re
from functools import lru_cache

from indexer.python.receivers import Receivers
from indexer.python.reflection import is_pattern


@lru_cache(maxsize=1024)
def call_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}\s*\(")


@lru_cache(maxsize=1024)
def _line_end_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}\s*$")


# getattr(owner, name)(...), on one line; or its value kept whole to be called later.
_CALLED_LOOKUP = re.compile(r"\bgetattr\s*\((?:[^()]|\([^()]*\))*\)\s*\(")
_ASSIGNED = re.compile(
    r"(?:^\s*|:=|\bif\s|\bwhile\s|\()?(?<![.\w\]])([A-Za-z_]\w*)\s*(?::[^=]*)?:?=\s*getattr\s*\("
)
_KEPT_LOOKUP = re.compile(r"(?:(?<![=!<>])=|\breturn|\blambda[^:]*:)\s*getattr\s*\(")


@lru_cache(maxsize=1024)
def _looked_up_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\bgetattr\s*\(.*[\"']{re.escape(name)}[\"']")


@lru_cache(maxsize=1024)
def _stored_pattern(name: str) -> re.Pattern[str]:
    """``self.op = torch.ops._C.silu_and_mul`` or ``return torch.ops._C.x``: the op kept
    (or handed back) whole, to be called later through the name it is given."""
    return re.compile(rf"(?:(?<![=!<>])=|\breturn)\s*(?:[\w.]+\.)?{re.escape(name)}\s*(?:#.*)?$")


def runs_named(
    lines: list[str],
    receivers: Receivers,
    path: str,
    line: int,
    target: str,
    where: tuple[int, int],
) -> bool:
    """Whether ``line`` (1-based) runs ``target`` as written; ``where``: the lines of the
    definition holding the reference (a looked-up value kept in a variable counts when
    they call it). True when the line is out of range: unknown counts as a call."""
    if not target:
        return True
    name = target.rsplit(".", 1)[-1]
    if not 0 < line <= len(lines):
        return True
    if is_pattern(name):  # looked up at run time: getattr(torch.ops.ns, name)
        if where[0] <= line <= where[1]:
            return _looks_up_to_call(lines[line - 1], lines[where[0] - 1 : where[1]])
        return _looks_up_to_call(lines[line - 1], lines)
    if target.startswith(".") and receivers.not_a_tensor_at(path, line, name):
        return False  # memo.add(m) on a set: not the op
    return _calls_at(lines, line, name)


def _calls_at(lines: list[str], line: int, name: str) -> bool:
    text = lines[line - 1]
    if call_pattern(name).search(text) or _stored_pattern(name).search(text):
        return True
    if "getattr" in text and _looked_up_pattern(name).search(text):
        return _looks_up_to_call(text, lines)  # getattr(torch.ops.ns, "x")(...)
    # name at the end of the line, its arguments on the next: torch.atan2\n(a, b)
    return bool(
        line < len(lines)
        and lines[line].lstrip().startswith("(")
        and _line_end_pattern(name).search(text)
    )


def _looks_up_to_call(text: str, lines: list[str]) -> bool:
    """Whether the ``getattr`` on ``text`` is made to call what it finds: called at once
    (``getattr(torch.ops.aten, name)(x)``) or kept whole (``return getattr(...)``,
    ``fn = getattr(...)`` where ``lines`` call ``fn``), not only passed along."""
    if _CALLED_LOOKUP.search(text):
        return True
    kept = _KEPT_LOOKUP.search(text)
    if kept is None:
        return False
    variable = _ASSIGNED.search(text)
    if variable is None:
        return True  # return getattr(...), lambda: getattr(...), self.x = getattr(...)
    called = call_pattern(variable.group(1))
    return any(called.search(other) for other in lines)
