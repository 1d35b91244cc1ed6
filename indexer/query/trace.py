"""trace: from a Python name or an op to the C++ and CUDA code that runs, with evidence.

The chain of one op, each hop with file:line:

    Python entries (torch.add, torch.Tensor.add, Python code naming the op)
    -> the op's entry (native_functions.yaml or the m.def / RegisterOperators site)
    -> its dispatch keys -> the C++ implementation per key (structured kernels through
       TORCH_IMPL_FUNC, delegates through structured_delegate, kernels registered from
       other files through m.impl)
    -> DispatchStubs the implementations call and the kernels registered for them
    -> CUDA kernels launched
    -> backward formulas (derivatives.yaml).

``focus`` narrows the answer: ``python``, ``dispatch``, ``stubs``, ``cuda``, ``backward``,
or a dispatch key (``CPU``, ``CUDA``, ``QuantizedCPU``...). An unknown name answers "not
found" with the closest known names; a dispatch target the index has no definition for is
listed as such, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from indexer.query import op_chain
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.query.op_lookup import lookup, primary_order

MAX_OPS = 6  # ops traced in full; the rest are listed
MAX_PYTHON_NAMES = 8
MAX_LISTED = 12  # kernels / formulas shown per hop
PARTS = ("python", "dispatch", "stubs", "cuda", "backward")
FOCUS_PARTS = {
    "python": {"python"},
    "dispatch": {"dispatch"},
    "stubs": {"dispatch", "stubs"},
    "kernels": {"dispatch", "stubs", "cuda"},
    "cuda": {"dispatch", "stubs", "cuda"},
    "backward": {"backward"},
}
_ROLES = {
    "meta": "meta function",
    "ufunc_stub": "DispatchStub called by the torchgen-generated CPU kernel",
    "ufunc_inner_loop": "ufunc inner loop, run by the torchgen-generated kernel",
}
_UFUNC_ROLES = ("ufunc_stub", "ufunc_inner_loop")


@dataclass
class _Focus:
    parts: set[str]
    key: str | None = None  # one dispatch key, when focus names one
    cuda_only: bool = False

    def wants_key(self, keys: list[str]) -> bool:
        if self.key is not None:
            return any(key.lower() == self.key.lower() for key in keys) or not keys
        if self.cuda_only:
            return any("CUDA" in key or "Composite" in key for key in keys) or not keys
        return True


def _focus(focus: str | None) -> _Focus:
    if focus is None or not focus.strip():
        return _Focus(set(PARTS))
    value = focus.strip()
    lowered = value.lower()
    if lowered in FOCUS_PARTS:
        return _Focus(set(FOCUS_PARTS[lowered]), cuda_only=lowered == "cuda")
    if value.replace("_", "").isalnum():  # a dispatch key
        return _Focus({"dispatch", "stubs", "cuda"}, key=value)
    raise ValueError(
        f"unknown focus {focus!r}: use one of {', '.join(FOCUS_PARTS)} or a dispatch key (CPU, CUDA, ...)"
    )


@dataclass
class _Trace:
    index: Index
    focus: _Focus
    answer: Answer
    visited: set[int] = field(default_factory=set)
    summary: list[dict[str, Any]] = field(default_factory=list)
    generated_stubs: dict[int, dict[str, Any]] = field(default_factory=dict)  # ufunc stubs

    def add(self, label: str, evidence: str | None, detail: str, depth: int, **data: Any) -> None:
        self.answer.items.append(Item(label, evidence, detail, depth, data))


def trace(index: Index, func: str, focus: str | None = None) -> Answer:
    if not func or not func.strip():
        raise ValueError("trace needs a name: torch.add, aten::add.Tensor, add or a C++ name")
    wanted = _focus(focus)
    found = lookup(index, func)
    if not found.ops and not found.bindings and not found.functions and not found.python:
        return Answer.not_found("trace", func, "Name", index.suggest(func))
    answer = Answer("trace", func)
    run = _Trace(index, wanted, answer)
    ops = primary_order(found.ops)
    what = f"{len(ops)} op{'s' if len(ops) != 1 else ''}" if ops else "no op"
    answer.title = f"trace {func} ({found.how}): {what}"
    if wanted.key or focus:
        answer.title += f", focus {focus.strip() if focus else ''}"
    for function in found.functions:
        detail = "C++ definition" + ("" if ops else "; no op dispatches to it")
        run.add(function.qualname, function.evidence, detail, 0, kind=function.kind)
        if not ops:
            _implementation_chain(run, [function], 1)
    for python in found.python:
        detail = "Python definition" + ("" if ops or found.bindings else "; names no op or binding")
        run.add(python.qualname, python.evidence, detail, 0, kind=python.kind)
        for node in [*ops, *found.bindings][:MAX_LISTED]:
            where = f"referenced here; {node.kind} at {node.evidence}"
            run.add(f"-> {node.qualname}", found.via.get(node.id), where, 1)
    for binding in found.bindings:
        _binding_chain(run, binding)
    for op in ops[:MAX_OPS]:
        if op.id not in run.visited:  # else traced in full above, as a delegate
            _op_chain(run, op, 0)
    if len(ops) > MAX_OPS:
        rest = ", ".join(op.qualname for op in ops[MAX_OPS:])
        answer.notes.append(f"{len(ops) - MAX_OPS} more ops match, not traced: {rest}")
    answer.data = {"ops": run.summary, "matched_by": found.how}
    return answer


def _binding_chain(run: _Trace, binding: Node) -> None:
    form = binding.attrs.get("form", "binding")
    run.add(binding.qualname, binding.evidence, f"Python binding ({form})", 0, kind="binding")
    for edge in run.index.out_edges(binding.id, ["binds"]):
        target = run.index.node(edge.dst)
        run.add(target.qualname, target.evidence, f"bound at {edge.evidence}", 1, kind=target.kind)
        if target.kind in ("cpp_function", "cuda_kernel"):
            _implementation_chain(run, [target], 2)
    for missing in op_chain.unresolved(run.index, binding.id, "binds"):
        run.add(
            missing.target, missing.evidence, "bound C++ callable: no definition in the index", 1
        )


def _op_chain(run: _Trace, op: Node, depth: int) -> None:
    index = run.index
    run.visited.add(op.id)
    record: dict[str, Any] = {"op": op.qualname, "entry": op.evidence, "dispatch": []}
    run.summary.append(record)
    schema = op.attrs.get("schema") or op.qualname
    source = op.attrs.get("source") or "op"
    run.add(op.qualname, op.evidence, f"op ({source})", depth, schema=schema)
    if "python" in run.focus.parts and depth == 0:
        names = [name for name in op.attrs.get("python_names") or [] if ".ops." not in name]
        ops_names = [name for name in op.attrs.get("python_names") or [] if ".ops." in name]
        shown = names[:MAX_PYTHON_NAMES] or ops_names[:2]
        if shown:
            run.add("Python: " + ", ".join(shown), op.evidence, "entry points", depth + 1)
        record["python"] = op.attrs.get("python_names") or []
        references, total = op_chain.python_references(index, op)
        for hop in references:
            run.add(hop.node.qualname, hop.evidence, "Python code naming the op", depth + 1)
        if total > len(references):
            run.add(f"... {total - len(references)} more Python references", None, "", depth + 1)
    if run.focus.parts & {"dispatch", "stubs", "cuda"}:
        _dispatch(run, op, depth + 1, record)
    if "backward" in run.focus.parts:
        _backward(run, op, depth + 1, record)


def _dispatch(run: _Trace, op: Node, depth: int, record: dict[str, Any]) -> None:
    index = run.index
    implementations: dict[int, tuple[Node, list[str]]] = {}
    found: list[Any] = []
    delegates = []
    for hop in op_chain.dispatch_hops(index, op.id):
        target = hop.node
        if target.kind == "op":
            delegates.append(hop)
        elif target.kind == "registration":
            for inner in op_chain.dispatch_hops(index, target.id):
                if not op_chain.keys_of(inner.attrs):
                    inner.attrs["keys"] = target.attrs.get("impl_keys") or []
                found.append(inner)
            found.extend(op_chain.unresolved(index, target.id))
        else:
            found.append(hop)
    found.extend(op_chain.unresolved(index, op.id))
    for hop, keys in op_chain.merge_keys(found):
        if isinstance(hop, op_chain.Hop):
            _implementation(run, hop, keys, depth, record, implementations)
        else:
            _missing(run, hop, keys, depth, record, implementations)
    _generated(run, found, depth, record)
    for hop in delegates:
        via = "structured_delegate" if hop.attrs.get("structured_delegate") else "autogen"
        run.add(f"{via} -> {hop.node.qualname}", hop.evidence, "delegates its kernels", depth)
        if hop.node.id not in run.visited:
            _op_chain(run, hop.node, depth + 1)
    if implementations and run.focus.parts & {"stubs", "cuda"}:
        nodes = [node for node, _ in implementations.values()]
        _implementation_chain(run, nodes, depth)


def _implementation(
    run: _Trace,
    hop: op_chain.Hop,
    keys: list[str],
    depth: int,
    record: dict[str, Any],
    implementations: dict[int, tuple[Node, list[str]]],
) -> None:
    if not run.focus.wants_key(keys):
        return
    target = hop.node
    role = _ROLES.get(hop.attrs.get("role", ""), "")
    if not role:
        role = "structured kernel (TORCH_IMPL_FUNC)" if hop.attrs.get("structured") else "kernel"
        if target.kind == "dispatch_stub":
            role = "DispatchStub"
    if hop.attrs.get("via") == "lambda":
        role += ", called from a registered lambda"
    if hop.attrs.get("ambiguous") and hop.attrs.get("role") == "ufunc_inner_loop":
        role += f"; one of {hop.attrs['ambiguous']} overloads (scalar / vectorized loops)"
    elif hop.attrs.get("ambiguous"):
        role += f"; ambiguous: one of {hop.attrs['ambiguous']} definitions of the name"
    if hop.attrs.get("role") == "ufunc_stub":
        run.generated_stubs[target.id] = hop.attrs
    label = f"{', '.join(keys) or '?'}: {target.qualname}"
    run.add(label, target.evidence, f"{role}; registered at {hop.evidence}", depth, keys=keys)
    record["dispatch"].append(
        {
            "keys": keys,
            "target": target.qualname,
            "kind": target.kind,
            "definition": target.evidence,
            "registered_at": hop.evidence,
            "ambiguous": bool(hop.attrs.get("ambiguous")),
            "role": hop.attrs.get("role")
            or ("structured" if hop.attrs.get("structured") else "kernel"),
        }
    )
    previous = implementations.get(target.id)
    implementations[target.id] = (target, sorted(set(keys) | set(previous[1] if previous else [])))


def _missing(
    run: _Trace,
    missing: op_chain.Unresolved,
    keys: list[str],
    depth: int,
    record: dict[str, Any],
    implementations: dict[int, tuple[Node, list[str]]],
) -> None:
    if not run.focus.wants_key(keys):
        return
    label = f"{', '.join(keys) or '?'}: {missing.target}"
    candidates = op_chain.same_name(run.index, missing.target)
    detail = "no definition found in the index"
    if missing.attrs.get("role") == "ufunc_stub":
        files = missing.attrs.get("generated_files") or ["ufunc files"]
        detail = f"not declared in the source: torchgen declares it in the generated {files[0]}"
    elif keys and all(key.startswith("MPS") for key in keys):
        detail += " (MPS kernels are Objective-C++ .mm files, which are not indexed)"
    if candidates:
        detail = "not linked by C++ scope rules; definitions of that name below"
    run.add(label, missing.evidence, detail, depth, keys=keys)
    for candidate in candidates:
        run.add(candidate.qualname, candidate.evidence, "candidate (same name)", depth + 1)
    record["dispatch"].append(
        {
            "keys": keys,
            "target": missing.target,
            "definition": None,
            "candidates": [candidate.evidence for candidate in candidates],
            "registered_at": missing.evidence,
        }
    )
    if len(candidates) == 1:  # follow a unique candidate, said to be one above
        implementations.setdefault(candidates[0].id, (candidates[0], keys))


def _generated(run: _Trace, found: list[Any], depth: int, record: dict[str, Any]) -> None:
    """Say plainly which kernels of the op torchgen generates from ``ufunc_inner_loop``:
    they are not in the source, so the chain goes through what is (stub, inner loops)."""
    generated: dict[str, dict[str, Any]] = {}
    for hop in found:
        attrs = hop.attrs
        if attrs.get("role") not in _UFUNC_ROLES or not attrs.get("generated"):
            continue
        for key in op_chain.keys_of(attrs):
            if not run.focus.wants_key([key]):
                continue
            entry = generated.setdefault(
                key,
                {
                    "kernel": attrs["generated"],
                    "files": attrs.get("generated_files") or [],
                    "via": attrs.get("generated_via"),
                    "evidence": hop.evidence,
                },
            )
            entry["via"] = entry["via"] or attrs.get("generated_via")
    for key, entry in generated.items():
        files = ", ".join(entry["files"]) or "generated files"
        chain = f"; {entry['via']} -> the ufunc inner loops" if entry["via"] else ""
        run.add(
            f"{key}: TORCH_IMPL_FUNC({entry['kernel']}) is generated by torchgen",
            entry["evidence"],
            f"from ufunc_inner_loop into {files}, not in the source{chain}",
            depth,
            keys=[key],
        )
    if generated:
        record["generated"] = generated


def _implementation_chain(run: _Trace, functions: list[Node], depth: int) -> None:
    index = run.index
    ids = [node.id for node in functions]
    stub_ids = [node.id for node in functions if node.kind == "dispatch_stub"]
    kernels: list[op_chain.Hop] = []
    if "stubs" in run.focus.parts:
        reach = op_chain.stubs_called(index, [i for i in ids if i not in stub_ids])
        stubs = [(hop.node, hop) for hop in reach.hops]
        stubs.extend((node, None) for node in functions if node.kind == "dispatch_stub")
        for stub, hop in _unique_nodes(stubs):
            registered = op_chain.stub_kernels(index, stub)
            if hop is not None:
                run.add(
                    stub.qualname, stub.evidence, f"DispatchStub, called at {hop.evidence}", depth
                )
            generated = run.generated_stubs.get(stub.id)
            if not registered and generated:
                files = generated.get("generated_files") or []
                kernel = generated.get("generated_kernel") or "its kernel"
                run.add(
                    f"REGISTER_DISPATCH({stub.name}, &{kernel}) is generated by torchgen",
                    stub.evidence,
                    f"in {files[-1] if files else 'a generated file'}, not in the source; "
                    f"{kernel} runs the ufunc inner loops listed above",
                    depth + 1,
                )
            elif not registered:
                run.add(
                    f"no REGISTER_DISPATCH for {stub.name} in the source",
                    stub.evidence,
                    "its kernels are generated at build time or registered elsewhere",
                    depth + 1,
                )
            for kernel in registered[:MAX_LISTED]:
                if run.focus.cuda_only and not _is_cuda(kernel):
                    continue
                kernels.append(kernel)
                macro = kernel.attrs.get("macro") or "registered"
                run.add(
                    kernel.node.qualname,
                    kernel.node.evidence,
                    f"{_backend(kernel)} kernel, {macro} at {kernel.evidence}",
                    depth + 1,
                )
        if reach.truncated:
            run.answer.notes.append("stub search stopped at its node budget; more may exist")
    if "cuda" in run.focus.parts:
        hosts = [i for i in ids if i not in stub_ids] + [hop.node.id for hop in kernels]
        launched = op_chain.kernels_launched(index, hosts)
        for hop in launched.hops[:MAX_LISTED]:
            run.add(
                hop.node.qualname,
                hop.node.evidence,
                f"CUDA kernel launched at {hop.evidence}",
                depth,
                launched_from=index.node(hop.attrs["from"]).qualname,
            )
        if len(launched.hops) > MAX_LISTED:
            run.answer.notes.append(
                f"{len(launched.hops) - MAX_LISTED} more CUDA kernels not shown"
            )
        if launched.truncated:
            run.answer.notes.append("kernel search stopped at its node budget; more may exist")
        if run.summary:
            run.summary[-1].setdefault("cuda_kernels", []).extend(
                {
                    "kernel": hop.node.qualname,
                    "definition": hop.node.evidence,
                    "launch": hop.evidence,
                }
                for hop in launched.hops
            )


def _unique_nodes(pairs: list[tuple[Node, Any]]) -> list[tuple[Node, Any]]:
    seen: dict[int, tuple[Node, Any]] = {}
    for node, hop in pairs:
        seen.setdefault(node.id, (node, hop))
    return list(seen.values())


def _is_cuda(hop: op_chain.Hop) -> bool:
    return hop.path.endswith((".cu", ".cuh")) or "/cuda/" in hop.path


def _backend(hop: op_chain.Hop) -> str:
    if _is_cuda(hop):
        return "CUDA"
    if "/cpu/" in hop.path:
        return "CPU"
    return hop.attrs.get("key") or "registered"


def _backward(run: _Trace, op: Node, depth: int, record: dict[str, Any]) -> None:
    entries = op_chain.backward_entries(run.index, op)
    for entry in entries:
        formulas = entry.attrs.get("formulas") or {}
        run.add(entry.qualname, entry.evidence, "backward formulas (derivatives.yaml)", depth)
        for name, formula in list(formulas.items())[:MAX_LISTED]:
            run.add(f"{name}: {formula}", None, "", depth + 1)
        record.setdefault("backward", []).append({"entry": entry.evidence, "formulas": formulas})
