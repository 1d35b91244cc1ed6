"""trace: from a Python name or an op to the C++ and CUDA code that runs, with evidence.

The chain of one op, each hop with file:line:

    Python entries (torch.add, torch.Tensor.add, Python code naming the op)
    -> the op's entry (native_functions.yaml or the m.def / RegisterOperators site)
    -> its dispatch keys -> the C++ implementation per key (structured kernels through
       TORCH_IMPL_FUNC, delegates through structured_delegate, kernels registered from
       other files through m.impl)
    -> DispatchStubs the implementations call and the kernels registered for them
    -> CUDA kernels launched, and library calls (cuBLAS, cuDNN, MKL, oneDNN...)
    -> for a composite kernel (or one that only forwards), the ops it calls, traced on
       the same way for the backend asked (indexer/query/below_kernel.py)
    -> backward formulas (derivatives.yaml).

Python code naming the op is counted, and listed with ``focus="python"``.

``focus`` narrows the answer: ``python``, ``dispatch``, ``stubs``, ``cuda``, ``backward``,
or a dispatch key (``CPU``, ``CUDA``, ``QuantizedCPU``...). An unknown name answers "not
found" with the closest known names; a dispatch target the index has no definition for is
listed as such, never dropped.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from indexer.query import below_kernel, key_coverage, op_chain, trace_order
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.query.op_lookup import lookup, primary_order
from indexer.query.py_lookup import ASSIGNMENT
from indexer.query.registry_answer import (
    BRIEF_TESTS,
    entries_named,
    entries_of,
    registry_answer,
    registry_items,
)

MAX_OPS = 6  # ops traced in full; the rest are listed
MAX_PYTHON_NAMES = 8
# Python code naming an op that has no public name (torch.X) shown unasked: for an
# extension's op (vLLM's torch.ops._C.X) its wrappers are how Python reaches it.
MAX_UNNAMED_REFERENCES = 3
MAX_NAMED = 3  # ops a Python definition names, listed before their chains
MAX_LISTED = 12  # kernels / formulas shown per hop
MAX_BACKWARD_OPS = 2  # backward ops of one derivatives.yaml entry traced to their kernels
MAX_FOLLOWED = 4  # ops a composite kernel calls that are traced on
MAX_LIBRARY_CALLS = 4
MAJOR_LAUNCHES = 2  # launches / library calls per kernel the text keeps before minor lines
MAX_FOLLOW_DEPTH = 6  # indentation past which called ops are listed, not traced
MAX_TRACED_CALLS = 6  # called ops traced on in one answer; the rest are listed
MAX_UNRESOLVED_FOLLOWED = 8  # untyped method calls of a host followed by name to launches
CUDA_LIBRARIES = frozenset(
    {
        "cuBLAS",
        "cuBLASLt",
        "cuDNN",
        "cuSOLVER",
        "cuSOLVER/cuBLAS",
        "cuSPARSE",
        "cuFFT",
        "cuRAND",
        "MAGMA",
        "MIOpen",
        "hipBLAS",
        "rocBLAS",
    }
)
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
        if self.key is not None:  # a composite kernel runs on every backend
            wanted = self.key.lower()
            return not keys or any(k.lower() == wanted or "Composite" in k for k in keys)
        if self.cuda_only:  # dense CUDA: SparseCUDA, NestedTensorCUDA... are asked by key
            return any(key == "CUDA" or "Composite" in key for key in keys) or not keys
        return True

    @property
    def cpu_only(self) -> bool:
        return self.key is not None and self.key.lower() == "cpu"

    @property
    def backend(self) -> bool:
        """Whether the focus names a backend (``cuda``, a dispatch key)."""
        return self.cuda_only or self.key is not None

    def wants_library(self, library: str) -> bool:
        if self.cuda_only or (self.key and "cuda" in self.key.lower()):
            return library in CUDA_LIBRARIES
        if self.key and self.key.lower() == "cpu":
            return library not in CUDA_LIBRARIES
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
    dispatched: set[int] = field(default_factory=set)  # ops whose dispatch is listed
    summary: list[dict[str, Any]] = field(default_factory=list)
    generated_stubs: dict[int, dict[str, Any]] = field(default_factory=dict)  # ufunc stubs
    shown: set[int] = field(default_factory=set)  # implementations listed
    followed: int = 0  # ops traced on from the kernels calling them
    nested: int = 0  # how many called ops deep the trace is

    def add(
        self,
        label: str,
        evidence: str | None,
        detail: str,
        depth: int,
        minor: bool = False,
        **data: Any,
    ) -> None:
        """One line; ``minor`` lines (indirections, counts, mentions) are the first the
        text leaves out when over its budget (Answer.to_text)."""
        if minor:
            data["minor"] = True
        self.answer.items.append(Item(label, evidence, detail, depth, data))


def trace(index: Index, func: str, focus: str | None = None) -> Answer:
    if not func or not func.strip():
        raise ValueError("trace needs a name: torch.add, aten::add.Tensor, add or a C++ name")
    wanted = _focus(focus)
    if wanted.key is not None:
        _known_key(index, wanted.key)
    found = lookup(index, func)
    if not found.ops and not found.bindings and not found.functions and not found.python:
        registered = registry_answer("trace", index, func.strip())
        if registered is not None:  # an architecture, a quantization method, a model id
            return registered
        return Answer.not_found("trace", func, "Name", index.suggest(func))
    answer = Answer("trace", func)
    run = _Trace(index, wanted, answer)
    ops = primary_order(found.ops)
    if found.python:
        ops = trace_order.by_relevance(ops, [python.name for python in found.python])
    what = f"{len(ops)} op{'s' if len(ops) != 1 else ''}" if ops else "no op"
    answer.title = f"trace {func} ({found.how}): {what}"
    if wanted.key or focus:
        answer.title += f", focus {focus.strip() if focus else ''}"
    if found.functions and ops:  # "which Python APIs reach this": the answer, first
        _python_apis(run, ops)
    for function in found.functions:
        detail = "C++ definition" + ("" if ops else "; no op dispatches to it")
        run.add(function.qualname, function.evidence, detail, 0, kind=function.kind)
        if not ops:
            _implementation_chain(run, [function], 1)
    for python in found.python:
        what = "bound by assignment" if python.kind == ASSIGNMENT else "Python definition"
        detail = what + ("" if ops or found.bindings else "; names no op or binding")
        run.add(python.qualname, python.evidence, detail, 0, kind=python.kind)
        named = [*ops, *found.bindings]
        for node in named[:MAX_NAMED]:
            where = f"referenced here; {node.kind} at {node.evidence}"
            run.add(f"-> {node.qualname}", found.via.get(node.id), where, 1, minor=True)
        if len(named) > MAX_NAMED:
            rest = ", ".join(node.qualname for node in named[MAX_NAMED:])
            run.add(f"also names {rest}", None, "", 1, minor=True)
    for binding in found.bindings:
        _binding_chain(run, binding)
    for op in ops[:MAX_OPS]:
        if op.id in run.visited:  # traced in full above, as a delegate
            continue
        same = _same_kernels(run, op)
        if same is not None:  # an overload of one traced above, with nothing new
            run.add(op.qualname, op.evidence, f"same kernels as {same} above", 0)
            continue
        before = len(answer.items)
        _op_chain(run, op, 0)
        if wanted.key is not None and not _shows_key(answer.items[before:], wanted.key):
            # never a silent empty answer: say why the key has nothing for this op
            why = key_coverage.why_none(index, wanted.key, op.qualname)
            run.add(f"{wanted.key}: nothing registered for {op.qualname}", None, why, 1)
    if len(ops) > MAX_OPS:
        rest = ", ".join(op.qualname for op in ops[MAX_OPS:])
        answer.notes.append(f"{len(ops) - MAX_OPS} more ops match, not traced: {rest}")
    answer.items += _registered(index, func.strip(), found.python)
    answer.data = {"ops": run.summary, "matched_by": found.how}
    answer.more = "focus='cuda', 'CPU' (a dispatch key), 'python' or 'backward' narrows it; limit=N shows N lines"
    return answer


def _registered(index: Index, name: str, python: list[Node]) -> list[Item]:
    """Where a traced class, or the name, is a registry entry: the module and class it
    loads and the tests that load it (indexer/query/registry_answer.py)."""
    entries = entries_named(index, name)
    for node in python:
        entries += entries_of(index, node)
    unique = list({entry.id: entry for entry in entries}.values())
    return registry_items(index, unique, max_tests=BRIEF_TESTS, first=name)


def _python_apis(run: _Trace, ops: list[Node]) -> None:
    """One line naming the public Python names of the ops reaching a C++ function, and of
    the ops delegating their kernels to those (``add.Tensor`` -> ``add.out``), the most
    public first (``torch.X`` before ``torch.Tensor.X``); ``torch.ops`` spellings only
    when nothing else reaches it. The names are the index's: for a harness of several
    packages they include spellings the other packages may not bind (issue 37, open)."""
    names: list[str] = []
    through: list[str] = []
    for op in ops[:MAX_OPS]:
        delegating = [
            run.index.node(edge.src)
            for edge in run.index.in_edges(op.id, ["dispatches"])
            if run.index.node(edge.src).kind == "op"
        ]
        for node in (op, *delegating):
            spelled = node.attrs.get("python_names") or []
            if spelled and node.qualname not in through:
                through.append(node.qualname)
            names.extend(spelled)
    public = [name for name in dict.fromkeys(names) if ".ops." not in name]
    # stable: the index lists an op's own package's spelling first (torch.min)
    shown = sorted(public, key=lambda name: (name.count("."), ".Tensor." in name))
    shown = shown or list(dict.fromkeys(names))[:2]
    if not shown:
        return
    more = f" and {len(shown) - MAX_PYTHON_NAMES} more" if len(shown) > MAX_PYTHON_NAMES else ""
    label = "Python APIs reaching it: " + ", ".join(shown[:MAX_PYTHON_NAMES]) + more
    run.add(label, None, "through " + ", ".join(through[:4]), 0, python_names=shown)


def _known_key(index: Index, key: str) -> None:
    """A dispatch key the index has nothing for is a typo or another tree's: say so, rather
    than answer as if the op had no kernel for it."""
    if key.lower() in op_chain.dispatch_keys(index):
        return
    known = op_chain.dispatch_keys(index) | op_chain.dispatch_keys(index, edges=True)
    if key.lower() in known:
        return
    close = difflib.get_close_matches(key.lower(), sorted(known), n=3, cutoff=0.6)
    hint = f" (closest: {', '.join(close)})" if close else ""
    raise ValueError(
        f"the index holds no kernel or registration for dispatch key {key!r}{hint}: a"
        " misspelling, or registrations made through macros the harness does not name"
        f" ([bindings] impl_macros); focus also takes {', '.join(FOCUS_PARTS)}"
    )


def _shows_key(items: list[Item], key: str) -> bool:
    """Whether lines of an op's chain name a kernel or registration for exactly ``key``."""
    wanted = key.lower()
    return any(
        any(str(shown).lower() == wanted for shown in item.data.get("keys") or []) for item in items
    )


