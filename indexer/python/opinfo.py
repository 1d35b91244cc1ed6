"""OpInfo registries: the entries (``OpInfo('add', ...)`` and every ``*Info`` call with a
literal name) and which module-level lists hold them.

A list's membership is summarised at extraction time as direct entries plus other lists
it includes (``op_db + python_ref_db``, ``[*fft.op_db]``, ``itertools.chain(...)``),
optionally filtered by ``isinstance(op, SomeInfo)``; the ``opinfo`` resolver closes these
summaries over files. Anything else (a list built by a function call, a comprehension
that yields something other than its loop variable) is recorded as unknown, and a test
over an unknown list covers every OpInfo: when in doubt, select more.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Protocol

from indexer.python.scope import callee_name, dotted_chain

if TYPE_CHECKING:
    from indexer.graph.facts import FileFacts
    from indexer.python.modname import PackageLayout
    from indexer.python.scope import Scope


class ScanContext(Protocol):
    """What the scanner reads of, and writes through, the file being extracted
    (``indexer.python.extractor``'s ``FileIndexer``, which hands itself over)."""

    facts: FileFacts
    modname: str
    module_node: int
    scope: Scope
    consumed: set[int]  # ids of ast nodes already attributed
    layout: PackageLayout

    def emit_ref(
        self, src: int, kind: str, scheme: str, target: str, line: int, **attrs: Any
    ) -> None: ...

    def walk_expr(self, root: ast.AST, src: int, scope: Scope, cls: str | None = None) -> None: ...


# The OpInfo family: OpInfo and every subclass PyTorch defines (UnaryUfuncInfo,
# ReductionOpInfo, ForeachFuncInfo, ElementwiseBinaryPythonRefInfo...) ends with one of
# these. Other *Info registries (vLLM's _HfExamplesInfo, DecorateInfo, ModuleInfo) are not
# OpInfos; a class a file derives from the family counts too.
FAMILY_SUFFIXES = ("OpInfo", "FuncInfo", "UfuncInfo", "RefInfo")
# Keyword arguments whose values say how to skip or decorate tests, not what runs.
NOT_WALKED = frozenset({"skips", "decorators", "name", "variant_test_name", "aten_name"})
# Wrappers that return their argument's members (or a subset of them).
PASS_THROUGH = frozenset({"list", "tuple", "set", "sorted", "deepcopy", "copy", "filter"})
CONCAT = frozenset({"chain"})


def _string(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def info_class(call: ast.Call, local: frozenset[str] | set[str] = frozenset()) -> str | None:
    name = callee_name(call.func)
    if name and (name.endswith(FAMILY_SUFFIXES) or name in local):
        return name
    return None


def local_info_classes(body: list[ast.stmt]) -> set[str]:
    """Classes a module derives from the OpInfo family (``class MyInfo(OpInfo)``)."""
    found: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.ClassDef):
            for base in stmt.bases:
                chain = dotted_chain(base)
                if chain and (chain[-1].endswith(FAMILY_SUFFIXES) or chain[-1] in found):
                    found.add(stmt.name)
    return found


def entry_name(call: ast.Call, bound: dict[str, ast.expr] | None = None) -> str | None:
    """The literal name of an entry; ``bound`` maps a factory's parameters to the literal
    arguments of one call of it (``make_opinfo(name="x")`` returning ``OpInfo(name=name)``)."""
    node = call.args[0] if call.args else None
    if node is None:
        node = next((kw.value for kw in call.keywords if kw.arg == "name"), None)
    if bound and isinstance(node, ast.Name):
        node = bound.get(node.id, node)
    return _string(node)


def _names_entry(call: ast.Call, params: set[str]) -> bool:
    """Whether ``call``'s name is a literal or one of ``params`` (a factory's)."""
    node = call.args[0] if call.args else None
    if node is None:
        node = next((kw.value for kw in call.keywords if kw.arg == "name"), None)
    return _string(node) is not None or (isinstance(node, ast.Name) and node.id in params)


def aten_target(name: str, cls: str, keywords: dict[str, ast.expr]) -> str:
    """The aten op an entry exercises, as PyTorch derives it."""
    explicit = _string(keywords.get("aten_name"))
    if explicit:
        return "aten::" + explicit.replace(".", "_")
    ref_of = _string(keywords.get("torch_opinfo_name"))
    if ref_of:
        name = ref_of
    if cls == "ForeachFuncInfo" and not name.startswith("_foreach_"):
        return "aten::_foreach_" + name
    if name.startswith("torch.ops."):
        parts = name.split(".")
        if len(parts) >= 4:
            return f"{parts[2]}::{parts[3]}"
    if name.startswith("torch."):
        name = name[len("torch.") :]
    if name.startswith("nn.functional."):
        return "aten::" + name.rsplit(".", 1)[-1]
    return "aten::" + name.replace(".", "_")


def python_entry(name: str, cls: str, packages: list[str]) -> str | None:
    """The function an entry calls when it names none (``op=None``): ``torch.<name>``."""
    if not packages:
        return None
    if name.startswith("torch."):
        name = name[len("torch.") :]
    if cls == "ForeachFuncInfo" and not name.startswith("_foreach_"):
        name = "_foreach_" + name
    return f"{packages[0]}.{name}"


class Summary:
    """Members of one list: direct entries, included lists (with isinstance filters)."""

    __slots__ = ("direct", "parts", "unknown")

    def __init__(self) -> None:
        self.direct = 0
        self.parts: list[list[Any]] = []  # [dotted list name, [classes] | None]
        self.unknown: str | None = None

    def merge(self, other: Summary) -> None:
        self.direct += other.direct
        self.parts.extend(other.parts)
        self.unknown = self.unknown or other.unknown

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"direct": self.direct, "parts": self.parts}
        if self.unknown:
            data["unknown"] = self.unknown
        return data

    def interesting(self) -> bool:
        return bool(self.direct or self.parts or self.unknown)


