"""A walk's chain from a changed entity to a reached node, rendered as a reason: each
hop ``user kind used @ file:line``, with the kinds of both ends and whether the compiler
resolved it (docs/selection.md, "The JSON report"). The one rendering, for selections
and the MCP ``affected`` tool alike."""

from __future__ import annotations

from indexer.graph.vocabulary import Extractor
from indexer.query.index import Index
from indexer.select.model import Entity, Hop, Reason
from indexer.select.placement import READS_PATH
from indexer.select.reach import Reach

FAST, PRECISE = Extractor.FAST.value, Extractor.PRECISE.value


def reasons_for(
    index: Index,
    reach: Reach,
    node_ids: list[int],
    entities: list[Entity],
    paths: dict[int, str],
) -> list[Reason]:
    """The chain of steps from a changed entity out to each of ``node_ids``, with
    evidence; the nodes of all the chains read in one query (a central change selects
    ~900 files, each chain ~15 hops)."""
    chains = [reach.chain(node_id) for node_id in node_ids]
    ids = set(node_ids)
    for steps in chains:
        ids.update(step.src for step in steps)
        ids.update(step.dst for step in steps)
    nodes = {node.id: node for node in index.nodes(ids)}
    precise = index.precise_edges()
    return [
        _reason(reach, node_id, steps, entities, paths, nodes, precise)
        for node_id, steps in zip(node_ids, chains, strict=True)
    ]


def _reason(
    reach: Reach,
    node_id: int,
    steps: list,
    entities: list[Entity],
    paths: dict[int, str],
    nodes: dict[int, object],
    precise: frozenset[tuple[int, int, int]] = frozenset(),
) -> Reason:
    entity = entities[reach.origin[node_id]]
    hops = [
        Hop(
            step.kind,
            _label(nodes, step.src),
            _label(nodes, step.dst),
            f"{paths.get(step.file_id, '?')}:{step.line}",
            _kind(nodes, step.src),
            _kind(nodes, step.dst),
            PRECISE if (step.src, step.dst, step.line) in precise else FAST,
        )
        for step in steps
    ]
    if not hops:
        node = nodes.get(node_id)
        note = f"{node.qualname} changed" if node is not None else ""
        if entity.kind == READS_PATH:
            note = entity.reason  # the test itself is unchanged: it reads a changed file
        return Reason(entity.label, entity.evidence, note=note)
    return Reason(entity.label, entity.evidence, hops)


def _label(nodes: dict[int, object], node_id: int) -> str:
    node = nodes.get(node_id)
    return getattr(node, "qualname", str(node_id))


def _kind(nodes: dict[int, object], node_id: int) -> str:
    return getattr(nodes.get(node_id), "kind", "")
