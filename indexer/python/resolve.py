"""Resolvers for the refs the Python extractor emits.

- ``py``: a dotted name as written after alias expansion (``torch.ops._C.rms_norm``,
  ``minitorch.nn.Linear``), or a method with an unknown receiver (``.add_``). Python
  definitions first (through re-exports, see :mod:`indexer.python.names`), then the
  ``python_names`` of op and binding nodes, then ``<pkg>.ops.<ns>.<op>`` against op
  qualnames. A method matches only ops and bindings spelled ``*.Tensor.<name>``.
- ``opinfo``: an ``@ops(list)`` decorator; resolves to every OpInfo entry of the list
  (edges marked ``fanout``, not ambiguity), or to every entry of the index when the
  list's membership cannot be determined (marked ``all_opinfos``; the first edge of the
  ref carries the reason, the others ``True``).
- ``fixture``: a pytest test's parameter; resolves to the fixture pytest would use (same
  file, else the nearest conftest.py up the tree).

Everything here is dict lookups over maps built once per link run (and memoised per
target), so a link of PyTorch's ~1M refs stays linear.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from functools import cached_property
from typing import Any

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.link.symbols import Ref, Resolution, SymbolTable
from indexer.python.names import is_class, resolve_dotted, resolve_member_of_bases
from indexer.python.reflection import WILDCARD, matcher
from indexer.python.registries import ANY_ID, could_be_model_id

DEF_KINDS = frozenset({"python_class", "python_function", "test_utility"})
TEST_DEF_KINDS = frozenset({"test_class", "test_function"})
NAMED_KINDS = frozenset({"op", "binding"})
_TENSOR_METHOD = re.compile(r"\.Tensor\.([A-Za-z_][A-Za-z0-9_]*)$")
_GENERATED = re.compile(r"^(\w+)\.(?:_C\._VariableFunctions|_C|_VF)\.([A-Za-z][A-Za-z0-9_]*)$")


class PythonView:
    """The Python-facing maps of one SymbolTable: modules, definitions, Python spellings."""

    def __init__(self, symbols: SymbolTable) -> None:
        self.symbols = symbols
        self.modules: dict[str, int] = {}
        self._defs: dict[str, list[int]] = defaultdict(list)
        self.pynames: dict[str, list[int]] = defaultdict(list)
        self.methods: dict[str, list[int]] = defaultdict(list)
        self.op_packets: dict[str, list[int]] = defaultdict(list)
        self.opinfos: list[int] = []
        self.fixtures: dict[str, list[int]] = defaultdict(list)
        self.class_bases: dict[str, set[str]] = defaultdict(set)  # short name -> base names
        self.class_names: set[str] = set()  # short names of every class the index defines
        self._attrs: dict[int, dict[str, Any]] = {}
        kinds = symbols.kind
        qualnames = symbols.qualname
        for node_id, kind in kinds.items():
            if kind == "python_module":
                self.modules.setdefault(qualnames[node_id], node_id)
            elif kind in DEF_KINDS:
                self._defs[qualnames[node_id]].append(node_id)
                if kind == "test_utility" and self.attrs(node_id).get("fixture"):
                    self.fixtures[symbols.name[node_id]].append(node_id)
            elif kind == "test_file":
                module = self.attrs(node_id).get("module")
                if module:
                    self.modules.setdefault(module, node_id)
            elif kind in TEST_DEF_KINDS:
                pyname = self.attrs(node_id).get("pyname")
                if pyname:
                    self._defs[pyname].append(node_id)
            elif kind in NAMED_KINDS:
                for name in self.attrs(node_id).get("python_names", ()):
                    self.pynames[name].append(node_id)
                    match = _TENSOR_METHOD.search(name)
                    if match:
                        self.methods[match.group(1)].append(node_id)
                if kind == "op":
                    self.op_packets[qualnames[node_id].split(".", 1)[0]].append(node_id)
            elif kind == "opinfo":
                self.opinfos.append(node_id)
            if kind in ("python_class", "test_class") or (
                kind == "test_utility" and self.attrs(node_id).get("py_kind") == "class"
            ):
                self.class_names.add(symbols.name[node_id])
                bases = self.attrs(node_id).get("bases")
                if bases:
                    self.class_bases[symbols.name[node_id]].update(
                        base.rsplit(".", 1)[-1] for base in bases
                    )
        self._cache: dict[str, tuple[list[int], bool] | None] = {}

    # NameSource
    def module(self, dotted: str) -> int | None:
        return self.modules.get(dotted)

    def defs(self, dotted: str) -> list[int]:
        return self._defs.get(dotted, [])

    def attrs(self, node_id: int) -> dict[str, Any]:
        cached = self._attrs.get(node_id)
        if cached is None:
            cached = self.symbols.attrs(node_id)
            self._attrs[node_id] = cached
        return cached

    def kind(self, node_id: int) -> str:
        return self.symbols.kind[node_id]

    def python(self, target: str) -> tuple[list[int], bool] | None:
        return resolve_dotted(self, target, self._cache)

    @cached_property
    def members(self) -> Members:
        return Members(self)

    def matching(self, target: str, modules: bool) -> list[int]:
        """The nodes a name looked up at run time can be (``target``: the owner's dotted
        name, then the name's pattern, ``*`` for its computed parts). ``modules``: the
        target is a module name (``importlib.import_module``), matched whole."""
        if modules:
            match = matcher(target).match
            return sorted(node_id for name, node_id in self.modules.items() if match(name))
        star = target.index(WILDCARD) if WILDCARD in target else len(target)
        owner, _, head = target[:star].rpartition(".")
        pattern = head + target[star:]
        if not owner:
            return []
        parts = owner.split(".")
        if len(parts) == 4 and parts[1:3] == ["_ops", "ops"]:
            parts = [parts[0], *parts[2:]]
        if len(parts) == 3 and parts[1] == "ops":
            found = self.members.ops(parts[2], pattern)
        else:
            found = self.members.named(owner, pattern)
        if pattern == WILDCARD and len(found) > MAX_UNWRITTEN:
            return []  # any of hundreds: left to the module fallback (see MAX_UNWRITTEN)
        return found

    def named(self, target: str) -> list[int]:
        """Op and binding nodes by Python spelling, then ``*.ops.<ns>.<op>[.<overload>]``
        (``torch._ops.ops`` too), then the generated bindings of function variants
        (``torch._C._VariableFunctions.add``, ``torch._C.add``, ``torch._VF.add`` are what
        ``torch.add`` is)."""
        found = self.pynames.get(target)
        if found:
            return found
        parts = target.split(".")
        generated = _GENERATED.match(target)
        if generated:
            return self.pynames.get(f"{generated.group(1)}.{generated.group(2)}", [])
        if len(parts) >= 5 and parts[1] == "_ops" and parts[2] == "ops":
            parts = [parts[0], *parts[2:]]  # torch._ops.ops is torch.ops (torch/_refs' `aten`)
        if len(parts) >= 4 and parts[1] == "ops":
            packet = f"{parts[2]}::{parts[3]}"
            if len(parts) == 4 or parts[4] == "default":
                return self.op_packets.get(packet, [])
            exact = [
                node_id
                for node_id in self.op_packets.get(packet, [])
                if self.symbols.qualname[node_id] == f"{packet}.{parts[4]}"
            ]
            return exact
        return []


# A name with no written part (``getattr(torch, name)``, ``getattr(self, name)``) may be
# anything its owner holds. On PyTorch such lookups on ``torch``, ``torch.ops.aten`` and
# nn.Module's subclasses match thousands of attributes each, and every aten kernel would
# reach the root package through them; past this many matches the lookup resolves to
# nothing, as before such lookups were read, and the module fallback covers it.
MAX_UNWRITTEN = 100


class Members:
    """What a dotted owner holds, for names looked up at run time
    (``indexer.python.reflection``): a module's definitions, bindings, submodules and
    star-imported names; a class's members, its bases' and its subclasses' (``getattr(self,
    f"handle_{op}")`` in a base finds the handlers its subclasses define); the ops of an op
    namespace."""

    MAX_DEPTH = 8

    def __init__(self, view: PythonView) -> None:
        self.view = view
        self.children: dict[str, set[str]] = defaultdict(set)
        for dotted in (*view._defs, *view.modules, *view.pynames):
            parent, _, name = dotted.rpartition(".")
            if parent:
                self.children[parent].add(name)
        self.subclasses: dict[str, list[str]] = defaultdict(list)  # base short name -> classes
        symbols = view.symbols
        for node_id, kind in symbols.kind.items():
            if kind in ("python_class", "test_utility") and is_class(view, node_id):
                for base in view.attrs(node_id).get("bases", ()):
                    self.subclasses[base.rsplit(".", 1)[-1]].append(symbols.qualname[node_id])
        self.namespaces: dict[str, list[int]] = defaultdict(list)
        for packet, nodes in view.op_packets.items():
            self.namespaces[packet.split("::", 1)[0]].extend(nodes)

    def ops(self, namespace: str, pattern: str) -> list[int]:
        match = matcher(pattern).match
        symbols = self.view.symbols
        return [
            node_id
            for node_id in self.namespaces.get(namespace, ())
            if match(symbols.qualname[node_id].split("::", 1)[1].split(".", 1)[0])
        ]

    def named(self, owner: str, pattern: str) -> list[int]:
        """The nodes of every name matching ``pattern`` that ``owner`` holds."""
        match = matcher(pattern).match
        view = self.view
        found: dict[int, None] = {}
        for holder, name in self._names(owner):
            if not match(name):
                continue
            dotted = f"{holder}.{name}"
            resolved = view.python(dotted)
            nodes = resolved[0] if resolved and resolved[1] else view.named(dotted)
            found.update(dict.fromkeys(nodes))
        return list(found)

    def _names(self, owner: str) -> set[tuple[str, str]]:
        """(holder, name) of each name ``owner`` holds, itself or through what it extends.

        Breadth first: each holder is met first at its least distance, so which holders
        the bound keeps does not depend on the order of node ids (tests/test_python_member_search.py)."""
        found: set[tuple[str, str]] = set()
        seen: set[str] = set()
        pending = deque([(owner, 0)])
        view = self.view
        while pending:
            holder, depth = pending.popleft()
            if holder in seen or depth > self.MAX_DEPTH:
                continue
            seen.add(holder)
            found.update((holder, name) for name in self.children.get(holder, ()))
            resolved = view.python(holder)
            if not resolved or not resolved[1]:
                continue
            for node_id in resolved[0]:
                qualname = view.symbols.qualname[node_id]
                found.update((qualname, name) for name in self.children.get(qualname, ()))
                attrs = view.attrs(node_id)
                if view.kind(node_id) == "python_module":
                    found.update((holder, name) for name in attrs.get("bindings", {}))
                    pending.extend((star, depth + 1) for star in attrs.get("stars", ()))
                elif is_class(view, node_id):
                    pending.extend((base, depth + 1) for base in attrs.get("bases", ()))
                    pending.extend(
                        (sub, depth + 1)
                        for sub in self.subclasses.get(view.symbols.name[node_id], ())
                    )
        return found


def python_view(symbols: SymbolTable) -> PythonView:
    """The view of ``symbols``, built on first use and kept with it for this link run."""
    view = getattr(symbols, "_python_view", None)
    if view is None:
        view = PythonView(symbols)
        symbols._python_view = view  # type: ignore[attr-defined]
    return view


def _bases(base: str | None) -> Iterator[str]:
    while base:
        yield base
        base = base.rpartition(".")[0]


# Ref attributes worth keeping on the edge (the edge is what queries and selection read).
PROPAGATED = ("lazy", "dynamic", "via", "method", "operator", "pattern")


def resolve(refs: list[Ref], symbols: SymbolTable) -> Iterable[Resolution]:
    view = python_view(symbols)
    for ref in refs:
        kept = {key: ref.attrs[key] for key in PROPAGATED if key in ref.attrs}
        for node_id, attrs in _resolve_py(view, ref):
            if kept:
                attrs = {**kept, **(attrs or {})}
            yield Resolution(ref.id, node_id, attrs)


def _resolve_py(view: PythonView, ref: Ref) -> list[tuple[int, dict[str, Any] | None]]:
    target = ref.target
    if ref.attrs.get("pattern"):
        return [(node_id, None) for node_id in view.matching(target, ref.kind == "imports")]
    if ref.attrs.get("method"):
        return [(node_id, None) for node_id in view.methods.get(target[1:], ())]
    receiver = ref.attrs.get("receiver")
    if receiver:
        owner, _, member = target.rpartition(".")
        if receiver == "super":
            found = resolve_member_of_bases(view, owner, member)
        else:
            found = view.python(target)
        if found and found[1]:
            return [(node_id, None) for node_id in found[0]]
        return []
    candidates = [target]
    candidates.extend(f"{base}.{target}" for base in _bases(ref.attrs.get("base")))
    for candidate in candidates:
        found = view.python(candidate)
        if found:
            nodes, exact = found
            named = [] if exact else view.named(candidate)
            if named:
                return [(node_id, None) for node_id in named]
            extra = None if exact else {"partial": True}
            return [(node_id, extra) for node_id in nodes]
        named = view.named(candidate)
        if named:
            return [(node_id, None) for node_id in named]
    return []


# --- OpInfo lists ------------------------------------------------------------------------


class OpinfoLists:
    """Members of every OpInfo list, closed over the per-module summaries."""

    def __init__(self, view: PythonView) -> None:
        self.view = view
        symbols = view.symbols
        self.direct: dict[str, list[int]] = defaultdict(list)
        self.entry_class: dict[int, str] = {}
        for node_id in view.opinfos:
            attrs = view.attrs(node_id)
            self.direct[attrs.get("list_qual", "")].append(node_id)
            self.entry_class[node_id] = attrs.get("info_class", "")
        self.summaries: dict[str, dict[str, Any]] = {}
        for module, node_id in view.modules.items():
            for name, summary in view.attrs(node_id).get("opinfo_lists", {}).items():
                self.summaries[f"{module}.{name}"] = summary
        self._members: dict[str, tuple[frozenset[int], str | None]] = {}
        self.all = frozenset(view.opinfos)
        del symbols

    def _ancestors(self, cls: str) -> set[str] | None:
        """``cls`` and every base class name up its hierarchy; None if it is not indexed."""
        bases = self.view.class_bases
        if cls not in self.view.class_names:
            return None
        seen = {cls}
        stack = [cls]
        while stack:
            for base in bases.get(stack.pop(), ()):
                if base not in seen:
                    seen.add(base)
                    stack.append(base)
        return seen

    def _matches(self, node_id: int, classes: list[str]) -> bool:
        cls = self.entry_class.get(node_id, "")
        if cls in classes:
            return True
        ancestors = self._ancestors(cls)
        return ancestors is None or bool(ancestors.intersection(classes))

    def members(
        self, name: str, active: frozenset[str] = frozenset()
    ) -> tuple[frozenset[int], str | None]:
        """(entries, why unknown) of the list ``name`` (a dotted module-level name)."""
        if name in self._members:
            return self._members[name]
        if name in active:  # a cycle adds nothing new
            return frozenset(), None
        active = active | {name}
        summary = self.summaries.get(name)
        if summary is None:
            result = self._follow(name, active)
        else:
            result = self.of_summary(summary, name, active)
        self._members[name] = result
        return result

    def _follow(self, name: str, active: frozenset[str]) -> tuple[frozenset[int], str | None]:
        """A name with no summary: a re-export of a list defined elsewhere, or unknown."""
        module, _, attr = name.rpartition(".")
        node_id = self.view.module(module)
        if node_id is not None:
            bound = self.view.attrs(node_id).get("bindings", {}).get(attr)
            if bound and bound != name:
                return self.members(bound, active)
        if name in self.direct:
            return frozenset(self.direct[name]), None
        if node_id is None and module:
            # A sibling module imported by its bare name from a test directory
            # (`from functorch_additional_op_db import additional_op_db`).
            found = [
                m
                for m in self._by_last.get(module.rsplit(".", 1)[-1], ())
                if m.endswith("." + module)
            ]
            if len(found) == 1:
                return self.members(f"{found[0]}.{attr}", active)
        return frozenset(), f"membership of {name} is not known to the index"

    @cached_property
    def _by_last(self) -> dict[str, list[str]]:
        index: dict[str, list[str]] = defaultdict(list)
        for module in self.view.modules:
            index[module.rsplit(".", 1)[-1]].append(module)
        return index

    def of_summary(
        self, summary: dict[str, Any], name: str, active: frozenset[str] = frozenset()
    ) -> tuple[frozenset[int], str | None]:
        if summary.get("unknown"):
            return frozenset(), f"{name}: {summary['unknown']}"
        found: set[int] = set(self.direct.get(name, ()))
        for part, classes in summary.get("parts", ()):
            members, unknown = self.members(part, active)
            if unknown:
                return frozenset(), unknown
            if classes:
                known = [c for c in classes if c in self.view.class_names]
                if known:  # an unknown filter class filters nothing: select more
                    members = frozenset(m for m in members if self._matches(m, classes))
            found.update(members)
        return frozenset(found), None


def resolve_opinfo(refs: list[Ref], symbols: SymbolTable) -> Iterable[Resolution]:
    view = python_view(symbols)
    lists = getattr(symbols, "_opinfo_lists", None)
    if lists is None:
        lists = OpinfoLists(view)
        symbols._opinfo_lists = lists  # type: ignore[attr-defined]
    for ref in refs:
        summary = ref.attrs.get("summary")
        if summary is not None:
            members, unknown = lists.of_summary(summary, ref.target)
        else:
            members, unknown = lists.members(ref.target)
        attrs: dict[str, Any] = {"fanout": True}
        rest = attrs
        if unknown:
            # The reason goes on the first edge only: PyTorch has ~230k of these edges, and
            # repeating a sentence on each doubled the size of the whole index.
            members = lists.all
            attrs = {**attrs, "all_opinfos": unknown}
            rest = {"fanout": True, "all_opinfos": True}
        for position, node_id in enumerate(sorted(members)):
            yield Resolution(ref.id, node_id, attrs if position == 0 else rest)


# --- pytest fixtures ---------------------------------------------------------------------


def resolve_fixtures(refs: list[Ref], symbols: SymbolTable) -> Iterable[Resolution]:
    view = python_view(symbols)
    for ref in refs:
        candidates = view.fixtures.get(ref.target, ())
        if not candidates:
            continue
        same_file = [n for n in candidates if symbols.file_id[n] == ref.file_id]
        if same_file:
            yield Resolution(ref.id, same_file[0], None)
            continue
        directory = ref.attrs.get("dir", "")
        best: tuple[int, int] | None = None
        for node_id in candidates:
            path = symbols.path_of(node_id)
            folder, _, filename = path.rpartition("/")
            if filename != "conftest.py":
                continue
            if folder == "" or directory == folder or directory.startswith(folder + "/"):
                depth = len(folder)
                if best is None or depth > best[0]:
                    best = (depth, node_id)
        if best is not None:
            yield Resolution(ref.id, best[1], None)


# --- registry names ----------------------------------------------------------------------


def resolve_registry(refs: list[Ref], symbols: SymbolTable) -> Iterable[Resolution]:
    """A string naming registry entries (indexer/python/registries.py): every entry so
    named, the ref's own source excepted (an alias naming its key). Several entries of
    one name (a key two tables hold) are each a place the string can load from: all are
    kept, as a fanout, not ambiguity. A model id (``org/name``) that no entry names may
    load any architecture its checkpoint declares: it resolves to the entries standing
    for any model id (one per examples table file), marked ``unmapped``, unless it is
    recognisably something else (``application/json``, ``csrc/ops.cpp``:
    registries.could_be_model_id)."""
    entries: dict[str, list[int]] = defaultdict(list)
    for node_id, kind in symbols.kind.items():
        if kind == NodeKind.REGISTRY_ENTRY.value:
            entries[symbols.name[node_id]].append(node_id)
    wildcards = entries.get(ANY_ID, [])
    for ref in refs:
        found = [n for n in entries.get(ref.target, ()) if n != ref.src_id]
        if not found and "/" in ref.target and ref.kind != EdgeKind.REGISTERS.value:
            if could_be_model_id(ref.target):
                for node_id in wildcards:
                    yield Resolution(ref.id, node_id, {"fanout": True, "unmapped": ref.target})
            continue
        for node_id in found:
            yield Resolution(ref.id, node_id, {"fanout": True} if len(found) > 1 else None)
