"""An op's family: every dispatcher name under which a changed op's kernel can run.

A test's record names the ops the dispatcher called, as the dispatcher names them. The
native walk (``indexer.query.native_reach``) ends at the op whose kernel reaches the
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
    # each op of the family, by its full name, with the hops out to it
    by_qualname: dict[str, tuple[Node, list[Hop]]] = field(default_factory=dict)

    def path_to(self, recorded: str) -> tuple[Node, list[Hop]]:
        """The family's op a recorded name (any overload spelling) is, and the hops to it:
        that overload where the index holds it, else the first op of its name."""
        if recorded in self.by_qualname:
            return self.by_qualname[recorded]
        base = base_name(recorded)
        return self.members[base], self.hops[base]

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
    while queue:
        node, origin, hops, may_wrap = queue.popleft()
        if node.id in seen_nodes:
            continue
        seen_nodes.add(node.id)
        family.by_qualname.setdefault(node.qualname, (node, hops))
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
        if may_wrap:
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
    CompositeExplicitAutograd kernels calling ``op`` through its generated C++ API: a
    ``calls`` edge to the op (``at::sort(...)``, resolved by name), or a call the index
    left unresolved that names it (``at::cpu::sort_out``)."""
    if not op.qualname.startswith("aten::"):
        return []
    rows = index.conn.execute(
        "SELECT c.src_id, cf.path, c.line, d.src_id, df.path, d.line, d.attrs"
        " FROM edges c JOIN files cf ON cf.id = c.file_id"
        " JOIN edges d ON d.dst_id = c.src_id AND d.kind = ?"
        " JOIN files df ON df.id = d.file_id"
        " JOIN nodes w ON w.id = d.src_id AND w.kind = ?"
        " WHERE c.dst_id = ? AND c.kind = ?",
        (DISPATCHES, OP, op.id, EdgeKind.CALLS.value),
    ).fetchall()
    keys = [op.name, f"{op.name}_out", f"{op.name}_outf"]
    for row in index.conn.execute(
        "SELECT r.src_id, rf.path, r.line, e.src_id, ef.path, e.line, e.attrs, r.target"
        " FROM refs r JOIN files rf ON rf.id = r.file_id"
        " JOIN edges e ON e.dst_id = r.src_id AND e.kind = ?"
        " JOIN files ef ON ef.id = e.file_id"
        " JOIN nodes w ON w.id = e.src_id AND w.kind = ?"
        f" WHERE r.target_key IN ({','.join('?' * len(keys))}) AND r.scheme = 'cpp'"
        " AND NOT EXISTS (SELECT 1 FROM edges x WHERE x.ref_id = r.id)",
        (DISPATCHES, OP, *keys),
    ):
        if _names_api(row[7], keys):
            rows.append(row[:7])
    found = []
    for kernel_id, call_path, call_line, wrapper_id, disp_path, disp_line, attrs in rows:
        key = str((json.loads(attrs) if attrs else {}).get("key", ""))
        if not key.startswith(WRAPPER_KEYS):
            continue
        nodes = {n.id: n for n in index.nodes([wrapper_id, kernel_id])}
        if wrapper_id in nodes and kernel_id in nodes:
            where = (f"{disp_path}:{disp_line}", f"{call_path}:{call_line}")
            found.append((nodes[wrapper_id], nodes[kernel_id], where))
    return found


def _names_api(target: str, keys: list[str]) -> bool:
    """``at::sort``, ``at::cpu::sort_out``, ``self.sort`` (a method): the op's API."""
    head, _, last = target.rpartition("::")
    if last.split("<", 1)[0] not in keys:
        return False
    return not head or (head + "::").startswith(API_PREFIXES)
