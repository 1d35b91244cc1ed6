"""affected: which tests can a change to these functions break, and why.

The selection engine's impact walk (indexer.select.impact) from the named definitions,
without a diff: each impacted test file comes with the shortest chain of evidence from
the change to the test, every hop with file:line. ``depth`` caps the hops (default: no
cap, as test selection walks). One walker serves every call on an index, so what it
learnt of the sources (which lines call an op, module statements) carries over: a
repeated or overlapping query takes about half the time.
"""

from __future__ import annotations

from collections.abc import Iterable
from threading import Lock

from indexer.graph.vocabulary import NodeKind
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.select.engine import reason_for
from indexer.select.impact import ImpactWalker
from indexer.select.model import Entity
from indexer.select.report import chain_text

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
MAX_FILES = 200
MAX_HOPS_SHOWN = 12


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


def _test_files(index: Index) -> dict[int, str]:
    return dict(
        index.conn.execute(
            "SELECT DISTINCT f.id, f.path FROM files f JOIN nodes n ON n.file_id = f.id"
            " WHERE n.kind = 'test_file'"
        )
    )


def affected(index: Index, funcs: Iterable[str] | str, depth: int | None = None) -> Answer:
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
    walker, walking = index.shared("impact-walker", lambda: (ImpactWalker(index), Lock()))
    with walking:  # the walker's per-file caches are not for two walks at once
        reach = walker.walk(starts, max_depth=depth)
    tests = _test_files(index)
    paths = dict(index.conn.execute("SELECT id, path FROM files"))
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
    for path in sorted(by_file):
        first = min(by_file[path], key=lambda n: reach.depth.get(n, 0))
        reason = reason_for(index, reach, first, entities, paths)
        answer.items.append(
            Item(
                path,
                reason.chain[-1].evidence if reason.chain else reason.evidence,
                f"{len(reason.chain)} hops from {reason.entity}",
                data={"chain": [vars(hop) for hop in reason.chain], "text": chain_text(reason)},
            )
        )
        for hop in reason.chain[:MAX_HOPS_SHOWN]:
            answer.items.append(Item(f"{hop.src} {hop.kind} {hop.dst}", hop.evidence, depth=1))
    answer.data = {
        "test_files": sorted(by_file),
        "changed": [{"name": e.label, "kind": e.kind, "evidence": e.evidence} for e in entities],
    }
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
    elif unreached and len(entities) > 1:
        answer.notes.append(f"no test was credited to {', '.join(unreached)} (shared paths)")
    return answer.truncate(MAX_FILES * (MAX_HOPS_SHOWN + 1))
