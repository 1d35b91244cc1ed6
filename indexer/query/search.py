"""search: registrations and CUDA kernels whose name contains a query.

- ``mode="bindings"``: ops (native_functions.yaml, TORCH_LIBRARY, RegisterOperators),
  registrations (``m.impl`` of ops defined elsewhere) and Python bindings (pybind11,
  PyMethodDef), each with the C++ it reaches per dispatch key; ``backend`` keeps the
  registrations for one dispatch key (``CPU``, ``CUDA``, ``QuantizedCPU``...).
- ``mode="kernels"``: ``__global__`` kernels with their launch sites and the host
  functions launching them.

Nothing matching answers "not found" with the closest known names.
"""

from __future__ import annotations

from indexer.query import op_chain
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node

MODES = ("bindings", "kernels")
LIMIT = 40
_BINDING_KINDS = ("op", "registration", "binding")


def _matching(index: Index, query: str, kinds: tuple[str, ...]) -> list[Node]:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    placeholders = ",".join("?" * len(kinds))
    rows = index.conn.execute(
        f"SELECT id FROM nodes WHERE kind IN ({placeholders})"
        " AND (qualname LIKE ? ESCAPE '\\' OR (kind IN ('op', 'binding') AND attrs LIKE ? ESCAPE '\\'))",
        [*kinds, f"%{escaped}%", f"%{escaped}%"],
    ).fetchall()
    lowered = query.lower()
    nodes = [
        node
        for node in index.nodes(row[0] for row in rows)
        if lowered in node.qualname.lower()
        or any(lowered in name.lower() for name in node.attrs.get("python_names") or [])
    ]

    def rank(node: Node) -> tuple[int, int, str]:
        qualname = node.qualname.lower()
        exact = node.name.lower() == lowered or qualname.endswith(f"::{lowered}")
        return (0 if exact else 1, len(qualname), qualname)

    return sorted(nodes, key=rank)


def _targets(index: Index, node: Node) -> list[tuple[list[str], str, str | None, str]]:
    """(keys, target, definition, registered at) of each kernel an op/registration names."""
    kind = "binds" if node.kind == "binding" else "dispatches"
    found = []
    if kind == "dispatches":
        for hop in op_chain.dispatch_hops(index, node.id):
            if hop.node.kind == "registration":  # registered from another file: its kernels
                found.extend(_targets(index, hop.node))
                continue
            found.append(
                (op_chain.keys_of(hop.attrs), hop.node.qualname, hop.node.evidence, hop.evidence)
            )
    else:
        for edge in index.out_edges(node.id, [kind]):
            target = index.node(edge.dst)
            found.append(([], target.qualname, target.evidence, edge.evidence))
    for missing in op_chain.unresolved(index, node.id, kind):
        found.append((op_chain.keys_of(missing.attrs), missing.target, None, missing.evidence))
    return found


def _declared_keys(node: Node) -> list[str]:
    keys = list((node.attrs.get("dispatch") or {}).keys()) + list(node.attrs.get("impl_keys") or [])
    return keys


def search(index: Index, query: str, mode: str = "bindings", backend: str | None = None) -> Answer:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if not query or not query.strip():
        raise ValueError("search needs a query: a name or part of one")
    query = query.strip()
    if mode == "kernels":
        return _kernels(index, query, backend)
    return _bindings(index, query, backend.strip() if backend else None)


def _bindings(index: Index, query: str, backend: str | None) -> Answer:
    answer = Answer("search", query)
    shown = 0
    matched = 0
    for node in _matching(index, query, _BINDING_KINDS):
        targets = _targets(index, node)
        if backend is not None:
            wanted = backend.lower()
            targets = [t for t in targets if any(key.lower() == wanted for key in t[0])]
            if not targets and wanted not in (k.lower() for k in _declared_keys(node)):
                continue
        matched += 1
        if shown >= LIMIT:
            continue
        shown += 1
        form = node.attrs.get("source") or node.attrs.get("form") or node.kind
        names = [n for n in node.attrs.get("python_names") or [] if ".ops." not in n][:3]
        detail = f"{node.kind} ({form})" + (f"; Python: {', '.join(names)}" if names else "")
        answer.items.append(Item(node.qualname, node.evidence, detail, 0, {"kind": node.kind}))
        for keys, target, definition, registered in targets[:12]:
            label = f"{', '.join(keys)}: {target}" if keys else target
            where = (
                f"registered at {registered}"
                if definition
                else f"at {registered}: no definition in the index"
            )
            answer.items.append(Item(label, definition or registered, where, 1, {"keys": keys}))
    if matched == 0:
        what = f"Registration for {backend}" if backend else "Registration"
        return Answer.not_found("search", query, what, index.suggest(query))
    answer.title = f"{matched} registration{'s' if matched != 1 else ''} matching {query!r}" + (
        f" for {backend}" if backend else ""
    )
    if matched > shown:
        answer.total = matched
        answer.notes.append(f"{matched - shown} more not shown; narrow the query")
    return answer


def _kernels(index: Index, query: str, backend: str | None) -> Answer:
    answer = Answer("search", query)
    kernels = _matching(index, query, ("cuda_kernel",))
    if not kernels:
        return Answer.not_found("search", query, "CUDA kernel", index.suggest(query))
    if backend and "cuda" not in backend.lower() and "hip" not in backend.lower():
        answer.notes.append(f"kernels are CUDA code; backend {backend!r} does not apply")
    for kernel in kernels[:LIMIT]:
        answer.items.append(Item(kernel.qualname, kernel.evidence, "CUDA kernel", 0))
        launches = index.in_edges(kernel.id, ["launches"])
        for edge in launches[:12]:
            host = index.node(edge.src)
            answer.items.append(Item(host.qualname, edge.evidence, "launched here", 1))
        if not launches:
            answer.items.append(Item("no launch site found in the index", None, "", 1))
    answer.title = (
        f"{len(kernels)} CUDA kernel{'s' if len(kernels) != 1 else ''} matching {query!r}"
    )
    if len(kernels) > LIMIT:
        answer.total = len(kernels)
        answer.notes.append(f"{len(kernels) - LIMIT} more not shown; narrow the query")
    return answer
