"""From a name as a user writes it to the ops, bindings or C++ functions it means.

Accepted spellings: ``torch.matmul``, ``matmul``, ``aten::matmul``, ``aten::add.Tensor``,
``aten::add`` (every overload), ``at::native::matmul`` (the C++ function, and the ops that
dispatch to it), ``Tensor.add_``, ``torch.ops.ns.op[.overload]``, ``torch._C._nn.linear``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from indexer.query.index import Index, Node
from indexer.query.py_lookup import assignment, reexported

OP = "op"
OP_LIKE = ("op", "registration")
CPP_KINDS = ("cpp_function", "cuda_kernel", "dispatch_stub")
PYTHON_KINDS = ("python_function", "python_class", "python_module")


@dataclass
class Lookup:
    ops: list[Node] = field(default_factory=list)
    bindings: list[Node] = field(default_factory=list)
    functions: list[Node] = field(default_factory=list)  # C++ starts that no op was found for
    python: list[Node] = field(default_factory=list)  # Python definitions named
    via: dict[int, str] = field(default_factory=dict)  # op id -> evidence of the reference
    how: str = ""  # how the name was matched, for the answer's title


def by_python_name(index: Index, name: str, suffix: bool = False) -> list[Node]:
    """Op and binding nodes one of whose ``python_names`` is ``name`` (or ends with ``.name``)."""
    names = python_names(index)
    if suffix:
        ids = {
            node_id
            for full, found in names.get("." + name.rsplit(".", 1)[-1], {}).items()
            if full.endswith(f".{name}")
            for node_id in found
        }
    else:
        ids = set(names.get("." + name.rsplit(".", 1)[-1], {}).get(name, ()))
    return index.nodes(sorted(ids))


def python_names(index: Index) -> dict[str, dict[str, list[int]]]:
    """'.last' -> python name -> ids of the op and binding nodes it names (read once)."""
    return index.shared("python-names", lambda: _python_names(index))


def _python_names(index: Index) -> dict[str, dict[str, list[int]]]:
    table: dict[str, dict[str, list[int]]] = {}
    for node_id, raw in index.conn.execute(
        "SELECT id, json_extract(attrs, '$.python_names') FROM nodes"
        " WHERE kind IN ('op', 'binding') AND attrs LIKE '%python_names%'"
    ):
        for name in json.loads(raw) if raw else ():
            last = "." + str(name).rsplit(".", 1)[-1]
            table.setdefault(last, {}).setdefault(str(name), []).append(node_id)
    return table


def op_overloads(index: Index, qualname: str) -> list[Node]:
    """``aten::add`` -> every ``aten::add[.<overload>]`` op."""
    name = qualname.rpartition("::")[2]
    return [
        node
        for node in index.find(name, kinds=[OP])
        if node.qualname == qualname or node.qualname.startswith(f"{qualname}.")
    ]


def _dispatching_ops(index: Index, node_id: int) -> list[Node]:
    ops = []
    for edge in index.in_edges(node_id, ["dispatches"]):
        source = index.node(edge.src)
        if source.kind == OP:
            ops.append(source)
        elif source.kind == "registration":
            ops.extend(
                index.node(inner.src)
                for inner in index.in_edges(source.id, ["dispatches"])
                if index.node(inner.src).kind == OP
            )
    return ops


def ops_reaching(index: Index, function: Node, depth: int = 2, max_nodes: int = 300) -> list[Node]:
    """Ops that dispatch to ``function`` (directly or through a registration); failing
    that, ops dispatching to one of its callers up to ``depth`` levels up."""
    ops = _dispatching_ops(index, function.id)
    frontier = [function.id]
    seen = {function.id}
    for _ in range(depth):
        if ops or not frontier or len(seen) > max_nodes:
            break
        callers = []
        for node_id in frontier:
            for edge in index.in_edges(node_id, ["calls"]):
                if edge.src not in seen:
                    seen.add(edge.src)
                    callers.append(edge.src)
        for caller in callers:
            ops.extend(_dispatching_ops(index, caller))
        frontier = callers
    return sorted(_unique(ops), key=lambda node: node.qualname)


def lookup(index: Index, name: str) -> Lookup:
    name = name.strip()
    found = [node for node in index.find_spelled(name) if node.kind != "file"]
    ops = [node for node in found if node.kind == OP]
    if ops:
        exact = [node for node in ops if node.qualname == name]
        return Lookup(ops=exact or ops, how="op name")
    if "::" in name and "." not in name.rpartition("::")[2]:
        overloads = op_overloads(index, name)
        if overloads:
            return Lookup(ops=overloads, how="op overloads")
    spelled = by_python_name(index, name)
    if not spelled and "." in name and "::" not in name:
        spelled = by_python_name(index, name, suffix=True)
    if spelled:
        return Lookup(
            ops=[node for node in spelled if node.kind == OP],
            bindings=[node for node in spelled if node.kind == "binding"],
            how="Python name",
        )
    registrations = [node for node in found if node.kind == "registration"]
    bindings = [node for node in found if node.kind == "binding"]
    functions = [node for node in found if node.kind in CPP_KINDS]
    if registrations:
        reached = []
        for registration in registrations:
            reached.extend(
                index.node(edge.src) for edge in index.in_edges(registration.id, ["dispatches"])
            )
        return Lookup(ops=_unique([n for n in reached if n.kind == OP]), how="registration")
    if bindings:
        return Lookup(bindings=bindings, how="binding")
    if functions:
        exact = [node for node in functions if node.qualname == name] or functions
        ops: list[Node] = []
        for function in exact[:20]:
            ops.extend(ops_reaching(index, function))
        return Lookup(ops=_unique(ops), functions=exact, how="C++ function")
    derivatives = [node for node in found if node.kind == "derivative"]
    if derivatives:
        ops = []
        for derivative in derivatives:
            ops.extend(index.node(edge.dst) for edge in index.out_edges(derivative.id, ["derives"]))
        return Lookup(ops=_unique([n for n in ops if n.kind == OP]), how="derivative")
    python = [node for node in found if node.kind in PYTHON_KINDS]
    if python and all(node.kind == "python_module" for node in python):
        # ``pkg.ops.roi_align`` names a submodule its package rebinds to the function
        # (``from .roi_align import roi_align``): the name is the function, as in Python.
        rebound = [n for n in reexported(index, name) if n.kind != "python_module"]
        if rebound:
            python = []
    if python:
        exact = [node for node in python if node.qualname == name] or python
        reached, via = ops_referenced(index, exact[:10])
        return Lookup(
            ops=[n for n in reached if n.kind == OP],
            bindings=[n for n in reached if n.kind == "binding"],
            python=exact,
            via=via,
            how="Python definition",
        )
    bound = assignment(index, name)
    if bound is not None:  # f = helper(...): what f's value names is what it runs
        node, named = bound
        # conv2d = _add_docstr(torch.conv2d, ...) names the op itself
        direct = [n for n in named if n.kind in (OP, "binding")]
        definitions = [n for n in named if n.kind not in (OP, "binding")]
        reached, via = ops_referenced(index, definitions[:10])
        reached = _unique([*direct, *reached])
        via.update({n.id: node.evidence for n in direct})
        return Lookup(
            ops=[n for n in reached if n.kind == OP],
            bindings=[n for n in reached if n.kind == "binding"],
            python=[node, *definitions[:3]],
            via=via,
            how="Python name bound by assignment",
        )
    exported = reexported(index, name)
    if exported:  # pkg.ops.nms for `from .boxes import nms` in pkg/ops/__init__.py
        reached, via = ops_referenced(index, exported[:10])
        return Lookup(
            ops=[n for n in reached if n.kind == OP],
            bindings=[n for n in reached if n.kind == "binding"],
            python=exported,
            via=via,
            how="Python re-export",
        )
    return Lookup()


def ops_referenced(
    index: Index, starts: list[Node], depth: int = 3, max_nodes: int = 300
) -> tuple[list[Node], dict[int, str]]:
    """Ops and bindings Python code names, directly or through up to ``depth`` levels of the
    Python functions it references; with the evidence of each first reference."""
    found: dict[int, Node] = {}
    via: dict[int, str] = {}
    frontier = [node.id for node in starts]
    seen = set(frontier)
    for _ in range(depth):
        following = []
        for node_id in frontier:
            for edge in index.out_edges(node_id, ["references"]):
                if edge.dst in seen:
                    continue
                seen.add(edge.dst)
                target = index.node(edge.dst)
                if target.kind in (OP, "binding"):
                    found[target.id] = target
                    via[target.id] = edge.evidence
                elif target.kind == "python_function" and len(seen) < max_nodes:
                    following.append(target.id)
        if found:
            break
        frontier = following
    return list(found.values()), via


def _unique(nodes: list[Node]) -> list[Node]:
    return list({node.id: node for node in nodes}.values())


def primary_order(ops: list[Node]) -> list[Node]:
    """Functional overloads first, then in-place, then out= variants; within each the
    default overload, then ``Tensor``, then by name."""

    def rank(node: Node) -> tuple[int, int, str]:
        overload = node.attrs.get("overload") or ""
        is_out = overload == "out" or overload.endswith("_out") or "out" in overload.split("_")
        inplace = node.name.endswith("_") and not node.name.endswith("__")
        # The default overload, then the Tensor one (torch.add(t, u)), then the others.
        usual = 0 if overload == "" else 1 if overload == "Tensor" else 2
        return (2 if is_out else 1 if inplace else 0, usual, node.qualname)

    return sorted(ops, key=rank)