def _same_kernels(run: _Trace, op: Node) -> str | None:
    """The op traced above that an overload of the same name shares every dispatch target
    with (``aten::nll_loss.out`` after ``aten::nll_loss``), if any: merged into one line."""
    traced = [
        record["op"]
        for record in run.summary
        if record["op"].split(".")[0] == op.qualname.split(".")[0]
    ]
    if not traced:
        return None
    targets = {hop.node.id for hop in op_chain.dispatch_hops(run.index, op.id)}
    if targets and targets <= run.shown | run.visited:
        return traced[0]
    return None


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


def _op_chain(run: _Trace, op: Node, depth: int, called_at: str | None = None) -> None:
    index = run.index
    run.visited.add(op.id)
    record: dict[str, Any] = {"op": op.qualname, "entry": op.evidence, "dispatch": []}
    if called_at:
        record["called_at"] = called_at
    run.summary.append(record)
    schema = op.attrs.get("schema") or op.qualname
    source = op.attrs.get("source") or "op"
    if called_at:
        run.add(f"-> {op.qualname}", op.evidence, f"op called at {called_at}", depth, schema=schema)
    else:
        # the op a delegate leads to: its kernels below say more than its line
        run.add(op.qualname, op.evidence, f"op ({source})", depth, schema=schema, minor=depth > 0)
    if "python" in run.focus.parts and depth == 0:
        names = [name for name in op.attrs.get("python_names") or [] if ".ops." not in name]
        ops_names = [name for name in op.attrs.get("python_names") or [] if ".ops." in name]
        shown = names[:MAX_PYTHON_NAMES] or ops_names[:2]
        if shown:
            run.add(
                "Python: " + ", ".join(shown), op.evidence, "entry points", depth + 1, minor=True
            )
        record["python"] = op.attrs.get("python_names") or []
        listed = run.focus.parts == {"python"}
        limit = 10 if listed else 0 if names else MAX_UNNAMED_REFERENCES
        references, total = op_chain.python_references(index, op, limit=limit)
        for hop in references:
            run.add(hop.node.qualname, hop.evidence, "Python code naming the op", depth + 1)
        if total > len(references):
            more = "more " if references else ""
            how = "" if listed else " (focus='python' lists them)"
            text = f"{total - len(references)} {more}Python references{how}"
            run.add(text, None, "", depth + 1, minor=True)
    if run.focus.parts & {"dispatch", "stubs", "cuda"}:
        run.nested += bool(called_at)
        try:
            _dispatch(run, op, depth + 1, record)
        finally:
            run.nested -= bool(called_at)
    if "backward" in run.focus.parts:
        _backward(run, op, depth + 1, record)


