"""The order trace lists what it finds in, and which of several candidates it keeps.

- ops a Python function names: those named like the function first, tensor plumbing
  (``arange``, ``reshape``) dropped when others are left;
- an ambiguous dispatch entry (``sort``: a Dimname overload in NamedTensor.cpp, the kernel
  in Sorting.cpp): the definitions whose parameters can take the op's arguments;
- dispatch entries: CPU and CUDA, composites, then the other backends, and registrations
  from test code last.
"""

from __future__ import annotations

from typing import Any

from indexer.query import below_kernel, op_chain
from indexer.query.index import Node


def by_relevance(ops: list[Node], names: list[str]) -> list[Node]:
    """Ops a Python function names, those named like it first (``embedding_bag`` for
    ``F.embedding_bag``); ops that only allocate or re-view a tensor dropped when others
    are left."""

    def rank(op: Node) -> int:
        if op.name.lstrip("_") in {name.lstrip("_") for name in names}:
            return 0
        return 2 if op.name in below_kernel.PLUMBING else 1

    ranked = sorted(ops, key=rank)
    kept = [op for op in ranked if rank(op) < 2]
    return kept or ranked


def fitting(op: Node, hops: list[Any]) -> list[Any]:
    """Of the definitions an ambiguous dispatch entry names (``sort``: a Dimname overload
    in NamedTensor.cpp, the kernel in Sorting.cpp), those whose parameters can take the
    op's arguments; all of them if none can."""
    by_site: dict[tuple[str, str], list[Any]] = {}
    for hop in hops:
        name = hop.node.qualname if isinstance(hop, op_chain.Hop) else hop.target
        by_site.setdefault((hop.evidence, name), []).append(hop)
    kept = []
    for group in by_site.values():
        nodes = [hop for hop in group if isinstance(hop, op_chain.Hop)]
        overloads = len(nodes) > 1 and not any(hop.attrs.get("role") for hop in nodes)
        fit = [hop for hop in nodes if fits(op, hop.node)] if overloads else nodes
        kept.extend(fit if fit else nodes)
        kept.extend(hop for hop in group if not isinstance(hop, op_chain.Hop))
    return kept


def fits(op: Node, function: Node) -> bool:
    arguments = op.attrs.get("arguments")
    arity = function.attrs.get("arity")
    if not arguments or not arity:
        return True
    if not arity[0] <= len(arguments) <= arity[1]:
        return False
    named = any("Dimname" in str(argument.get("type", "")) for argument in arguments)
    return named == ("Dimname" in str(function.attrs.get("signature", "")))


USUAL_KEYS = ("CPU", "CUDA", "CompositeImplicitAutograd", "CompositeExplicitAutograd")


def key_rank(entry: tuple[Any, list[str]]) -> tuple[int, int]:
    """Dispatch entries in the order a reader looks for them: CPU and CUDA, composites,
    then other backends, and registrations from test code last."""
    hop, keys = entry
    usual = min((USUAL_KEYS.index(key) for key in keys if key in USUAL_KEYS), default=9)
    return (1 if "/test/" in hop.path else 0, usual)