def _isinstance_filter(conditions: list[ast.expr], var: str) -> list[str] | None:
    """Class names from ``isinstance(var, C)`` / ``isinstance(var, (C1, C2))`` conditions."""
    found: list[str] = []
    stack = list(conditions)
    while stack:
        cond = stack.pop()
        if isinstance(cond, ast.BoolOp) and isinstance(cond.op, ast.And):
            stack.extend(cond.values)
        elif (
            isinstance(cond, ast.Call)
            and callee_name(cond.func) == "isinstance"
            and len(cond.args) == 2
            and isinstance(cond.args[0], ast.Name)
            and cond.args[0].id == var
        ):
            classes = cond.args[1].elts if isinstance(cond.args[1], ast.Tuple) else [cond.args[1]]
            for cls in classes:
                chain = dotted_chain(cls)
                if chain:
                    found.append(chain[-1])
    return found or None


class OpinfoScanner:
    """Finds the entries and list summaries of one module for a :class:`ScanContext`."""

    def __init__(self, ctx: ScanContext) -> None:
        self.ctx = ctx
        self.summaries: dict[str, Summary] = {}
        self.factories: dict[str, ast.FunctionDef] = {}
        self.loop_sources: dict[str, ast.expr] = {}
        self.local_infos: set[str] = set()

    def _info(self, call: ast.Call) -> str | None:
        return info_class(call, self.local_infos)

    def scan(self, body: list[ast.stmt]) -> dict[str, dict[str, Any]]:
        self.local_infos = local_info_classes(body)
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef):
                self.factories[stmt.name] = stmt
        for stmt in self._module_statements(body):
            self._statement(stmt)
        return {
            name: summary.as_dict()
            for name, summary in self.summaries.items()
            if summary.interesting()
        }

    def _module_statements(self, body: list[ast.stmt]):
        for stmt in body:
            if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.While)):
                yield from self._module_statements(stmt.body)
                yield from self._module_statements(getattr(stmt, "orelse", []))
                if isinstance(stmt, ast.Try):
                    for handler in stmt.handlers:
                        yield from self._module_statements(handler.body)
            elif isinstance(stmt, ast.For):
                # `for op in op_db: lst.append(op)`: the loop variable stands for the entries
                # of what it iterates.
                name = stmt.target.id if isinstance(stmt.target, ast.Name) else None
                if name:
                    self.loop_sources[name] = stmt.iter
                yield from self._module_statements(stmt.body)
                if name:
                    self.loop_sources.pop(name, None)
            elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield stmt

    def _statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
            if isinstance(target, ast.Name) and self._listish(value):
                self.summaries[target.id] = self.summarize(value, target.id)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            if isinstance(stmt.target, ast.Name) and self._listish(stmt.value):
                self.summaries[stmt.target.id] = self.summarize(stmt.value, stmt.target.id)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
            if isinstance(stmt.target, ast.Name):
                self._extend(stmt.target.id, self.summarize(stmt.value, stmt.target.id))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.attr in ("append", "extend", "insert")
                and call.args
            ):
                name = func.value.id
                if name not in self.summaries:
                    return
                arg = call.args[-1]
                if func.attr == "extend":
                    added = self.summarize(arg, name)
                else:
                    added = self.summarize(ast.List(elts=[arg], ctx=ast.Load()), name)
                self._extend(name, added)

    def _extend(self, name: str, added: Summary) -> None:
        summary = self.summaries.get(name)
        if summary is None:
            summary = Summary()
            dotted = self._dotted(ast.Name(id=name, ctx=ast.Load()))
            if dotted:
                summary.parts.append([dotted, None])
            self.summaries[name] = summary
        summary.merge(added)

    def _listish(self, value: ast.expr) -> bool:
        if isinstance(value, (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp, ast.BinOp)):
            return True
        if isinstance(value, ast.Call):
            name = callee_name(value.func)
            return bool(self._info(value) or name in PASS_THROUGH or name in CONCAT)
        return False

    def _dotted(self, node: ast.expr) -> str | None:
        chain = dotted_chain(node)
        if chain is None:
            return None
        if chain[0] in self.summaries or (
            self.ctx.scope.lookup(chain[0]) is None and len(chain) == 1
        ):
            # A list of this module (possibly defined later): name it by its module.
            return ".".join([self.ctx.modname, *chain])
        return self.ctx.scope.expand(chain)

    def summarize(self, node: ast.expr, list_name: str) -> Summary:
        summary = Summary()
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    summary.merge(self.summarize(element.value, list_name))
                else:
                    summary.merge(self._element(element, list_name))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            summary.merge(self.summarize(node.left, list_name))
            summary.merge(self.summarize(node.right, list_name))
        elif isinstance(node, (ast.Name, ast.Attribute)):
            dotted = self._dotted(node)
            if dotted:
                summary.parts.append([dotted, None])
            else:
                summary.unknown = f"{ast.unparse(node)} at line {node.lineno} is not a known list"
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            summary.merge(self._comprehension(node, list_name))
        elif isinstance(node, ast.Call):
            name = callee_name(node.func)
            if self._info(node):
                summary.merge(self._element(node, list_name))
            elif name in CONCAT:
                for arg in node.args:
                    summary.merge(self.summarize(arg, list_name))
            elif name in PASS_THROUGH and node.args:
                summary.merge(self.summarize(node.args[-1], list_name))
            else:
                summary.unknown = f"built by {ast.unparse(node.func)}() at line {node.lineno}"
        elif isinstance(node, ast.IfExp):
            summary.merge(self.summarize(node.body, list_name))
            summary.merge(self.summarize(node.orelse, list_name))
        else:
            summary.unknown = (
                f"{type(node).__name__} at line {node.lineno} is not a list of OpInfos"
            )
        return summary

    def _comprehension(
        self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp, list_name: str
    ) -> Summary:
        result = Summary()
        elt = node.elt
        if isinstance(elt, ast.Call) and (self._info(elt) or self._factory_of(elt)):
            # `*(UnaryUfuncInfo('polygamma', variant_test_name=f'..._{n}') for n in ...)`:
            # entries generated from one call, named by it whatever the loop yields.
            generated = self._element(elt, list_name, generated=True)
            if not generated.unknown:
                return generated
        if len(node.generators) != 1:
            result.unknown = f"nested comprehension at line {node.lineno}"
            return result
        generator = node.generators[0]
        var = generator.target.id if isinstance(generator.target, ast.Name) else None
        if var is None:
            result.unknown = f"comprehension at line {node.lineno} unpacks its items"
            return result
        if isinstance(elt, ast.Call) and any(
            isinstance(arg, ast.Name) and arg.id == var for arg in elt.args
        ):
            # `[translate_opinfo(op) for op in op_db]`: entries derived one by one from a
            # list's entries exercise the same ops, so they count as that list's members.
            return self.summarize(generator.iter, list_name)
        if not (isinstance(elt, ast.Name) and elt.id == var):
            result.unknown = f"comprehension at line {node.lineno} yields {ast.unparse(elt)}"
            return result
        source = self.summarize(generator.iter, list_name)
        classes = _isinstance_filter(generator.ifs, var)
        if classes:
            source.parts = [[part[0], classes] for part in source.parts]
        return source

    def _factory_of(self, call: ast.Call) -> ast.FunctionDef | None:
        return self.factories.get(callee_name(call.func) or "")

    def _element(self, element: ast.expr, list_name: str, generated: bool = False) -> Summary:
        summary = Summary()
        if isinstance(element, ast.Call):
            if self._info(element) and self.add_entry(element, list_name, element, None, generated):
                summary.direct += 1
                return summary
            factory = self._factory_of(element)
            if factory is not None and self._factory_entry(factory, element, list_name, generated):
                summary.direct += 1
                return summary
            summary.unknown = (
                f"entry built by {ast.unparse(element.func)}() at line {element.lineno}"
            )
            return summary
        if isinstance(element, ast.Name) and element.id in self.loop_sources:
            return self.summarize(self.loop_sources[element.id], list_name)
        if isinstance(element, (ast.Name, ast.Attribute)):
            dotted = self._dotted(element)
            if dotted:
                summary.parts.append([dotted, None])
                return summary
        summary.unknown = f"element at line {element.lineno} is not an OpInfo"
        return summary

    def _factory_entry(
        self, factory: ast.FunctionDef, call: ast.Call, list_name: str, generated: bool = False
    ) -> bool:
        """``make_foo_opinfo(variant_test_name='x')`` whose body returns ``XInfo('foo', ...)``."""
        returned = [
            node.value
            for node in ast.walk(factory)
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call)
        ]
        params = [arg.arg for arg in (*factory.args.args, *factory.args.kwonlyargs)]
        entries = [n for n in returned if self._info(n) and _names_entry(n, set(params))]
        if len(entries) != 1:
            return False
        bound: dict[str, ast.expr] = dict(zip(params, call.args, strict=False))
        bound.update({kw.arg: kw.value for kw in call.keywords if kw.arg})
        return self.add_entry(entries[0], list_name, call, bound, generated)

    def add_entry(
        self,
        call: ast.Call,
        list_name: str,
        site: ast.Call,
        bound: dict[str, ast.expr] | None = None,
        generated: bool = False,
    ) -> bool:
        """An ``opinfo`` node for ``call`` (evidence at ``site``), its op and Python refs."""
        cls = self._info(call)
        name = entry_name(call, bound)
        if not cls or not name:
            return False
        keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
        if bound:  # a factory's parameters, replaced by the literal arguments of the call
            keywords = {
                key: bound.get(value.id, value) if isinstance(value, ast.Name) else value
                for key, value in keywords.items()
            }
        variant_node = keywords.get("variant_test_name")
        variant = _string(variant_node) or ""
        if not variant and isinstance(variant_node, ast.JoinedStr):
            variant = ast.unparse(variant_node)[2:-1]  # f'x_{n}' -> the pattern x_{n}
        aten = aten_target(name, cls, keywords)
        qualname = f"{list_name}:{name}" + (f".{variant}" if variant else "")
        ctx = self.ctx
        attrs: dict[str, Any] = {
            "name": name,
            "variant_test_name": variant,
            "aten_name": _string(keywords.get("aten_name")) or aten.split("::", 1)[1],
            "info_class": cls,
            "list": list_name,
            "list_qual": f"{ctx.modname}.{list_name}",
        }
        ref_of = _string(keywords.get("torch_opinfo_name"))
        if ref_of:
            attrs["torch_opinfo_name"] = ref_of
        if generated:
            attrs["generated"] = True  # one node for the entries a loop makes from this call
        node = ctx.facts.add_node(
            "opinfo",
            name,
            qualname,
            site.lineno,
            getattr(site, "end_lineno", None) or site.lineno,
            ctx.module_node,
        )
        ctx.facts.nodes[node].attrs.update(attrs)  # "name" cannot be a keyword of add_node
        ctx.facts.add_local_edge(ctx.module_node, node, "contains", site.lineno)
        ctx.consumed.add(id(site))
        ctx.emit_ref(node, "references", "op", aten, site.lineno)
        op_expr = keywords.get("op")
        if op_expr is None or (isinstance(op_expr, ast.Constant) and op_expr.value is None):
            entry = python_entry(name, cls, sorted(ctx.layout.packages))
            if entry:
                ctx.emit_ref(node, "references", "py", entry, site.lineno, default_op=True)
        for key, value in keywords.items():
            if key not in NOT_WALKED:
                ctx.walk_expr(value, node, ctx.scope)
        if site is not call:  # a factory call: its arguments belong to the entry too
            for arg in site.args:
                ctx.walk_expr(arg, node, ctx.scope)
        return True