def _dispatch(run: _Trace, op: Node, depth: int, record: dict[str, Any]) -> None:
    index = run.index
    run.dispatched.add(op.id)
    implementations: dict[int, tuple[Node, list[str]]] = {}
    found: list[Any] = []
    delegates = []
    bare: list[op_chain.Hop] = []  # registrations naming no kernel: fallthroughs, boxed
    for hop in op_chain.dispatch_hops(index, op.id):
        target = hop.node
        if target.kind == "op":
            delegates.append(hop)
        elif target.kind == "registration":
            inner_hops = op_chain.dispatch_hops(index, target.id)
            for inner in inner_hops:
                if not op_chain.keys_of(inner.attrs):
                    inner.attrs["keys"] = target.attrs.get("impl_keys") or []
                found.append(inner)
            missing = op_chain.unresolved(index, target.id)
            found.extend(missing)
            if not inner_hops and not missing:
                bare.append(hop)
        else:
            found.append(hop)
    found.extend(op_chain.unresolved(index, op.id))
    entries = sorted(op_chain.merge_keys(trace_order.fitting(op, found)), key=trace_order.key_rank)
    usual = [
        entry for entry in entries if trace_order.key_rank(entry) < (0, len(trace_order.USUAL_KEYS))
    ]
    # CPU, CUDA and composite kernels, then the delegate holding them (add.Tensor's are
    # add.out's), then the other backends' (Vulkan, sparse, nested...).
    for hop, keys in usual:
        _entry(run, hop, keys, depth, record, implementations)
    _bare_registrations(run, bare, depth, record)
    _generated(run, found, depth, record)
    for hop in delegates:
        via = "structured_delegate" if hop.attrs.get("structured_delegate") else "autogen"
        detail = "delegates its kernels"
        run.add(f"{via} -> {hop.node.qualname}", hop.evidence, detail, depth, minor=True)
        if hop.node.id not in run.visited:
            _op_chain(run, hop.node, depth + 1)
    for hop, keys in entries[len(usual) :]:
        _entry(run, hop, keys, depth, record, implementations)
    if implementations and run.focus.parts & {"stubs", "cuda"}:
        nodes = [node for node, _ in implementations.values()]
        _implementation_chain(run, nodes, depth)
    if implementations and "dispatch" in run.focus.parts:
        _follow_calls(run, op, list(implementations.values()), depth, record)


