"""search: registrations and CUDA kernels whose name contains a query.

- ``mode="bindings"``: ops (native_functions.yaml, TORCH_LIBRARY, RegisterOperators),
  registrations (``m.impl`` of ops defined elsewhere), Python bindings (pybind11,
  PyMethodDef) and dispatch stubs (their ``REGISTER_DISPATCH`` kernels), each with the
  C++ it reaches per dispatch key; ``backend`` keeps the
  registrations for one dispatch key (``CPU``, ``CUDA``, ``QuantizedCPU``...).
- ``mode="kernels"``: the device kernels of an op (``index_add``: its CUDA kernels'
  host functions and the ``__global__`` kernels they launch, its DispatchStubs'
  registered kernels, the library calls they end in), of a host function
  (``index_add_cuda_impl``: what it launches), and ``__global__`` kernels whose own name
  matches (``indexFuncSmallIndex``), in that order.

Nothing matching answers "not found", naming what was searched, with the closest known
names.
"""

from __future__ import annotations

from indexer.query import below_kernel, op_chain
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.query.op_lookup import lookup, primary_order

MODES = ("bindings", "kernels")
LIMIT = 40
MAX_OPS = 4  # overloads whose kernels mode="kernels" lists
MAX_HOSTS = 8
_BINDING_KINDS = ("op", "registration", "binding", "dispatch_stub")


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


