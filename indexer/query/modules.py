"""modules: the Python side of a framework, a class or module at a time.

- ``mode="trace"``: a class (bases, methods with signatures and file:line; ``focus="full"``
  adds docstrings), a function (what it calls into: ops, bindings, Python), or a module
  (its classes and functions). Re-exported names work: ``torch.nn.Linear``.
- ``mode="list"``: browse a package or category: ``"nn"`` lists what ``<pkg>.nn`` exports
  (through its ``__init__`` imports and star imports), ``"optim"`` likewise, ``"all"``
  every public module.

``focus`` for a trace: ``"full"`` (docstrings), ``"methods"``, ``"bases"``, ``"calls"``
(what each method references).
"""

from __future__ import annotations

from indexer.python.names import resolve_dotted
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.query.py_lookup import (
    ASSIGNMENT,
    IndexNames,
    assignment,
    definitions,
    is_class,
    suggest,
)
from indexer.query.registry_answer import (
    BRIEF_TESTS,
    entries_named,
    entries_of,
    registry_answer,
    registry_items,
)

MODES = ("trace", "list")
FOCUS = ("full", "methods", "bases", "calls")
MAX_LISTED = 300
MAX_STAR_DEPTH = 3
REFERENCE_EDGES = ("references", "imports", "covers")


def modules(index: Index, name: str, mode: str = "trace", focus: str | None = None) -> Answer:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    name = (name or "").strip()
    if not name:
        raise ValueError("modules needs a name: a module, class or function, or a category")
    if focus is not None and mode == "trace" and focus not in FOCUS:
        raise ValueError(f"focus must be one of {', '.join(FOCUS)} (got {focus!r})")
    if mode == "list":
        return _browse(index, name)
    names = IndexNames(index)
    nodes, how = definitions(index, name, names)
    classes = [node for node in nodes if is_class(node)]
    if not nodes or (len(nodes) > 1 and len(classes) != 1):
        registered = _registered(index, name)  # "LlamaForCausalLM": what its registry loads
        if registered is not None:
            if nodes:  # the name is also Python's: both answers, the registry's first
                registered.items += _choices(name, nodes).items
                registered.notes.append(
                    f"{len(nodes)} Python definitions also match {name!r} (listed after the "
                    "registry entries): ask again with one of their qualified names"
                )
            return registered
    if not nodes:
        return Answer.not_found(
            "modules", name, "Python module, class or function", suggest(index, name)
        )
    if len(nodes) > 1 and len(classes) != 1:
        return _choices(name, nodes)
    node = classes[0] if classes else nodes[0]
    if node.kind == ASSIGNMENT:
        return _assignment(index, node)
    if is_class(node):
        answer = _class(index, node, focus)
    elif node.kind == "python_module":
        answer = _module(index, node, focus)
    else:
        answer = _function(index, node, focus)
    # The registry entries that load the class, or are spelled as asked ("fp8" is both a
    # module and a quantization method): the module, class and tests of each.
    # They lead: the methods of a large class would leave them past the text's budget.
    entries = entries_named(index, name) + (entries_of(index, node) if is_class(node) else [])
    unique = list({e.id: e for e in entries}.values())
    answer.items[0:0] = registry_items(index, unique, max_tests=BRIEF_TESTS, first=name)
    if node.qualname != name:
        answer.notes.append(f"{name} is {node.qualname} (matched by {how})")
    return answer


def _registered(index: Index, name: str) -> Answer | None:
    """A registry name (an architecture, a quantization method, a model id): the module
    and class its entries load, with the tests that load it; None if it is none."""
    answer = registry_answer("modules", index, name)
    if answer is None:
        return None
    loaded = {i.label.removeprefix("loads ") for i in answer.items if i.label.startswith("loads ")}
    for qualname in sorted(loaded)[:3]:
        for cls in index.find(qualname):
            if is_class(cls):
                answer.items += _class(index, cls, "methods").items
    return answer