def _bare_registrations(
    run: _Trace, bare: list[op_chain.Hop], depth: int, record: dict[str, Any]
) -> None:
    """Registrations for the dispatch key asked that name no kernel function (Named's
    ``CppFunction::makeFallthrough()``): the registration line is the answer."""
    if run.focus.key is None:
        return  # unasked, they would crowd every trace (hundreds of ops fall through Named)
    wanted = run.focus.key.lower()
    for hop in bare:
        keys = hop.node.attrs.get("impl_keys") or []
        if not any(key.lower() == wanted for key in keys):
            continue
        attrs = hop.node.attrs
        detail = "registered with no kernel function of its own (a fallthrough or boxed kernel)"
        if attrs.get("via"):  # written through a macro: its kernel is the macro's own
            detail = (
                f"registered by the macro {attrs['via']}, naming no kernel function of the tree"
                " (a template instance, boxed or fallthrough kernel)"
            )
        if attrs.get("listed_at"):
            detail += f"; list entry at {attrs['listed_at']}"
        label = f"{', '.join(keys)}: {hop.node.qualname}"
        run.add(label, hop.node.evidence, detail, depth, keys=keys)
        record["dispatch"].append(
            {"keys": keys, "registered": hop.node.evidence, "listed_at": attrs.get("listed_at")}
        )


