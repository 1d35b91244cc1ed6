"""Test conventions read from source: pytest and unittest tests, parametrization, PyTorch's
device-generic classes and ``@ops`` decorators. Pure functions over ``ast`` nodes."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Any

from indexer.python.scope import callee_name, dotted_chain

PARAMETRIZE = frozenset({"parametrize", "parametrize_test"})
FIXTURE = "fixture"
DEVICE_GENERIC_CALL = "instantiate_device_type_tests"
PARAMETRIZED_CALL = "instantiate_parametrized_tests"
DEFAULT_DEVICES = ("cpu", "cuda")
OPTIONAL_DEVICES = {"allow_mps": "mps", "allow_xpu": "xpu", "include_lazy": "lazy"}
MAX_PARAM_IDS = 1000
# Parameters of device-generic and unittest tests that are not pytest fixtures.
NOT_FIXTURES = frozenset(
    {"self", "cls", "device", "devices", "dtype", "dtypes", "op", "module_info"}
    # pytest's own fixtures: never defined in the tree.
    | {"tmp_path", "tmpdir", "tmp_path_factory", "tmpdir_factory", "monkeypatch", "capsys"}
    | {"capfd", "capsysbinary", "capfdbinary", "caplog", "recwarn", "request", "pytestconfig"}
    | {"record_property", "record_testsuite_property", "record_xml_attribute", "cache"}
)


def decorator_name(node: ast.expr) -> str | None:
    """``pytest.mark.parametrize(...)`` -> ``parametrize``; ``@fixture`` -> ``fixture``."""
    return callee_name(node.func if isinstance(node, ast.Call) else node)


def is_test_class(node: ast.ClassDef, local_test_classes: set[str], forced: set[str]) -> bool:
    """unittest (a base named like ``*TestCase``/``*Test*``) or pytest (``Test*``) classes."""
    if node.name in forced or node.name.startswith("Test"):
        return True
    for base in node.bases:
        chain = dotted_chain(base)
        last = chain[-1] if chain else None
        if last and ("Test" in last or last in local_test_classes):
            return True
    return False


def is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(decorator_name(dec) == FIXTURE for dec in node.decorator_list)


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _id_of(value: Any, argname: str, index: int) -> str:
    """pytest's id for one literal parameter value."""
    if isinstance(value, str):
        return value if value.isascii() else value.encode("unicode_escape").decode("ascii")
    if value is None or isinstance(value, (bool, int, float, complex)):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("ascii", "backslashreplace")
    return f"{argname}{index}"


def _argnames(node: ast.expr) -> list[str] | None:
    ok, value = _literal(node)
    if not ok:
        return None
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _param_set_ids(call: ast.Call, argnames: list[str]) -> list[str] | None:
    """The ids one ``pytest.mark.parametrize`` gives, or None when they are not literal."""
    if len(call.args) < 2 or not isinstance(call.args[1], (ast.List, ast.Tuple)):
        return None
    explicit: list[Any] | None = None
    for keyword in call.keywords:
        if keyword.arg == "ids":
            ok, value = _literal(keyword.value)
            if not ok or not isinstance(value, (list, tuple)):
                return None
            explicit = list(value)
    ids: list[str] = []
    for index, element in enumerate(call.args[1].elts):
        given: str | None = None
        if isinstance(element, ast.Call) and callee_name(element.func) == "param":
            for keyword in element.keywords:
                if keyword.arg == "id":
                    ok, value = _literal(keyword.value)
                    if not ok:
                        return None
                    given = value
            values = list(element.args)
        elif len(argnames) > 1 and isinstance(element, (ast.Tuple, ast.List)):
            values = list(element.elts)
        else:
            values = [element]
        if explicit is not None and index < len(explicit) and explicit[index] is not None:
            given = str(explicit[index])
        if given is not None:
            ids.append(given)
            continue
        parts = []
        for position, value_node in enumerate(values):
            ok, value = _literal(value_node)
            name = argnames[position] if position < len(argnames) else "arg"
            parts.append(_id_of(value, name, index) if ok else f"{name}{index}")
        ids.append("-".join(parts))
    return ids


def parametrization(node: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, Any]:
    """attrs for a test's parametrize decorators: ``parametrized``, ``params`` (argnames per
    decorator, nearest first) and ``param_ids`` when every id is literal (pytest style)."""
    params: list[dict[str, Any]] = []
    id_sets: list[list[str]] | None = []
    for dec in reversed(node.decorator_list):  # the nearest decorator first, as pytest ids
        if not isinstance(dec, ast.Call) or decorator_name(dec) not in PARAMETRIZE:
            continue
        argnames = _argnames(dec.args[0]) if dec.args else None
        chain = dotted_chain(dec.func) or []
        style = "pytest" if "mark" in chain else "torch"
        entry: dict[str, Any] = {"argnames": argnames, "style": style}
        ids = _param_set_ids(dec, argnames) if argnames and style == "pytest" else None
        if ids is not None:
            entry["ids"] = ids
        elif id_sets is not None:
            id_sets = None
        if id_sets is not None and ids is not None:
            id_sets.append(ids)
        params.append(entry)
    if not params:
        return {}
    attrs: dict[str, Any] = {"parametrized": True, "params": params}
    if id_sets:
        total = 1
        for ids in id_sets:
            total *= max(len(ids), 1)
        if total <= MAX_PARAM_IDS:
            combined = ["-".join(combo) for combo in itertools.product(*id_sets)]
            if len(set(combined)) == len(combined):
                attrs["param_ids"] = combined
    return attrs