def _assignment(index: Index, node: Node) -> Answer:
    """A name bound at module level to a call's result: where, and what the call names."""
    answer = Answer("modules", node.qualname, title=f"{node.qualname}: bound by assignment")
    answer.items.append(Item(node.qualname, node.evidence, "module-level assignment"))
    bound = assignment(index, node.qualname)
    for named in bound[1] if bound else []:
        answer.items.append(Item(named.qualname, named.evidence, f"named by it ({named.kind})", 1))
    return answer


def _choices(name: str, nodes: list[Node]) -> Answer:
    answer = Answer("modules", name, title=f"{len(nodes)} Python definitions match {name!r}:")
    for node in sorted(nodes, key=lambda n: n.qualname):
        answer.items.append(Item(node.qualname, node.evidence, node.kind))
    answer.notes.append("ask again with one of these qualified names")
    return answer.truncate(MAX_LISTED)


def _children(index: Index, node: Node) -> list[Node]:
    ids = [edge.dst for edge in index.out_edges(node.id, ["contains"])]
    return sorted(index.nodes(ids), key=lambda n: n.line)


def _doc_item(node: Node, depth: int) -> Item | None:
    doc = node.attrs.get("doc")
    return Item(doc, None, "doc", depth=depth) if doc else None


def _class(index: Index, node: Node, focus: str | None) -> Answer:
    bases = node.attrs.get("bases", [])
    answer = Answer(
        "modules",
        node.qualname,
        title=f"class {node.qualname}({', '.join(bases)}) @ {node.evidence}",
    )
    full = focus == "full"
    doc = _doc_item(node, 1)
    if doc and focus in (None, "full"):
        answer.items.append(doc)
    names = IndexNames(index)
    base_data = []
    if focus in (None, "full", "bases"):
        for base in bases:
            found = resolve_dotted(names, base)
            where = index.node(found[0][0]) if found and found[1] else None
            answer.items.append(
                Item(
                    base,
                    where.evidence if where else None,
                    "base" if where else "base (not indexed)",
                )
            )
            base_data.append({"name": base, "evidence": where.evidence if where else None})
    methods = []
    if focus != "bases":
        for child in _children(index, node):
            if child.kind in ("python_function", "test_function"):
                signature = child.attrs.get("signature", "()")
                decorators = child.attrs.get("decorators") or []
                detail = "method" + (f" @{', @'.join(decorators)}" if decorators else "")
                answer.items.append(Item(f"{child.name}{signature}", child.evidence, detail))
                if full:
                    doc = _doc_item(child, 1)
                    if doc:
                        answer.items.append(doc)
                if focus == "calls":
                    answer.items.extend(_references(index, child, depth=1))
                methods.append(
                    {
                        "name": child.name,
                        "qualname": child.qualname,
                        "signature": signature,
                        "evidence": child.evidence,
                        "doc": child.attrs.get("doc"),
                    }
                )
            elif is_class(child) and focus in (None, "full"):
                answer.items.append(Item(child.qualname, child.evidence, "nested class"))
    answer.data = {
        "kind": node.kind,
        "qualname": node.qualname,
        "evidence": node.evidence,
        "bases": base_data or [{"name": base} for base in bases],
        "methods": methods,
        "doc": node.attrs.get("doc"),
    }
    return answer


def _references(index: Index, node: Node, depth: int = 0) -> list[Item]:
    items = []
    for edge in index.out_edges(node.id, REFERENCE_EDGES):
        target = index.node(edge.dst)
        if target.kind == "python_module" and edge.kind != "imports":
            continue
        detail = edge.kind + (" (ambiguous)" if edge.ambiguous else "")
        items.append(Item(f"-> {target.qualname} [{target.kind}]", edge.evidence, detail, depth))
    return items


def _function(index: Index, node: Node, focus: str | None) -> Answer:
    signature = node.attrs.get("signature", "()")
    answer = Answer(
        "modules", node.qualname, title=f"def {node.qualname}{signature} @ {node.evidence}"
    )
    doc = _doc_item(node, 1)
    if doc:
        answer.items.append(doc)
    answer.items.extend(_references(index, node))
    answer.data = {
        "kind": node.kind,
        "qualname": node.qualname,
        "evidence": node.evidence,
        "signature": signature,
        "doc": node.attrs.get("doc"),
    }
    return answer.truncate(MAX_LISTED)