def _follow_calls(
    run: _Trace,
    op: Node,
    implementations: list[tuple[Node, list[str]]],
    depth: int,
    record: dict[str, Any],
) -> None:
    """Trace on the ops a composite kernel calls, or a kernel that only forwards (it
    reaches no stub, launch or library call itself): that is where the work is done."""
    index = run.index
    implicit = not (op.attrs.get("dispatch") or {})
    backend = run.focus.backend
    for node, keys in implementations:
        composite = implicit or any(key.startswith("Composite") for key in keys)
        if not composite and (not backend or _does_work(index, node)):
            continue
        calls = [
            call for call in below_kernel.ops_called(index, [node.id]) if _serves(run, call.op)
        ]
        # Ops with a kernel of their own for the backend first; among them, those whose
        # kernel is a vendor library's (cudnn_convolution among _convolution's paths).
        calls.sort(
            key=lambda call: (not _has_own_kernel(run, call.op), not _library_backed(run, call.op))
        )
        record.setdefault("calls_ops", []).extend(
            {"from": node.qualname, "op": call.op.qualname, "called_at": call.evidence}
            for call in calls
        )
        for call in calls[:MAX_FOLLOWED]:
            if not backend:  # listed: a backend in focus traces them on
                where = f"op called at {call.evidence}; focus='CUDA' or 'CPU' traces it on"
                run.add(f"-> {call.op.qualname}", call.op.evidence, where, depth + 1)
                continue
            if (
                call.op.id in run.visited
                or depth + 1 > MAX_FOLLOW_DEPTH
                or run.followed >= MAX_TRACED_CALLS
            ):
                detail = f"op called at {call.evidence}; " + (
                    "traced above"
                    if call.op.id in run.visited
                    else f"trace {call.op.qualname} for its kernels"
                )
                run.add(f"-> {call.op.qualname}", call.op.evidence, detail, depth + 1)
                continue
            run.followed += 1
            _op_chain(run, call.op, depth + 1, called_at=call.evidence)
        if len(calls) > MAX_FOLLOWED:
            rest = ", ".join(call.op.qualname for call in calls[MAX_FOLLOWED:])
            text = f"{len(calls) - MAX_FOLLOWED} more ops called: {rest}"
            run.add(text, None, "", depth + 1, minor=True)


def _does_work(index: Index, node: Node) -> bool:
    """Whether a kernel reaches a stub, a CUDA kernel or a library call itself."""
    return bool(
        op_chain.stubs_called(index, [node.id]).hops
        or op_chain.kernels_launched(index, [node.id]).hops
        or below_kernel.library_calls(index, [node.id])
    )


def _serves(run: _Trace, op: Node) -> bool:
    """Whether an op called by a kernel can run on the backend asked: it has a kernel for
    it, or no dispatch table (a composite, or a structured delegate)."""
    table = op.attrs.get("dispatch") or {}
    return not table or run.focus.wants_key(list(table))


def _library_backed(run: _Trace, op: Node) -> bool:
    """Whether a kernel of ``op`` for the backend asked is PyTorch's integration of a
    vendor library (cuDNN, MIOpen, oneDNN, MKL...), by the file defining it."""
    if not run.focus.backend:
        return False
    return any(
        run.focus.wants_key(op_chain.keys_of(hop.attrs))
        and below_kernel.library_of_path(hop.node.path) is not None
        for hop in op_chain.dispatch_hops(run.index, op.id)
    )


