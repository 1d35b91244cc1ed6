"""affected: which tests can a change to these functions break, and why.

The selection engine's impact walk (indexer.select.impact) from the named definitions,
without a diff: each impacted test file comes with the shortest chain of evidence from
the change to the test, every hop with file:line. ``depth`` caps the hops (default: no
cap, as test selection walks).

The answer lists the ``limit`` nearest test files, and the walk, breadth-first, stops
once it has found them: a central function (``at::native::matmul``) reaches nearly every
test file through ~76,000 nodes, seconds of walking for a list no agent reads past its
first screen. Such an answer says it is a lower bound ("at least 50"); a walk that ends
before the limit is complete and says how many. ``torchtalk select`` on a diff always
walks to the end. One walker serves every call on an index, so what it learnt of the
sources (which lines call an op, module statements) carries over between calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from threading import Lock

from indexer.graph.vocabulary import NodeKind
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.query.recorded_answers import add_record_evidence
from indexer.select.engine import reason_for
from indexer.select.impact import ImpactWalker
from indexer.select.model import Entity
from indexer.select.reach import FileQuota

CHANGEABLE = (
    NodeKind.CPP_FUNCTION.value,
    NodeKind.CUDA_KERNEL.value,
    NodeKind.DISPATCH_STUB.value,
    NodeKind.OP.value,
    NodeKind.DERIVATIVE.value,
    NodeKind.BINDING.value,
    NodeKind.PYTHON_FUNCTION.value,
    NodeKind.PYTHON_CLASS.value,
    NodeKind.PYTHON_MODULE.value,
    NodeKind.TEST_UTILITY.value,
)
MAX_FILES = 50  # files listed, each with its chain (one screen); the MCP tool says "50"
MAX_HOPS_SHOWN = 12
CHAINS_SHOWN = 10  # files whose chains the text spells out, hop by hop


def _resolve(index: Index, name: str) -> list[Node]:
    """Definitions named ``name``: by qualified or short name, then by a qualified suffix
    (``native::matmul``, ``functional.linear``)."""
    nodes = index.find(name, CHANGEABLE)
    exact = [node for node in nodes if node.qualname == name]
    if exact or nodes:
        return exact or nodes
    separator = "." if "." in name and "::" not in name else "::"
    rows = index.conn.execute(
        "SELECT n.id FROM nodes n WHERE n.qualname LIKE ? ESCAPE '\\'"
        f" AND n.kind IN ({','.join('?' * len(CHANGEABLE))})",
        ["%" + separator + name.replace("%", "\\%").replace("_", "\\_"), *CHANGEABLE],
    ).fetchall()
    return index.nodes(row[0] for row in rows)


def affected(
    index: Index, funcs: Iterable[str] | str, depth: int | None = None, limit: int = MAX_FILES
) -> Answer:
    if limit < 1:
        raise ValueError(f"affected: limit must be at least 1, not {limit}")
    names = [part.strip() for part in funcs.split(",")] if isinstance(funcs, str) else list(funcs)
    names = [name for name in names if name]
    query = ", ".join(names)
    entities: list[Entity] = []
    starts: dict[int, int] = {}
    missing: list[str] = []
    for name in names:
        nodes = _resolve(index, name)
        if not nodes:
            missing.append(name)
            continue
        label = nodes[0].qualname if len(nodes) == 1 else name
        entity = Entity(label, nodes[0].kind, nodes[0].evidence, "named", [n.id for n in nodes])
        for node in nodes:
            starts.setdefault(node.id, len(entities))
        entities.append(entity)
    if not entities:
        return Answer.not_found(
            "affected", query, "function", index.suggest(names[0] if names else "")
        )
    tests = index.test_file_paths()
    quota = FileQuota(tests, limit)
    walker, walking = index.shared("impact-walker", lambda: (ImpactWalker(index), Lock()))
    with walking:  # the walker's per-file caches are not for two walks at once
        reach = walker.walk(starts, quota=quota, max_depth=depth)
    complete = not quota.full
    paths = index.file_paths()
    by_file: dict[str, list[int]] = {}
    for node_id, file_id in reach.file_id.items():
        if file_id in tests:
            by_file.setdefault(tests[file_id], []).append(node_id)
    answer = Answer("affected", query)
    cap = "" if depth is None else f" within {depth} hops"
    answer.title = (
        f"{len(by_file)} test files can break from a change to {query}{cap} "
        f"(of {len(tests)} test files)"
    )
    if not complete:
        answer.title = (
            f"at least {len(by_file)} test files can break from a change to {query}{cap} "
            f"(of {len(tests)} test files); the {len(by_file)} nearest are listed, and the "
            "walk stopped there: 'torchtalk select' on a diff finds every one"
        )
    nearest = {path: min(reach.depth.get(n, 0) for n in ids) for path, ids in by_file.items()}
    # Nearest first; among files as near, those where the walk reached the most (tests
    # calling the changed code directly) before the rest.
    ranked = sorted(by_file, key=lambda p: (nearest[p], -len(by_file[p]), p))
    for position, path in enumerate(ranked):
        first = min(by_file[path], key=lambda n: reach.depth.get(n, 0))
        reason = reason_for(index, reach, first, entities, paths)
        answer.items.append(
            Item(
                path,
                reason.chain[-1].evidence if reason.chain else reason.evidence,
                f"{len(reason.chain)} hops from {reason.entity}",
                data={"chain": [vars(hop) for hop in reason.chain], "reached": len(by_file[path])},
            )
        )
        if position < CHAINS_SHOWN:  # further files' chains are in their items' data
            for hop in reason.chain[:MAX_HOPS_SHOWN]:
                answer.items.append(Item(f"{hop.src} {hop.kind} {hop.dst}", hop.evidence, depth=1))
    answer.data = {
        "test_files": sorted(by_file),
        "complete": complete,
        "changed": [{"name": e.label, "kind": e.kind, "evidence": e.evidence} for e in entities],
    }
    answer.more = "each file's chain is in its item's data; 'torchtalk select' lists every test"
    if missing:
        answer.notes.append(f"not found in the index: {', '.join(missing)}")
    unreached = [
        e.label
        for i, e in enumerate(entities)
        if not any(reach.origin[n] == i for path in by_file for n in by_file[path])
    ]
    if not by_file:
        answer.notes.append(
            f"no test reaches {query}{cap}: its users may be invisible to the index "
            "(generated code, function pointers); test selection would run everything"
        )
    elif complete and unreached and len(entities) > 1:
        answer.notes.append(f"no test was credited to {', '.join(unreached)} (shared paths)")
    answer = answer.truncate(limit + CHAINS_SHOWN * MAX_HOPS_SHOWN)
    named = index.nodes(node_id for entity in entities for node_id in entity.node_ids)
    add_record_evidence(index, answer, named, query)
    return answer