def _module(index: Index, node: Node, focus: str | None) -> Answer:
    answer = Answer("modules", node.qualname, title=f"module {node.qualname} @ {node.path}")
    doc = _doc_item(node, 1)
    if doc:
        answer.items.append(doc)
    for child in _children(index, node):
        if child.kind in ("python_class", "python_function", "test_utility"):
            kind = "class" if is_class(child) else "function"
            label = child.name + ("" if kind == "class" else child.attrs.get("signature", "()"))
            answer.items.append(Item(label, child.evidence, kind))
            if focus == "full":
                doc = _doc_item(child, 1)
                if doc:
                    answer.items.append(doc)
    return answer.truncate(MAX_LISTED)


# --- browsing -----------------------------------------------------------------------------


def _packages(index: Index) -> list[str]:
    rows = index.conn.execute(
        "SELECT qualname FROM nodes WHERE kind = 'python_module' AND qualname NOT LIKE '%.%'"
        " AND attrs LIKE '%\"package\":true%' ORDER BY qualname"
    )
    return [row[0] for row in rows]


def _public(dotted: str) -> bool:
    return not any(part.startswith("_") for part in dotted.split("."))


def _browse(index: Index, category: str) -> Answer:
    if category == "all":
        answer = Answer("modules", category, title="Public Python modules:")
        for node in index.nodes_of_kind("python_module"):
            if _public(node.qualname):
                detail = "package" if node.attrs.get("package") else "module"
                answer.items.append(Item(node.qualname, node.path, detail))
        answer.title = f"{len(answer.items)} public Python modules:"
        return answer.truncate(MAX_LISTED)
    names = IndexNames(index)
    prefixes = [f"{package}.{category}" for package in _packages(index)]
    prefixes.append(category)
    modules_found = [(p, names.module(p)) for p in prefixes if names.module(p) is not None]
    if not modules_found:
        return Answer.not_found(
            "modules", category, "Python package or category", suggest(index, category)
        )
    prefix, module_id = modules_found[0]
    exports = _exports(names, prefix, module_id)
    answer = Answer("modules", category, title=f"{prefix}: {len(exports)} public names")
    order = {"class": 0, "function": 1, "module": 2}
    for label, node in sorted(exports.items(), key=lambda kv: (order[_role(kv[1])], kv[0])):
        answer.items.append(
            Item(label, node.evidence, _role(node), data={"qualname": node.qualname})
        )
    if not exports:
        answer.notes.append(f"{prefix} exports nothing the index can resolve")
    return answer.truncate(MAX_LISTED)


def _role(node: Node) -> str:
    if node.kind == "python_module":
        return "module"
    return "class" if is_class(node) else "function"


def _exports(names: IndexNames, prefix: str, module_id: int) -> dict[str, Node]:
    """Public names of a package: its own definitions, its imports, its star imports."""
    index = names.index
    found: dict[str, Node] = {}
    pending = [(module_id, 0)]
    seen = set()
    while pending:
        current, depth = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        module = names.node(current)
        for child in _children(index, module):
            if child.kind in ("python_class", "python_function", "test_utility") and _public(
                child.name
            ):
                found.setdefault(f"{prefix}.{child.name}", child)
        for local, target in module.attrs.get("bindings", {}).items():
            if not _public(local) or f"{prefix}.{local}" in found:
                continue
            resolved = resolve_dotted(names, target)
            if resolved and resolved[1]:
                found[f"{prefix}.{local}"] = names.node(resolved[0][0])
        if depth < MAX_STAR_DEPTH:
            for star in module.attrs.get("stars", ()):
                star_id = names.module(star)
                if star_id is not None:
                    pending.append((star_id, depth + 1))
    return found