def _has_own_kernel(run: _Trace, op: Node) -> bool:
    table = op.attrs.get("dispatch") or {}
    if not table:
        return bool(op.attrs.get("structured_delegate"))
    return any(not key.startswith("Composite") for key in table if run.focus.wants_key([key]))


def _entry(
    run: _Trace,
    hop: Any,
    keys: list[str],
    depth: int,
    record: dict[str, Any],
    implementations: dict[int, tuple[Node, list[str]]],
) -> None:
    if isinstance(hop, op_chain.Hop):
        _implementation(run, hop, keys, depth, record, implementations)
    else:
        _missing(run, hop, keys, depth, record, implementations)


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
    role += op_chain.ambiguity(hop.attrs)
    if hop.attrs.get("role") == "ufunc_stub":
        run.generated_stubs[target.id] = hop.attrs
    label = f"{', '.join(keys) or '?'}: {target.qualname}"
    # Below a called op the registration site is in the data: the line is the kernel.
    detail = role if run.nested else f"{role}; registered at {hop.evidence}"
    if hop.attrs.get("listed_at") and not run.nested:
        detail += f" (list entry at {hop.attrs['listed_at']})"
    run.add(label, target.evidence, detail, depth, keys=keys, registered_at=hop.evidence)
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
    run.shown.add(target.id)
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
    detail = f"no definition in the index (searched {op_chain.searched_for(missing.target)})"
    if missing.attrs.get("role") == "ufunc_stub":
        files = missing.attrs.get("generated_files") or ["ufunc files"]
        detail = f"not declared in the source: torchgen declares it in the generated {files[0]}"
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
            if hop is not None and not _serves_backend(run, registered):
                continue  # a CPU-only stub in a CUDA trace (or the reverse) is not the way
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
                if (run.focus.cuda_only and not _is_cuda(kernel)) or (
                    run.focus.cpu_only and _is_cuda(kernel)
                ):
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
    if "cuda" in run.focus.parts and not run.focus.cpu_only:
        hosts = [i for i in ids if i not in stub_ids] + [hop.node.id for hop in kernels]
        launched = op_chain.kernels_launched(index, hosts)
        for position, hop in enumerate(launched.hops[:MAX_LISTED]):
            run.add(
                hop.node.qualname,
                hop.node.evidence,
                f"CUDA kernel launched at {hop.evidence}",
                depth,
                launched_from=index.node(hop.attrs["from"]).qualname,
                minor=position >= MAJOR_LAUNCHES,
            )
        if not launched.hops and (run.focus.cuda_only or (run.focus.key or "").lower() == "cuda"):
            _possible_launches(run, hosts, depth)  # asked for CUDA kernels: none resolved
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
        _libraries(run, [*ids, *(hop.node.id for hop in kernels)], depth)


def _possible_launches(run: _Trace, hosts: list[int], depth: int) -> None:
    """Kernels behind a host's method call the linker could not resolve, the receiver's
    type unknown (``auto fa = reinterpret_cast<T*>(p); fa->reduce_scatter<float>(...)``),
    where that method name has one definition in the index: listed as possible, with the
    call they hang on, when the resolved walk found no launch at all."""
    asked: set[str] = set()
    for host in hosts:
        for missing in op_chain.unresolved(run.index, host, "calls"):
            if not missing.attrs.get("member") or missing.attrs.get("receiver"):
                continue
            if missing.target in asked or len(asked) >= MAX_UNRESOLVED_FOLLOWED:
                continue
            asked.add(missing.target)
            candidates = op_chain.same_name(run.index, missing.target, limit=2)
            if len(candidates) != 1 or candidates[0].id in hosts:
                continue
            method = candidates[0]
            launched = op_chain.kernels_launched(run.index, [method.id])
            for position, hop in enumerate(launched.hops[:MAX_LISTED]):
                run.add(
                    hop.node.qualname,
                    hop.node.evidence,
                    f"possible CUDA kernel: launched at {hop.evidence} by {method.qualname},"
                    f" the one definition of the unresolved call '{missing.target}' at"
                    f" {missing.evidence}",
                    depth,
                    launched_from=method.qualname,
                    minor=position >= MAJOR_LAUNCHES,
                )


