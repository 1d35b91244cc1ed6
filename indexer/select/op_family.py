"""An op's family: every dispatcher name under which a changed op's kernel can run.

A test's record names the ops the dispatcher called, as the dispatcher names them. The
native walk (``indexer.select.native_reach``) ends at the op whose kernel reaches the
change, but the same kernel also runs under other names:

- every overload of the name (``aten::sort``, ``aten::sort.stable``, ``.values``...): a
  record may hold a name without its overload, and overloads share kernels and call
  each other; so a family is kept as op names without their overloads, and a record's
  name matches whatever overload it spells;
- the ops that are its ``structured_delegate`` (``cumsum``, ``cumsum_`` -> ``cumsum.out``):
  their generated kernels run the structured kernel without dispatching ``cumsum.out``,
  and op-to-op ``dispatches`` edges of ``autogen`` variants likewise;
- the ``CompositeExplicitAutograd`` wrappers whose kernel calls one of them through its
  generated API (``at::sort(...)``), one hop: a record made with every nested op seen
  holds the inner name too, this covers one that is not.

docs/selection.md ("Selection from a record") says the same for users.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.query.index import Index, Node
from indexer.select.model import Hop

OP = NodeKind.OP.value
DISPATCHES = EdgeKind.DISPATCHES.value
OVERLOAD = "overload of"  # a family hop between two overloads of one name
WRAPPER_KEYS = ("CompositeExplicitAutograd",)  # and ...NonFunctional: a prefix
API_PREFIXES = ("at::", "::at::", "torch::")


def base_name(qualname: str) -> str:
    """``aten::sort.stable`` -> ``aten::sort``."""
    return qualname.split(".", 1)[0]


@dataclass
class Family:
    """Op names without overloads -> the hops from a reached op out to that name (user ->
    used, as every chain runs), in the order found."""

    hops: dict[str, list[Hop]] = field(default_factory=dict)
    reached_from: dict[str, int] = field(default_factory=dict)  # name -> the reached op id
    members: dict[str, Node] = field(default_factory=dict)  # name -> the op that brought it

    @property
    def names(self) -> list[str]:
        return list(self.hops)


def op_family(index: Index, op_ids: list[int]) -> Family:
    """The family of the ops ``op_ids`` (the ops a change reaches), closed over
    overloads and op-to-op dispatch; wrappers one hop from that closure."""
    family = Family()
    cache: dict[str, list[Node]] = {}
    queue: deque[tuple[Node, int, list[Hop], bool]] = deque()
    for node in index.nodes(op_ids):
        if node.kind == OP:
            queue.append((node, node.id, [], True))
    seen_nodes: set[int] = set()
    wrapped: set[str] = set()  # names whose wrappers were looked up
    while queue:
        node, origin, hops, may_wrap = queue.popleft()
        if node.id in seen_nodes:
            continue
        seen_nodes.add(node.id)
        base = base_name(node.qualname)
        if base not in family.hops:
            family.hops[base] = hops
            family.reached_from[base] = origin
            family.members[base] = node
        for other in _overloads(index, base, cache):
            if other.id not in seen_nodes:
                step = Hop(OVERLOAD, other.qualname, node.qualname, other.evidence, OP, OP)
                queue.append((other, origin, [*hops, step], may_wrap))
        for edge in index.in_edges(node.id, (DISPATCHES,)):
            if edge.src in seen_nodes:
                continue
            users = index.nodes([edge.src])
            if not users or users[0].kind != OP:
                continue
            user = users[0]
            step = Hop(DISPATCHES, user.qualname, node.qualname, edge.evidence, OP, OP)
            queue.append((user, origin, [*hops, step], may_wrap))
        if may_wrap and node.name not in wrapped:
            wrapped.add(node.name)
            for wrapper, kernel, where in _wrappers(index, node):
                if wrapper.id in seen_nodes:
                    continue
                step = [
                    Hop(DISPATCHES, wrapper.qualname, kernel.qualname, where[0], OP,
                        kernel.kind),
                    Hop(EdgeKind.CALLS.value, kernel.qualname, node.qualname, where[1],
                        kernel.kind, OP),
                ]  # fmt: skip
                queue.append((wrapper, origin, [*hops, *step], False))
    return family


def _overloads(index: Index, base: str, cache: dict[str, list[Node]]) -> list[Node]:
    if base not in cache:
        short = base.rsplit("::", 1)[-1]
        rows = index.conn.execute(
            "SELECT n.id FROM nodes n WHERE n.kind = ? AND n.name = ?", (OP, short)
        ).fetchall()
        cache[base] = [
            n for n in index.nodes([r[0] for r in rows]) if base_name(n.qualname) == base
        ]
    return cache[base]


def _wrappers(index: Index, op: Node) -> list[tuple[Node, Node, tuple[str, str]]]:
    """(wrapper op, its kernel, (dispatch evidence, call evidence)) of the
    CompositeExplicitAutograd kernels calling ``op``'s generated C++ API by name."""
    if not op.qualname.startswith("aten::"):
        return []
    name = op.name
    keys = [name, f"{name}_out", f"{name}_outf"]
    marks = ",".join("?" * len(keys))
    found = []
    for (
        kernel_id,
        target,
        call_path,
        call_line,
        edge_attrs,
        wrapper_id,
        disp_path,
        disp_line,
    ) in index.conn.execute(
        "SELECT r.src_id, r.target, rf.path, r.line, e.attrs, e.src_id, ef.path, e.line"
        " FROM refs r JOIN files rf ON rf.id = r.file_id"
        " JOIN edges e ON e.dst_id = r.src_id AND e.kind = ?"
        " JOIN files ef ON ef.id = e.file_id"
        " JOIN nodes w ON w.id = e.src_id AND w.kind = ?"
        f" WHERE r.target_key IN ({marks}) AND r.scheme = 'cpp'"
        " AND NOT EXISTS (SELECT 1 FROM edges x WHERE x.ref_id = r.id)",
        (DISPATCHES, OP, *keys),
    ):
        key = str((json.loads(edge_attrs) if edge_attrs else {}).get("key", ""))
        if not key.startswith(WRAPPER_KEYS) or not _names_api(target, keys):
            continue
        nodes = {n.id: n for n in index.nodes([wrapper_id, kernel_id])}
        if wrapper_id in nodes and kernel_id in nodes:
            found.append(
                (nodes[wrapper_id], nodes[kernel_id],
                 (f"{disp_path}:{disp_line}", f"{call_path}:{call_line}"))
            )  # fmt: skip
    return found


def _names_api(target: str, keys: list[str]) -> bool:
    """``at::sort``, ``at::cpu::sort_out``, ``self.sort`` (a method): the op's API."""
    head, _, last = target.rpartition("::")
    if last.split("<", 1)[0] not in keys:
        return False
    return not head or (head + "::").startswith(API_PREFIXES)
