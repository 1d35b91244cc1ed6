"""What each module-level statement of a Python file does, as facts kept in the index.

The impact walk asks what a top-level statement does with a definition it names: calls
it at import, binds module names to it, registers it as an op, installs it on a class
(``indexer.select.module_scope`` reads these facts; docs/selection.md, "Facts judged at
extraction"). Each statement (in module-level blocks: ``if``, ``try``, ``with``...;
definitions left out, as a missing statement reads like one) is kept as its lines and:

- ``calls``: the calls it makes when it runs, in ``ast.walk`` order, lambdas' bodies left
  out (they run when the lambda is called): ``[callee, receiver_typed]`` where
  ``receiver_typed`` says ``NAME.method(...)`` has a module-level ``NAME`` the file shows
  is no tensor (``SKIPLIST.add(x)``); ``[callee, typed, passed, op]`` for a call with an
  op name as a string (``op_name=``/``name=`` or a positional string), ``passed`` the
  names it is given (a registrar's ``direct_register_custom_op("x", f)``);
- ``binds``/``mutates``: the module names it binds, and whether it stores into an object
  (``REGISTRY[k] = f``);
- ``install``: ``["Cls.attr", value]`` of ``Cls.attr = value``;
- ``reads``: the names it reads (followed by the walk through later statements).
"""

from __future__ import annotations

import ast
from collections import deque
from typing import Any

from indexer.python.pysource import DEFINITIONS, statements, targets
from indexer.python.receivers import Receivers
from indexer.python.scope import callee_name

StatementFact = tuple[int, int, dict[str, Any]]  # (first line, last line, facts)


def module_statements(tree: ast.Module, path: str, receivers: Receivers) -> list[StatementFact]:
    """The facts of each module-level statement of ``tree`` (file ``path``)."""
    found: list[StatementFact] = []
    for stmt in statements(tree.body, blocks=False, definitions=True):
        if isinstance(stmt, DEFINITIONS):
            continue
        facts: dict[str, Any] = {}
        calls = _calls(stmt, path, receivers)
        if calls:
            facts["calls"] = calls
        names, mutates = bound(targets(stmt))
        if names:
            facts["binds"] = sorted(names)
        if mutates:
            facts["mutates"] = True
        installed = _installed(stmt)
        if installed is not None:
            facts["install"] = installed
        reads = sorted(
            {
                node.id
                for node in ast.walk(stmt)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            }
        )
        if reads:
            facts["reads"] = reads
        found.append((stmt.lineno, stmt.end_lineno or stmt.lineno, facts))
    return sorted(found, key=lambda fact: fact[0])


def _calls(stmt: ast.stmt, path: str, receivers: Receivers) -> list[list[Any]]:
    found: list[list[Any]] = []
    queue: deque[ast.AST] = deque([stmt])  # breadth first, as ast.walk
    while queue:
        node = queue.popleft()
        if isinstance(node, ast.Lambda):
            queue.extend(node.args.defaults)  # evaluated when the lambda is made
            continue
        if isinstance(node, ast.Call):
            callee = callee_name(node.func)
            if callee is not None:
                entry: list[Any] = [callee, receivers.module_level(path, node.func)]
                op = _op_string(node)
                if op is not None:
                    passed = {
                        callee_name(a) for a in [*node.args, *(k.value for k in node.keywords)]
                    }
                    entry += [sorted(name for name in passed if name), op]
                found.append(entry)
        queue.extend(ast.iter_child_nodes(node))
    return found


def _op_string(call: ast.Call) -> str | None:
    """The op name a registrar call would give what it is passed: the ``op_name=``/
    ``name=`` keyword or the first string argument, without its namespace and overload
    (``ns::x.out`` -> x)."""
    strings = [k.value for k in call.keywords if k.arg in ("op_name", "name")] + list(call.args)
    for value in strings:
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
            return value.value.rsplit("::", 1)[-1].split(".", 1)[0]
    return None


def bound(written: list[ast.expr]) -> tuple[set[str], bool]:
    """Names bound by assignment targets, and whether a target mutates an object
    (``REGISTRY[key] = f``, ``obj.attr = f``) rather than binding a module name."""
    names: set[str] = set()
    mutates = False
    stack = list(written)
    while stack:
        target = stack.pop()
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            stack.extend(target.elts)
        elif isinstance(target, ast.Starred):
            stack.append(target.value)
        else:
            mutates = True
    return names, mutates


def _installed(stmt: ast.stmt) -> list[str] | None:
    """``["Cls.attr", name]`` of ``Cls.attr = name`` (a function made a method of a
    class, as torch_sparse's ``SparseTensor.partition = partition``): ``Cls`` a
    capitalized name, the value a plain name, nothing else assigned."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    target, value = stmt.targets[0], stmt.value
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id[:1].isupper()
        and isinstance(value, ast.Name)
    ):
        return [f"{target.value.id}.{target.attr}", value.id]
    return None


def nested_spans(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[list[int]]:
    """The lines of the bodies of functions, methods and lambdas nested in ``function``:
    calling it defines them and runs none of their code."""
    spans = []
    for node in ast.walk(function):
        if node is not function and isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        ):
            body = node.body if isinstance(node, ast.Lambda) else node.body[0]
            spans.append([body.lineno, node.end_lineno or node.lineno])
    return sorted(spans)