def _libraries(run: _Trace, function_ids: list[int], depth: int) -> None:
    """Library calls (cuBLAS, cuDNN, MKL, oneDNN...) the implementations reach, for the
    backend asked, each with its call site."""
    calls = [
        call
        for call in below_kernel.library_calls(run.index, function_ids)
        if run.focus.wants_library(call.library)
    ]
    work = [call for call in calls if not call.setup]
    calls = work or calls  # set-up calls (cudnnSetStream) only when nothing else is found
    for position, call in enumerate(calls[:MAX_LIBRARY_CALLS]):
        where = f"{call.library} call at {call.evidence}"
        if call.definition == call.evidence:  # the kernel itself
            where = f"the kernel is PyTorch's {call.library} integration"
        elif call.definition:
            where += f"; PyTorch's {call.library} wrapper"
        evidence = call.definition or call.evidence
        minor = position >= MAJOR_LAUNCHES
        run.add(f"{call.library}: {call.name}", evidence, where, depth, minor=minor)
    if len(calls) > MAX_LIBRARY_CALLS:
        rest = ", ".join(call.name for call in calls[MAX_LIBRARY_CALLS:][:6])
        text = f"{len(calls) - MAX_LIBRARY_CALLS} more library calls: {rest}"
        run.add(text, None, "", depth, minor=True)
    if run.summary and calls:
        run.summary[-1].setdefault("library_calls", []).extend(
            {
                "library": call.library,
                "name": call.name,
                "call_site": call.evidence,
                "definition": call.definition,
            }
            for call in calls
        )


def _serves_backend(run: _Trace, registered: list[op_chain.Hop]) -> bool:
    """Whether a stub some kernel calls has a kernel for the backend focus asks."""
    if run.focus.cuda_only:
        return any(_is_cuda(kernel) for kernel in registered)
    if run.focus.cpu_only:
        return any(not _is_cuda(kernel) for kernel in registered)
    return True


def _unique_nodes(pairs: list[tuple[Node, Any]]) -> list[tuple[Node, Any]]:
    seen: dict[int, tuple[Node, Any]] = {}
    for node, hop in pairs:
        seen.setdefault(node.id, (node, hop))
    return list(seen.values())


def _is_cuda(hop: op_chain.Hop) -> bool:
    return hop.path.endswith((".cu", ".cuh")) or "/cuda/" in hop.path


_backend = op_chain.backend_of


def _backward(run: _Trace, op: Node, depth: int, record: dict[str, Any]) -> None:
    entries = op_chain.backward_entries(run.index, op)
    for entry in entries:
        formulas = entry.attrs.get("formulas") or {}
        run.add(entry.qualname, entry.evidence, "backward formulas (derivatives.yaml)", depth)
        for name, formula in list(formulas.items())[:MAX_LISTED]:
            run.add(f"{name}: {formula}", None, "", depth + 1, minor=True)
        record.setdefault("backward", []).append({"entry": entry.evidence, "formulas": formulas})
        for hop in op_chain.formula_ops(run.index, entry)[:MAX_BACKWARD_OPS]:
            _backward_op(run, hop, depth + 1)
    for hop in op_chain.calling_formulas(run.index, op)[:MAX_LISTED]:
        forward = ", ".join(
            run.index.node(edge.dst).qualname
            for edge in run.index.out_edges(hop.node.id, ["derives"])
        )
        detail = f"backward formula of {forward or hop.node.qualname} calls it"
        run.add(hop.node.qualname, hop.evidence, detail, depth)
        record.setdefault("backward_of", []).append(hop.evidence)


def _backward_op(run: _Trace, hop: op_chain.Hop, depth: int) -> None:
    """A backward op a formula calls; with focus='backward' its kernels too (the question
    is where the gradient is computed)."""
    op = hop.node
    run.add(f"-> {op.qualname}", op.evidence, f"backward op, called at {hop.evidence}", depth)
    # The op traced may be the one its own formula calls (elu_backward's double backward
    # calls elu_backward): with focus='backward' its kernels were not listed yet.
    if run.focus.parts != {"backward"} or op.id in run.dispatched:
        return
    run.visited.add(op.id)
    record: dict[str, Any] = {"op": op.qualname, "entry": op.evidence, "dispatch": []}
    focus, run.focus = run.focus, _Focus({"dispatch"})
    try:
        _dispatch(run, op, depth + 1, record)
    finally:
        run.focus = focus
