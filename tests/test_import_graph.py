"""No import circles in the product: the module import graph of indexer/, pytest_torchtalk/
and mcp_server/, read from their source (every import: at the top, in a function, or
for type checking only), has no cycle; and the read API (indexer/query) never imports
the selection (indexer/select), which reads through it (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("indexer", "pytest_torchtalk", "mcp_server")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """module -> the product modules it imports (a name imported from a package counts
    as its submodule when there is one, else as the package)."""
    modules = _modules()

    def product_module(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parent, base] if base else parent)
                imported.add(base)
                imported.update(f"{base}.{alias.name}" for alias in node.names)
        found = {product_module(target) for target in imported}
        graph[name] = {target for target in found if target is not None and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in order:
            continue
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], order[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    assert "indexer.query.index" in graph["indexer.select.engine"]
    assert "indexer.select.engine" in graph["indexer.select_changes"]
    assert len(graph) > 150


def test_no_import_circles_in_the_product() -> None:
    assert cycles(import_graph()) == []


def test_the_read_api_does_not_import_the_selection() -> None:
    graph = import_graph()
    reaching = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("indexer.query")
        for target in targets
        if target.startswith("indexer.select")
    )
    assert reaching == []
