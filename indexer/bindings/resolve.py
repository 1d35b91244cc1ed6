"""Resolvers for refs that name operators.

Scheme ``op`` (contract 4): ``aten::add.Tensor`` names one overload; ``aten::add`` or a
plain ``add`` names every overload (of that namespace, or of any); ``attrs.exact``
restricts ``aten::matmul`` to the default overload; ``attrs.want`` lists the node kinds
accepted (``["op"]`` by default).

Scheme ``op_impl``: an op asking for the ``registration`` nodes other files made for it
with ``m.impl`` (same qualname).

The ref's ``key`` (dispatch key) is carried onto the edge. Several overloads of one op, or
several registrations of one op, are a fan-out (``fanout`` on the edges), not ambiguity;
one name in two namespaces is ambiguous.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from indexer.bindings.schema import split_op_name
from indexer.graph.vocabulary import NodeKind
from indexer.link.symbols import Ref, Resolution, SymbolTable

_OP = NodeKind.OP.value
_REGISTRATION = NodeKind.REGISTRATION.value
_CARRIED = ("key", "structured_delegate")


class OpNames:
    """Op-like nodes of a symbol table, by qualname, by (namespace, name) and by name."""

    def __init__(self, symbols: SymbolTable, kinds: Iterable[str]) -> None:
        self.symbols = symbols
        self.by_qualname: dict[str, list[int]] = defaultdict(list)
        self.by_ns_name: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.by_name: dict[str, list[int]] = defaultdict(list)
        wanted = set(kinds)
        for node_id, kind in symbols.kind.items():
            if kind not in wanted:
                continue
            qualname = symbols.qualname[node_id]
            namespace, name, _ = split_op_name(qualname)
            self.by_qualname[qualname].append(node_id)
            self.by_ns_name[(namespace or "", name)].append(node_id)
            self.by_name[name].append(node_id)

    def lookup(self, target: str, exact: bool, kinds: set[str]) -> list[int]:
        namespace, name, overload = split_op_name(target.strip())
        if namespace is None and target.startswith("torch.ops."):
            parts = target.split(".")
            namespace, name = parts[2], parts[3] if len(parts) > 3 else ""
            overload = parts[4] if len(parts) > 4 and parts[4] != "default" else ""
            exact = exact or len(parts) > 4
        if overload or exact:
            full = f"{name}.{overload}" if overload else name
            if namespace is not None:
                found = self.by_qualname.get(f"{namespace}::{full}", [])
            else:
                found = [
                    node
                    for node in self.by_name.get(name, [])
                    if self.symbols.qualname[node].endswith(f"::{full}")
                ]
        elif namespace is not None:
            found = self.by_ns_name.get((namespace, name), [])
        else:
            found = self.by_name.get(name, [])
        return [node for node in found if self.symbols.kind[node] in kinds]


def _carried(ref: Ref) -> dict[str, object] | None:
    attrs = {key: ref.attrs[key] for key in _CARRIED if key in ref.attrs}
    return attrs or None


def resolve(refs: list[Ref], symbols: SymbolTable) -> Iterator[Resolution]:
    """Scheme ``op``: refs naming an op (or, with ``want``, a registration or derivative)."""
    names = OpNames(
        symbols, {_OP, _REGISTRATION, NodeKind.DERIVATIVE.value, NodeKind.BINDING.value}
    )
    for ref in refs:
        kinds = set(ref.attrs.get("want") or [_OP])
        found = [
            node
            for node in names.lookup(ref.target, bool(ref.attrs.get("exact")), kinds)
            if node != ref.src_id
        ]
        attrs = _carried(ref)
        namespaces = {split_op_name(symbols.qualname[node])[0] for node in found}
        if len(found) > 1 and len(namespaces) == 1:
            # Every overload of one op, as the ref asked: a fan-out, not an ambiguity.
            attrs = {**(attrs or {}), "fanout": True}
        for node in found:
            yield Resolution(ref.id, node, attrs)


def resolve_registrations(refs: list[Ref], symbols: SymbolTable) -> Iterator[Resolution]:
    """Scheme ``op_impl``: an op -> the ``registration`` nodes of the same qualname."""
    names = OpNames(symbols, {_REGISTRATION})
    for ref in refs:
        for node in names.by_qualname.get(ref.target, []):
            keys = symbols.attrs(node).get("impl_keys") or []
            # One registration per file that registers kernels for the op: all of them.
            yield Resolution(ref.id, node, {"registration": True, "keys": keys, "fanout": True})