def _targets(index: Index, node: Node) -> list[tuple[list[str], str, str | None, str, str]]:
    """(keys, target, definition, registered at, doubt) of each kernel an op/registration
    names; ``doubt``: what the text says when the name had several definitions."""
    kind = "binds" if node.kind == "binding" else "dispatches"
    found = []
    if node.kind == "dispatch_stub":  # REGISTER_DISPATCH(stub, &kernel), one per backend
        return [
            (
                [op_chain.backend_of(hop)],
                hop.node.qualname,
                hop.node.evidence,
                hop.evidence,
                op_chain.ambiguity(hop.attrs),
            )
            for hop in op_chain.stub_kernels(index, node)
        ]
    if kind == "dispatches":
        for hop in op_chain.dispatch_hops(index, node.id):
            if hop.node.kind == "registration":  # registered from another file: its kernels
                found.extend(_targets(index, hop.node))
                continue
            keys = op_chain.keys_of(hop.attrs)
            doubt = op_chain.ambiguity(hop.attrs)
            found.append((keys, hop.node.qualname, hop.node.evidence, hop.evidence, doubt))
    else:
        for edge in index.out_edges(node.id, [kind]):
            target = index.node(edge.dst)
            doubt = op_chain.ambiguity(edge.attrs)
            found.append(([], target.qualname, target.evidence, edge.evidence, doubt))
    for missing in op_chain.unresolved(index, node.id, kind):
        found.append((op_chain.keys_of(missing.attrs), missing.target, None, missing.evidence, ""))
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
        for keys, target, definition, registered, doubt in targets[:12]:
            label = f"{', '.join(keys)}: {target}" if keys else target
            where = (
                f"registered at {registered}{doubt}"
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
    wanted = backend.strip().lower() if backend else None
    by_op = _op_kernels(index, query, wanted, answer)
    by_host = _host_kernels(index, query, answer) if not by_op else 0
    kernels = _matching(index, query, ("cuda_kernel",))
    for kernel in kernels[:LIMIT]:
        answer.items.append(Item(kernel.qualname, kernel.evidence, "CUDA kernel", 0))
        launches = index.in_edges(kernel.id, ["launches"])
        for edge in launches[:12]:
            host = index.node(edge.src)
            answer.items.append(Item(host.qualname, edge.evidence, "launched here", 1))
        if not launches:
            answer.items.append(Item("no launch site found in the index", None, "", 1))
    if not (by_op or by_host or kernels):
        return Answer.not_found(
            "search",
            query,
            "Kernel (searched: ops, C++ host functions and __global__ kernels by name)",
            index.suggest(query),
        )
    parts = [
        f"{by_op} op{'s' if by_op != 1 else ''}" if by_op else "",
        f"{by_host} host function{'s' if by_host != 1 else ''}" if by_host else "",
        f"{len(kernels)} CUDA kernel{'s' if len(kernels) != 1 else ''}" if kernels else "",
    ]
    answer.title = f"kernels for {query!r}: " + ", ".join(p for p in parts if p)
    if backend:
        answer.title += f" (backend {backend})"
    if len(kernels) > LIMIT:
        answer.total = len(kernels)
        answer.notes.append(f"{len(kernels) - LIMIT} more kernels not shown; narrow the query")
    answer.more = "trace the op (focus='cuda' or a dispatch key) for the whole chain"
    return answer


def _op_kernels(index: Index, query: str, backend: str | None, answer: Answer) -> int:
    """Items for the ops named ``query`` (``index_add``, ``aten::index_add``): each
    kernel for the backend, and the device kernels and library calls below it."""
    found = lookup(index, query)
    if found.how not in ("op name", "op overloads", "Python name"):
        return 0
    ops = sorted(primary_order(found.ops), key=lambda op: not op.qualname.startswith("aten::"))
    ops = ops[:MAX_OPS]
    shown: set[int] = set()
    for op in ops:
        answer.items.append(Item(op.qualname, op.evidence, f"op ({op.attrs.get('source', 'op')})"))
        _op_items(index, op, backend, answer, shown, 1, follow=True)
    return len(ops)


def _op_items(
    index: Index,
    op: Node,
    backend: str | None,
    answer: Answer,
    shown: set[int],
    depth: int,
    follow: bool,
) -> None:
    for keys, kernel, registered, doubt in _op_implementations(index, op):
        composite = any(key.startswith("Composite") for key in keys)
        if keys == ["Meta"] or (
            backend and not composite and not any(key.lower() == backend for key in keys)
        ):
            continue
        label = f"{', '.join(keys)}: {kernel.qualname}"
        if kernel.id in shown:
            answer.items.append(Item(label, kernel.evidence, "as above", depth))
            continue
        shown.add(kernel.id)
        answer.items.append(
            Item(label, kernel.evidence, f"kernel; registered at {registered}{doubt}", depth)
        )
        _below(index, kernel, answer, depth + 1)
        if composite and follow:  # its work is done by the ops it calls
            for call in below_kernel.ops_called(index, [kernel.id])[:2]:
                detail = f"op called at {call.evidence}"
                answer.items.append(
                    Item(f"-> {call.op.qualname}", call.op.evidence, detail, depth + 1)
                )
                _op_items(index, call.op, backend, answer, shown, depth + 2, follow=False)


def _op_implementations(index: Index, op: Node) -> list[tuple[list[str], Node, str, str]]:
    """(keys, kernel, registered at, doubt) of an op, through its structured delegate;
    ``doubt``: what the text says when the kernel's name had several definitions."""
    found = []
    for hop in op_chain.dispatch_hops(index, op.id):
        if hop.node.kind == "op":
            found.extend(_op_implementations(index, hop.node))
        elif hop.node.kind == "registration":
            found.extend(
                (
                    op_chain.keys_of(inner.attrs) or hop.node.attrs.get("impl_keys") or [],
                    inner.node,
                    inner.evidence,
                    op_chain.ambiguity(inner.attrs),
                )
                for inner in op_chain.dispatch_hops(index, hop.node.id)
            )
        elif hop.node.kind in ("cpp_function", "cuda_kernel", "dispatch_stub"):
            keys = op_chain.keys_of(hop.attrs)
            found.append((keys, hop.node, hop.evidence, op_chain.ambiguity(hop.attrs)))
    usual = ("CPU", "CUDA")
    return sorted(found, key=lambda entry: not any(key in usual for key in entry[0]))


def _below(index: Index, function: Node, answer: Answer, depth: int) -> None:
    """What a kernel's host function leads to: stub kernels, launches, library calls."""
    hosts = [function.id]
    for stub in op_chain.stubs_called(index, [function.id]).hops:
        for kernel in op_chain.stub_kernels(index, stub.node):
            detail = f"registered for {stub.node.name} at {kernel.evidence}"
            answer.items.append(Item(kernel.node.qualname, kernel.node.evidence, detail, depth))
            hosts.append(kernel.node.id)
    for hop in op_chain.kernels_launched(index, hosts).hops[:12]:
        detail = f"CUDA kernel launched at {hop.evidence}"
        answer.items.append(Item(hop.node.qualname, hop.node.evidence, detail, depth))
    calls = [call for call in below_kernel.library_calls(index, hosts) if not call.setup]
    for call in calls[:3]:
        detail = f"{call.library} call at {call.evidence}"
        answer.items.append(
            Item(f"{call.library}: {call.name}", call.definition or call.evidence, detail, depth)
        )


def _host_kernels(index: Index, query: str, answer: Answer) -> int:
    """Items for C++ functions named ``query`` that launch kernels: what they launch."""
    hosts = [
        node
        for node in index.find(query, ["cpp_function"])
        if node.name == query or node.qualname == query or node.qualname.endswith(f"::{query}")
    ][:MAX_HOSTS]
    count = 0
    for host in hosts:
        launched = op_chain.kernels_launched(index, [host.id]).hops
        if not launched:
            continue
        count += 1
        answer.items.append(Item(host.qualname, host.evidence, "host function"))
        for hop in launched[:12]:
            detail = f"CUDA kernel launched at {hop.evidence}"
            answer.items.append(Item(hop.node.qualname, hop.node.evidence, detail, 1))
    return count
