"""When no test reaches a changed entity: widen to its possible users, else everything.

The graph is the evidence, and it has gaps: C++ calls the resolver could not type
(template receivers, macro-built calls), Python calls by untyped name. An entity no test
reaches is widened once, soundly:

- a C++ function or kernel -> its *possible users*: every unresolved call naming it
  (any file), and the other definitions of its file (internal-linkage and macro-built
  callers live there) or, for a header, of the files including it;
- a Python function or class -> its module and that module's importers.

If the widened set reaches no test either, the users are invisible to the index
(generated code, function pointers, dynamic lookup) and the selection runs everything,
naming the entity; unless every chain from it ends at ops nothing in the tree names,
whose callers are outside the tree (``indexer.select.outside_users``): then no test can
run it, and a note says so.
"""

from __future__ import annotations

from indexer.graph.vocabulary import NodeKind
from indexer.paths import is_header
from indexer.query.index import Index, Node
from indexer.select.impact import ImpactWalker
from indexer.select.model import Entity, Selection
from indexer.select.outside_users import ends, unnamed_ops
from indexer.select.placed import FUNCTION_KINDS, MEMBERS_SHOWN
from indexer.select.placement import Placer
from indexer.select.reach import FileQuota, Reach

PYTHON_DEFS = frozenset(
    {NodeKind.PYTHON_FUNCTION.value, NodeKind.PYTHON_CLASS.value, NodeKind.TEST_UTILITY.value}
)
CPP_KINDS = FUNCTION_KINDS | {NodeKind.CPP_CLASS.value, NodeKind.DISPATCH_STUB.value}
WIDENED = "widened: "  # reason prefix of the entities this module adds


def _reaches_tests(walker: ImpactWalker, entity: Entity, position: int, tests: set[int]) -> bool:
    """Whether any test reaches ``entity``. The shared walk credits each node to the first
    entity that reached it, so an entity whose closure overlaps an earlier one's is asked
    again on its own (stopping at the first test)."""
    if not entity.node_ids:
        return False
    alone = walker.walk(dict.fromkeys(entity.node_ids, position), quota=FileQuota(tests, 1))
    return any(file_id in tests for file_id in alone.file_id.values())


def _cpp_users(index: Index, placer: Placer, nodes: list[Node]) -> list[int]:
    own = {node.id for node in nodes}
    users: set[int] = set()
    names = {node.name for node in nodes if node.kind in FUNCTION_KINDS}
    for name in sorted(names):
        users.update(
            src
            for (src,) in index.conn.execute(
                "SELECT DISTINCT r.src_id FROM refs r WHERE r.target_key = ? AND r.scheme = 'cpp'"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                (name,),
            )
        )
    files = {node.path for node in nodes}
    for path in list(files):
        if is_header(path):
            files |= placer._includers(path)
    users.update(placer._ids_in_files(files))
    users -= own
    return [node.id for node in index.nodes(users) if node.kind != NodeKind.FILE.value]


def _widen(index: Index, placer: Placer, entity: Entity) -> Entity | None:
    nodes = index.nodes(entity.node_ids)
    if not nodes:
        return None
    if all(node.kind in PYTHON_DEFS for node in nodes):
        modules = [m for path in sorted({n.path for n in nodes}) for m in placer._modules(path)]
        if not modules:
            return None
        return Entity(
            f"module of {entity.label}",
            "group" if len(modules) > 1 else modules[0].kind,
            entity.evidence,
            f"{WIDENED}no test names {entity.label}: its module and that module's importers",
            [m.id for m in modules],
            entity.cuda,
            [m.qualname for m in modules[:MEMBERS_SHOWN]],
        )
    if all(node.kind in CPP_KINDS for node in nodes):
        users = _cpp_users(index, placer, nodes)
        if not users:
            return None
        return Entity(
            f"possible users of {entity.label}",
            "group",
            entity.evidence,
            f"{WIDENED}no resolved call reaches {entity.label} from a test: the calls naming "
            "it, and the other definitions of its file (or of the files including it)",
            users,
            entity.cuda,
            [n.qualname for n in index.nodes(users[:MEMBERS_SHOWN])],
        )
    return None


def _only_outside_users(
    index: Index, walker: ImpactWalker, placer: Placer, entities: list[Entity]
) -> list[str] | None:
    """The ops ending every chain from these entities, if all are ops nothing in the tree
    names; else None."""
    starts = {node_id for entity in entities for node_id in entity.node_ids}
    alone = walker.walk(dict.fromkeys(starts, 0))
    return unnamed_ops(index, placer.diff.source, ends(alone, starts, index))


def apply_fallbacks(
    index: Index,
    walker: ImpactWalker,
    reach: Reach,
    placer: Placer,
    selection: Selection,
    tests: set[int],
) -> None:
    credited = {reach.origin[n] for n, f in reach.file_id.items() if f in tests}
    decided: set[int] = set()
    widened_from: dict[int, Entity] = {}  # position of a widened entity -> the entity
    while True:
        added: list[Entity] = []
        for position, entity in enumerate(selection.entities):
            if position in credited or position in decided:
                continue
            decided.add(position)
            if not entity.node_ids or _reaches_tests(walker, entity, position, tests):
                continue
            wider = None if entity.reason.startswith(WIDENED) else _widen(index, placer, entity)
            if wider is not None:
                widened_from[len(selection.entities) + len(added)] = entity
                added.append(wider)
                continue
            changed = widened_from.get(position, entity)
            outside = _only_outside_users(index, walker, placer, [entity, changed])
            if outside is not None:
                selection.notes.append(
                    f"{changed.label} (changed at {changed.evidence}) reaches no test: every "
                    f"chain from it ends at ops nothing in the tree names ({', '.join(outside)}),"
                    " whose callers are outside the tree"
                )
                continue
            selection.everything.append(
                f"nothing in the index reaches {entity.label} (changed at {entity.evidence}): "
                "its users are invisible to the index (generated code, function pointers, "
                "dynamic lookup), so any test may reach it"
            )
        if not added:
            return
        first = len(selection.entities)
        selection.entities += added
        walked = walker.walk({n: first + i for i, e in enumerate(added) for n in e.node_ids})
        credited |= {reach.origin[n] for n in reach.merge(walked) if reach.file_id[n] in tests}
