"""Uses of overloaded operators: ``a + b``, ``a += b``, ``a[i]``, ``-a``, ``*it``, ``++it``,
``a->m`` and explicit ``operator+(a, b)`` / ``a.operator[](i)`` become ``calls`` refs to
``operator<token>``.

An operator token alone says nothing about which function runs: ``i + 1`` on ints runs no
function at all. So a use becomes a ref only when an operand is a local variable or
parameter declared with a class type (as written, with its template arguments; not a pointer: ``p + 1``, ``p->m`` are built in), or
``*this``; the ref carries the declared types (``operand_types``, left and right) and the
resolver (indexer/cpp/operator_lookup.py) keeps only operators the indexed tree defines
for such a class. Plain ``=`` is left out (a copy or move, almost always the compiler's).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import TYPE_CHECKING

from indexer.graph.facts import RefFact
from indexer.graph.vocabulary import EdgeKind

if TYPE_CHECKING:
    from tree_sitter import Node

    from indexer.cpp.calls import Caller, CallSites

# Appended to the extractor's query; each capture is one operator use to look at.
QUERY = """
(binary_expression left: [(identifier) (pointer_expression argument: (this))]) @opbinary
(binary_expression right: (identifier)) @opbinary
(assignment_expression left: [(identifier) (pointer_expression argument: (this))]) @opassign
(subscript_expression argument: (identifier)) @opsubscript
(unary_expression argument: (identifier)) @opunary
(pointer_expression argument: (identifier)) @opunary
(update_expression argument: (identifier)) @opupdate
(field_expression argument: (identifier) operator: "->") @oparrow
"""
CAPTURES = ("opbinary", "opassign", "opsubscript", "opunary", "opupdate", "oparrow")

# Where an operand sits decides the candidates: ``left`` and ``unary`` operands can own a
# member operator, a ``right`` one only a free operator's parameter.
LEFT = "left"
UNARY = "unary"
POSTFIX = "postfix"  # it++: operator++(int)
_CPP = "cpp"
_CALLS = EdgeKind.CALLS.value
_EXPLICIT = re.compile(
    rb"(?P<member>(?:\.|->)\s*)?\boperator\s*"
    rb"(?P<token>\(\s*\)|\[\s*\]|->\*?|<<=?|>>=?|[-+*/%^&|~!=<>]=?|&&|\|\||\+\+|--)\s*\("
)
# What may come before an explicit free ``operator+(`` used as an expression (a
# definition has a return type before it).
_EXPRESSION_BEFORE = frozenset(b"(,=!&|?:{;+-*/<>[")


class OperatorUses:
    """Turns the operator captures of one buffer into refs, typing operands with the
    declarations ``sites`` collected."""

    def __init__(self, sites: CallSites) -> None:
        self.sites = sites
        self.data = sites.data
        self.seen: set[int] = set()

    def add(self, captures: dict[str, list[Node]]) -> None:
        nodes = [(node, name) for name in CAPTURES for node in captures.get(name, ())]
        nodes.sort(key=lambda pair: (pair[0].start_byte, -pair[0].end_byte, pair[1]))
        for node, name in nodes:
            if node.start_byte in self.seen and name == "opbinary":
                continue  # both operands are identifiers: two captures, one use
            self.seen.add(node.start_byte)
            self._add(node, name)
        self._add_explicit()

    def _add(self, node: Node, capture: str) -> None:
        sites = self.sites
        caller = sites.caller_at(node.start_byte)
        if caller is None:
            return
        if capture in ("opbinary", "opassign"):
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            token = node.child_by_field_name("operator")
            if left is None or right is None or token is None:
                return
            spelled = token.type
            if spelled == "=":
                return
            types = [self._operand(left, caller), self._operand(right, caller)]
            position, nargs = LEFT, 1
        else:
            argument = node.child_by_field_name("argument")
            if argument is None:
                return
            types = [self._operand(argument, caller), None]
            if capture == "opsubscript":
                spelled, position, nargs = "[]", LEFT, 1
            elif capture == "oparrow":
                spelled, position, nargs = "->", UNARY, 0
            else:
                first = node.child(0)
                if first is None:
                    return
                spelled = first.type
                position, nargs = UNARY, 0
                if capture == "opupdate" and first.kind_id == argument.kind_id:
                    last = node.child(node.child_count - 1)
                    spelled = last.type if last is not None else ""
                    position, nargs = POSTFIX, 1
                if spelled == "&":
                    return  # address-of: overloading it is rare and never in PyTorch
        if types == [None, None]:
            return
        attrs = {
            **caller.plain,
            "operand_types": types,
            "operand": position,
            "nargs": nargs,
        }
        line = sites.line(node)
        sites.facts.refs.append(
            RefFact(caller.local, _CALLS, _CPP, f"operator{spelled}", line, None, attrs)
        )

    def _operand(self, node: Node, caller: Caller) -> str | None:
        """The class an operand was declared with, if it is a non-pointer variable or
        ``*this``."""
        if node.type == "pointer_expression":
            inner = node.child_by_field_name("argument")
            if inner is not None and inner.type == "this":
                return caller.this_class
            return None
        if node.type != "identifier":
            return None
        name = self.data[node.start_byte : node.end_byte]
        sites = self.sites
        if name not in sites.variables:
            return None
        declared = _declaration(sites.variables[name], node.start_byte, caller.start)
        if declared is None or self._pointer(declared):
            return None
        if sites.variable_type(name, node.start_byte, caller) is None:
            return None
        # As written, template arguments kept: Vectorized<float> picks that specialization.
        written = sites.variable_types.get(declared)
        return "".join(written.split()) if written else None

    def _pointer(self, declared_at: int) -> bool:
        """Whether the declarator before the name is ``*`` (``Vec* p``, ``Vec *p``)."""
        data = self.data
        at = declared_at
        while at > 0 and data[at - 1] in b" \t\r\n":
            at -= 1
        return at > 0 and data[at - 1] == 42  # '*'

    def _add_explicit(self) -> None:
        """``operator+(a, b)`` and ``a.operator[](i)`` written out: the parser reads the
        member form as an error, so they are found in the text of function bodies."""
        sites = self.sites
        data = self.data
        if b"operator" not in data:
            return
        for match in _EXPLICIT.finditer(data):
            start = match.start()
            caller = sites.caller_at(start)
            if caller is None:
                continue
            token = b"".join(match.group("token").split()).decode()
            target = f"operator{token}"
            row = bisect_right(sites.newlines, start)
            line = sites.line_map[row] if sites.line_map is not None else row + 1
            if match.group("member") is not None:
                receiver = _identifier_before(data, start)
                if receiver is None:
                    continue
                name = receiver.encode()
                if receiver == "this":
                    owner = caller.this_class
                elif name in sites.variables:
                    owner = sites.variable_type(name, start, caller, data[start] == 45)  # '-'
                else:
                    owner = None
                attrs = caller.receiver(owner) if owner is not None else caller.member()
            else:
                before = start
                while before > 0 and data[before - 1] in b" \t\r\n":
                    before -= 1
                if before == 0 or data[before - 1] not in _EXPRESSION_BEFORE:
                    if data[max(0, before - 6) : before] != b"return":
                        continue  # a declaration or definition: `bool operator==(`
                elif data[before - 1] in b"*&" and _after_type(data, before - 1):
                    continue  # `Vec& operator+=(`, `T* operator->(`: a definition
                if data[before - 2 : before] == b"::":
                    continue  # qualified: the parser reads it as a call already
                attrs = caller.plain
            sites.facts.refs.append(RefFact(caller.local, _CALLS, _CPP, target, line, None, attrs))


def _declaration(declared: list[int], at: int, body_start: int) -> int | None:
    """The last declaration of a name in the body before ``at``."""
    found = None
    for start in declared:
        if body_start <= start < at:
            found = start
        elif start >= at:
            break
    return found


def _after_type(data: bytes, at: int) -> bool:
    """Whether the ``*`` or ``&`` at ``at`` follows a type name (``Vec&``, ``T&&``, ``A<B>*``)."""
    while at > 0 and data[at - 1] in b" \t\r\n&*":
        at -= 1
    return at > 0 and (chr(data[at - 1]).isalnum() or data[at - 1] in b"_>")


def _identifier_before(data: bytes, end: int) -> str | None:
    at = end
    while at > 0 and data[at - 1] in b" \t\r\n":
        at -= 1
    start = at
    while start > 0 and (chr(data[start - 1]).isalnum() or data[start - 1] == 95):
        start -= 1
    word = data[start:at].decode("ascii", "replace")
    return word if word.isidentifier() else None