OPS = "ops"


@dataclass(frozen=True)
class OpsUse:
    """A test's ``@ops``: the OpInfo list it iterates, and the decorator's line."""

    op_list: ast.expr
    line: int


@dataclass
class OpsAliases:
    """Names a test module binds to ``ops`` at module or class level, so that
    ``@_gradcheck_ops(op_db)`` and ``@_sparse_unary_ops`` count as ``@ops`` too (PyTorch's
    test_ops_gradients.py, test_ops.py, test_sparse.py):

    - ``name = partial(ops, ...)``: called as a decorator with the list (``partial``'s own
      positional arguments come first);
    - ``name = ops(op_list, ...)``: used as a decorator as it is."""

    partials: dict[str, list[ast.expr]] = field(default_factory=dict)  # name -> leading args
    applied: dict[str, ast.Call] = field(default_factory=dict)  # name -> its ops(...) call

    @classmethod
    def of(cls, body: list[ast.stmt]) -> OpsAliases:
        aliases = cls()
        aliases._scan(body)
        return aliases

    def _scan(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                self._scan(stmt.body)
            elif isinstance(stmt, (ast.If, ast.Try)):
                self._scan(stmt.body)
                self._scan(stmt.orelse)
            elif (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Call)
            ):
                self._bind(stmt.targets[0].id, stmt.value)

    def _bind(self, name: str, call: ast.Call) -> None:
        if decorator_name(call) == "partial" and call.args and _names_ops(call.args[0]):
            self.partials[name] = list(call.args[1:])
        elif _names_ops(call.func) and call.args:
            self.applied[name] = call


def _names_ops(expr: ast.expr) -> bool:
    chain = dotted_chain(expr)
    return bool(chain) and chain[-1] == OPS


def ops_decorator(
    node: ast.FunctionDef | ast.AsyncFunctionDef, aliases: OpsAliases | None = None
) -> OpsUse | None:
    """The ``@ops(op_list, ...)`` decorator of a test (or an alias of ``ops``), if any."""
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call):
            name = decorator_name(dec)
            if name == OPS and dec.args:
                return OpsUse(dec.args[0], dec.lineno)
            if aliases is not None and name in aliases.partials:
                args = [*aliases.partials[name], *dec.args]
                if args:
                    return OpsUse(args[0], dec.lineno)
        elif aliases is not None and isinstance(dec, ast.Name) and dec.id in aliases.applied:
            return OpsUse(aliases.applied[dec.id].args[0], dec.lineno)
    return None


def literal_dtypes(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str] | None:
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call) and decorator_name(dec) == "dtypes":
            names = []
            for arg in dec.args:
                chain = dotted_chain(arg)
                if chain:
                    names.append(chain[-1])
                elif isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.append(arg.value)
            return names
    return None


def device_variants(call: ast.Call, class_name: str) -> tuple[list[str], bool]:
    """The classes ``instantiate_device_type_tests(cls, scope, ...)`` generates, and whether
    that list is exact (False when only_for/except_for are not literal: all defaults kept)."""
    devices = list(DEFAULT_DEVICES)
    exact = True
    for keyword in call.keywords:
        if keyword.arg in OPTIONAL_DEVICES:
            ok, value = _literal(keyword.value)
            if not ok or value:
                devices.append(OPTIONAL_DEVICES[keyword.arg])
                exact = exact and ok
    for keyword in call.keywords:
        if keyword.arg not in ("only_for", "except_for"):
            continue
        ok, value = _literal(keyword.value)
        if not ok:
            exact = False
            continue
        chosen = {value} if isinstance(value, str) else set(value or ())
        if keyword.arg == "only_for":
            devices = [d for d in devices if d in chosen] or sorted(chosen)
        else:
            devices = [d for d in devices if d not in chosen]
    return [class_name + device.upper() for device in devices], exact


def module_level_calls(body: list[ast.stmt]) -> list[ast.Call]:
    """Calls made as statements at module level, including inside if/for/try/with blocks."""
    calls: list[ast.Call] = []
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            calls.append(stmt.value)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        else:
            for field_name in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(stmt, field_name, None)
                if children:
                    for child in reversed(children):
                        if isinstance(child, ast.ExceptHandler):
                            stack.extend(reversed(child.body))
                        else:
                            stack.append(child)
    return calls
