"""From changed entities back to the tests that reach them: reverse reachability over
the graph's edges (read from SQLite, or the index's adjacency once a walk is large), with
the steps no edge holds bridged by name (methods called by name, overrides, registries,
ops called through generated bindings). The rules: docs/selection.md, "From entities to
tests"."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.paths import under_any
from indexer.query import adjacency
from indexer.query.index import Index
from indexer.select import hub as hub_walks
from indexer.select import hub_chains
from indexer.select.hub_chains import Witnesses
from indexer.select.module_scope import Deferral, ModuleStatements, StatementUse
from indexer.select.reach import FileQuota, Known, Reach, Step

OVERRIDES = "overrides"  # C.m -> B.m: a call of B.m may run C.m
PYTHON_CLASS = NodeKind.PYTHON_CLASS.value
PYTHON_FUNCTION = NodeKind.PYTHON_FUNCTION.value
# What an autograd function's ``apply`` runs (besides ``forward``, implicit already).
AUTOGRAD_METHODS = frozenset({"backward", "setup_context", "jvp", "vjp", "vmap"})
PROPERTY_DECORATORS = frozenset({"property", "cached_property", "setter", "getter", "deleter"})
DECORATED_KINDS = frozenset({NodeKind.PYTHON_FUNCTION.value, NodeKind.PYTHON_CLASS.value})
# a decorated definition -> the registry its decorator fills
REGISTERS = EdgeKind.REGISTERS.value
RARE_METHOD_DEFINITIONS = 3  # a method name defined this rarely is matched by name alone
BATCH = 900
Found = tuple[int, Step, str, int]  # (node reached, how, its kind, its file id)
_API_PREFIXES = ("at::", "torch::", "::at::", "c10::")
_TENSOR_TYPES = frozenset({"Tensor", "TensorBase", "Tensor&", "TensorBase&"})
CHUNK = 2000  # adjacency rows made (and their ref names read) at a time
# Reached nodes after which building the adjacency (seconds on PyTorch, once per index
# version) costs less than querying SQLite for the rest of the walk.
ADJACENCY_AFTER = 3000
# (src, dst, edge kind, evidence file, line, src kind, src file, ref id or None)
EdgeRow = tuple[int, int, str, int, int, str, int, int | None]
# Edges the walk still reads from nodes it reached already: a module's references (it
# may widen) and a module's imports (reached for some names, it becomes live when what it
# imports does: ``import pkg.sub`` runs a changed ``pkg/__init__.py``).
REVISIT = frozenset(
    {(EdgeKind.REFERENCES.value, NodeKind.PYTHON_MODULE.value)}
    | {
        (EdgeKind.IMPORTS.value, kind.value)
        for kind in (NodeKind.PYTHON_MODULE, NodeKind.TEST_FILE, NodeKind.FILE)
    }
)
REVERSE_KINDS = (
    EdgeKind.CALLS.value,
    EdgeKind.LAUNCHES.value,
    EdgeKind.DISPATCHES.value,
    EdgeKind.BINDS.value,
    EdgeKind.DERIVES.value,
    EdgeKind.IMPORTS.value,
    EdgeKind.REFERENCES.value,
    EdgeKind.COVERS.value,
    EdgeKind.INCLUDES.value,
    EdgeKind.EXTERNAL_REF.value,
    EdgeKind.CONTAINS.value,
    EdgeKind.REGISTERS.value,
)
FORWARD_KINDS = (EdgeKind.IMPLEMENTS.value, EdgeKind.DERIVES.value)
CLASS_KINDS = frozenset({NodeKind.PYTHON_CLASS.value, NodeKind.TEST_CLASS.value})
MODULE = NodeKind.PYTHON_MODULE.value
OP = NodeKind.OP.value
DERIVATIVE = NodeKind.DERIVATIVE.value
CONTAINS = EdgeKind.CONTAINS.value
IMPORTS = EdgeKind.IMPORTS.value
REFERENCES = EdgeKind.REFERENCES.value
DERIVES = EdgeKind.DERIVES.value
COMPILED = frozenset({NodeKind.OP.value, NodeKind.BINDING.value})  # run only when called
# Library Python whose mention of an op counts only where it calls it. Tests, OpInfo
# entries and test helpers hand ops to harnesses that call them: any mention counts.
LIBRARY_PYTHON = frozenset(
    {NodeKind.PYTHON_FUNCTION.value, NodeKind.PYTHON_CLASS.value, NodeKind.PYTHON_MODULE.value}
)
MODULE_KINDS = frozenset(
    {NodeKind.PYTHON_MODULE.value, NodeKind.TEST_FILE.value, NodeKind.FILE.value}
)
# Hops from the change within which a walk that reached the hub by a kept chain goes
# on by itself before splicing, unless it has reached this many nodes (a header's
# includers: the near evidence is there by then, and the rest costs seconds).
NEAR_DEPTH = 4
NEAR_NODES = 3000
# Kinds whose walk state is more than their being reached (see _follow_leads).
STATEFUL = MODULE_KINDS | {NodeKind.PYTHON_FUNCTION.value, NodeKind.PYTHON_CLASS.value}


class ClassHierarchy:
    """Ancestor lookups over one index, cached per class."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._bases: dict[int, list[tuple[int, int | None, int]]] = {}
        self._methods: dict[tuple[int, str], tuple[int, int] | None] = {}
        self._value_methods: dict[int, frozenset[str]] = {}
        self._autograd: dict[int, bool] = {}

    def _direct_bases(self, class_id: int) -> list[tuple[int, int | None, int]]:
        """(base class id, file id, line) of each base of ``class_id`` found in the index."""
        if class_id in self._bases:
            return self._bases[class_id]
        conn = self.index.conn
        row = conn.execute(
            "SELECT attrs, file_id, line FROM nodes WHERE id = ?", (class_id,)
        ).fetchone()
        found: list[tuple[int, int | None, int]] = []
        if row is not None and row[0]:
            names = json.loads(row[0]).get("bases") or ()
            for name in names:
                base = conn.execute(
                    "SELECT id FROM nodes WHERE qualname = ? AND kind = ?", (name, PYTHON_CLASS)
                ).fetchone()
                if base is None:
                    continue
                # The `class C(B)` reference is the evidence; the class line if it is absent.
                edge = conn.execute(
                    "SELECT file_id, line FROM edges WHERE src_id = ? AND dst_id = ?"
                    " AND kind = 'references' LIMIT 1",
                    (class_id, base[0]),
                ).fetchone()
                file_id, line = edge if edge is not None else (row[1], row[2])
                found.append((base[0], file_id, line))
        self._bases[class_id] = found
        return found

    def autograd_function(self, class_id: int) -> bool:
        """Whether the class is an autograd function: it or an indexed ancestor names a base
        called ``Function`` or ``*Function`` (``torch.autograd.Function``,
        ``InplaceFunction``), whose ``apply`` runs its ``forward``, ``setup_context``,
        ``backward``, ``jvp`` and ``vmap``."""
        if class_id not in self._autograd:
            self._autograd[class_id] = False  # a cycle in the bases ends here
            row = self.index.conn.execute("SELECT attrs FROM nodes WHERE id = ?", (class_id,))
            attrs = (row.fetchone() or (None,))[0]
            bases = json.loads(attrs).get("bases") or () if attrs else ()
            self._autograd[class_id] = any(
                base.rsplit(".", 1)[-1].endswith("Function") for base in bases
            ) or any(self.autograd_function(base) for base, _, _ in self._direct_bases(class_id))
        return self._autograd[class_id]

    def value_methods(self, class_id: int) -> frozenset[str]:
        """Method names the class or an ancestor hands out as values (``return
        self.forward_cuda``, recorded by the extractor as ``value_methods``): whichever
        override an instance has runs through the instance, not through a call by name."""
        if class_id in self._value_methods:
            return self._value_methods[class_id]
        self._value_methods[class_id] = frozenset()  # a cycle in the bases ends here
        row = self.index.conn.execute("SELECT attrs FROM nodes WHERE id = ?", (class_id,))
        attrs = (row.fetchone() or (None,))[0]
        names = set(json.loads(attrs).get("value_methods") or ()) if attrs else set()
        for base, _, _ in self._direct_bases(class_id):
            names |= self.value_methods(base)
        self._value_methods[class_id] = frozenset(names)
        return self._value_methods[class_id]

    def _method(self, class_id: int, name: str) -> tuple[int, int] | None:
        """(id, file id) of the method ``name`` the class defines, if it does; asked once
        per class and name (methods of one class climb the same bases)."""
        key = (class_id, name)
        if key not in self._methods:
            conn = self.index.conn
            qualname = conn.execute("SELECT qualname FROM nodes WHERE id = ?", (class_id,))
            self._methods[key] = conn.execute(
                "SELECT id, file_id FROM nodes WHERE qualname = ? AND kind = ?",
                (f"{qualname.fetchone()[0]}.{name}", PYTHON_FUNCTION),
            ).fetchone()
        return self._methods[key]

    def overridden(self, method_id: int) -> list[tuple[int, int, int | None, int]]:
        """(ancestor method id, its file id, evidence file id, evidence line) of the nearest
        definition of the same name along each path up the bases of ``method_id``'s class;
        the evidence is the ``class C(B)`` line of the first step up."""
        conn = self.index.conn
        row = conn.execute(
            "SELECT name, parent_id FROM nodes WHERE id = ? AND kind = ?",
            (method_id, PYTHON_FUNCTION),
        ).fetchone()
        if row is None or row[1] is None:
            return []
        name, owner = row
        found: list[tuple[int, int, int | None, int]] = []
        seen = {owner}
        stack = [(base, file_id, line) for base, file_id, line in self._direct_bases(owner)]
        while stack:
            class_id, file_id, line = stack.pop()
            if class_id in seen:
                continue
            seen.add(class_id)
            method = self._method(class_id, name)
            if method is not None:
                # B.m, once reached, climbs on from its own class with its own evidence.
                found.append((method[0], method[1], file_id, line))
                continue
            stack += [(base, file_id, line) for base, _, _ in self._direct_bases(class_id)]
        return found


# Methods Python runs through their class or an instance's protocol, not by name: using
# the class is using them. Every dunder is one: ``C(...)`` runs ``__init__``, ``c[i]``
# ``__getitem__``, ``a + b`` ``__add__``, ``str(c)`` ``__str__``; no code need name them.
# (Operator dunders were once left out, as syntax on a class as common as Tensor reaches
# every test; the audit of PyTorch's Python then missed the tests indexing torch._numpy's
# ndarray. Reaching every test is what a change to Tensor.__rsub__ can do.)
# ``forward`` runs through nn.Module.__call__.
def runs_implicitly(name: str) -> bool:
    return name == "forward" or (len(name) > 4 and name.startswith("__") and name.endswith("__"))


def _like(text: str) -> str:
    """``text`` as a literal in a LIKE pattern escaped with a backslash."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def placeholders(values: list) -> str:
    return ",".join("?" * len(values))


def _python_bindings(name: str) -> tuple[str, ...]:
    return (f"._C.{name}", f"._C._VariableFunctions.{name}", f"._VF.{name}")


def _calls_op_api(target: str, attrs: str | None, keys: list[str]) -> bool:
    """Whether an unresolved call ``target`` may be the generated API of an op."""
    head, _, last = target.rpartition("::")
    if last.split("<", 1)[0] not in keys:
        return False
    if head:
        return (head + "::").startswith(_API_PREFIXES)
    receiver = json.loads(attrs).get("receiver") if attrs else None
    if receiver is None:
        return True  # an unqualified call or a method on an unknown type: may be the op
    receiver = receiver.replace("const ", "").replace("at::", "").strip()
    return receiver in _TENSOR_TYPES


class ImpactWalker:
    """Reverse reachability over one index; reusable across walks. ``splice_hub``: splice
    the hub's kept walk in once a full walk makes the hub live; ``keep``: hold what the
    walks derive, for index maintenance (``derived``) to keep; a walker writes nothing."""

    def __init__(
        self,
        index: Index,
        *,
        splice_hub: bool = False,
        keep: bool = False,
    ) -> None:
        self._method_names: dict[str, int] = {}  # method name -> how many define it
        self._users_of_file: dict[int, set[int]] = {}  # file -> files with edges into it
        self._hierarchy: ClassHierarchy | None = None
        self._untyped: dict[str, list[tuple[int, int, int, str, int]]] = {}
        # Per walker, as everything above: answers by name or file, however many reached
        # nodes ask (an op's overloads share a name; a file's definitions its refs).
        self._ops_named: dict[str, bool] = {}
        self._op_api_calls: dict[str, list[tuple[int, str, int, int, str, int]]] = {}
        self._decorator_refs: dict[int, list[tuple[int, str, int]]] = {}
        self._registries: dict[str, list[tuple[int, str, int]]] = {}
        self._targets: dict[int, str] = {}
        # Refs whose line names the target without running it (judged at extraction:
        # indexer.python.call_facts), among those whose targets were read.
        self._named_only: set[int] = set()
        self._graph: adjacency.Adjacency | None = None
        self._graph_looked = False
        self.index = index
        self.splice_hub = splice_hub
        self.keeps = keep
        self._hub: int | None = None
        self._hub_walk: hub_walks.HubWalk | None = None
        self.hub_use: str | None = None  # how a walk last met the hub, if one did
        self._lead = ""  # how the walk under way reached the hub, if by a kept chain
        self._witnesses: Witnesses | None = None
        # The walk judges no source: facts kept at extraction (docs/selection.md).
        self.statements = ModuleStatements(index)
        self.deferral = Deferral(index)
        manifest = json.loads(index.meta.get("manifest") or "{}")
        self.op_registrars = frozenset(manifest.get("python", {}).get("op_registrars", ()))
        tests = manifest.get("tests", {})
        self._test_dirs = [*tests.get("dirs", ()), *tests.get("utility_dirs", ())]
        self._test_side: frozenset[int] | None = None
        self._paths: dict[int, str] | None = None
        self._registrars_in: frozenset[int] | None = None

    def _file_paths(self) -> dict[int, str]:
        if self._paths is None:
            self._paths = dict(self.index.conn.execute("SELECT id, path FROM files"))
        return self._paths

    def _test_side_files(self) -> frozenset[int]:
        """Files under the manifest's test and test-utility directories: their Python
        hands ops to harnesses (``opcheck(torch.ops._C.rotary_embedding, ...)``), so
        naming an op there counts as running it, as in a test."""
        if self._test_side is None:
            self._test_side = frozenset(
                file_id
                for file_id, path in self._file_paths().items()
                if under_any(path, self._test_dirs)
            )
        return self._test_side

    def _module_use(self, reach: Reach, module: int, step: Step, file_id: int) -> list[Found]:
        """Top-level code of ``module`` names a reached definition (``step.dst``): does
        importing the module run it, which module names are bound to it, or which op is it
        registered as (then the op's callers are returned, to be reached next)?"""
        named = self.index.node(step.dst)
        asked: list[bool] = []

        def deferred() -> bool:
            asked.append(self.deferral.deferred(reach, named))
            return asked[-1]

        use = self.statements.use(
            file_id,
            step.line,
            named.name,
            named.kind in COMPILED,
            self.op_registrars,
            deferred,
        )
        if any(asked) and not use.run_at_import:
            reach.deferred_calls.append((module, named.id))
        if not use.run_at_import and use.names:
            derived = self.statements.derived(file_id, use.names)
            use = StatementUse(derived.run_at_import, derived.names, use.op_name)
        if use.run_at_import:
            reach.import_live.add(module)
            reach.module_names.pop(module, None)
            return []
        reach.module_names[module] = reach.module_names.get(module, frozenset()) | use.names
        if use.attribute is not None:
            return self._attribute_callers(step.dst, use.attribute)
        if use.op_name is None:
            return []
        return self._registered_op_callers(step.dst, use.op_name)

    def _undeferred(self, reach: Reach) -> list[int]:
        """Modules whose top-level call was judged to run none of the reached code, and
        does now that the walk has reached more: they run it at import after all."""
        flipped = []
        for module, named_id in reach.deferred_calls:
            if module in reach.import_live:
                continue
            if not self.deferral.deferred(reach, self.index.node(named_id)):
                reach.import_live.add(module)
                reach.module_names.pop(module, None)
                flipped.append(module)
        reach.deferred_calls = [d for d in reach.deferred_calls if d[0] not in reach.import_live]
        return flipped

    def _widen_module(
        self, reach: Reach, module: int, step: Step, kind: str, file_id: int, found: list[Found]
    ) -> bool:
        """A module already reached, named again by another top-level statement: whether
        more of it is affected now (so its users must be walked again)."""
        if kind != MODULE or step.kind != REFERENCES:
            return False
        if module not in reach.module_names:
            # Already fully affected; but the statement may register the definition as
            # an op, which runs wherever the op is called, whichever was reached first.
            found += self._registered_at_top(step, file_id)
            return False
        before = reach.module_names[module]
        found += self._module_use(reach, module, step, file_id)
        after = reach.module_names.get(module)
        return after is None or after != before

    def _registered_at_top(self, step: Step, file_id: int) -> list[Found]:
        """The callers of the op a top-level statement (at ``step.line``) registers the
        reached definition ``step.dst`` as, if it does (``[python] op_registrars``)."""
        if file_id not in self._registrar_files():
            return []
        named = self.index.node(step.dst)
        use = self.statements.use(
            file_id, step.line, named.name, named.kind in COMPILED, self.op_registrars, lambda: True
        )
        return [] if use.op_name is None else self._registered_op_callers(step.dst, use.op_name)

    def _registrar_files(self) -> frozenset[int]:
        """Files with a call naming one of the manifest's op registrars (read once)."""
        if self._registrars_in is None:
            names = sorted(self.op_registrars)
            self._registrars_in = (
                frozenset()
                if not names
                else frozenset(
                    file_id
                    for (file_id,) in self.index.conn.execute(
                        f"SELECT DISTINCT file_id FROM refs WHERE target_key IN ({placeholders(names)})",
                        names,
                    )
                )
            )
        return self._registrars_in

    def _hub_node(self) -> int | None:
        if self._hub is None:
            hub = hub_walks.find_hub(self.index)
            self._hub = -1 if hub is None else hub
        return self._hub if self._hub >= 0 else None

    def _splice(self, reach: Reach, hub: int, frontier: list[int]) -> list[int]:
        """Add the hub's walk to ``reach``, in which the hub has just become live, and
        return what of ``frontier`` is left to expand: the hub's walk expanded its other
        nodes already, in the same state (a module's state may differ: modules stay)."""
        use = "read from the walk kept in the index"
        if self._hub_walk is None:
            self._hub_walk, _ = hub_walks.kept_walk(self.index)
            if self._hub_walk is None or self._hub_walk.hub != hub:
                use = "walked; no walk was kept for this index"
                self._hub_walk = hub_walks.HubWalk.of(hub, self._walk({hub: 0}, None, None))
                if self.keeps:
                    use = "walked, and kept in the index"
        added = self._hub_walk.splice_into(reach)
        name = self.index.node(hub).qualname
        self.hub_use = f"{added} nodes past the hub {name}: {use}{self._lead}"
        self._lead = ""
        self._witness_store().record(reach, hub)
        expanded = self._hub_walk.rows
        return [n for n in frontier if n not in expanded or reach.kind.get(n) in MODULE_KINDS]

    def _witness_store(self) -> Witnesses:
        if self._witnesses is None:
            kept = hub_chains.load(self.index)  # derived by the refresh for this index
            chains, ids = (kept.chains(), kept.chain_ids) if kept is not None else ([], [])
            self._witnesses = Witnesses(self.index, chains, ids)
        return self._witnesses

    def lead_by(self, witnesses: Witnesses) -> None:
        """Follow these chains to the hub, not those kept for the index."""
        self._witnesses = witnesses

    def _follow_leads(self, reach: Reach, frontier: list[int], hub: int) -> list[int]:
        """Follow a kept chain to the hub from a node about to be expanded, by this
        walk's rules (``indexer.select.hub_chains``); the nodes it adds, or [] if none
        leads there. Only from a start, or a node whose state is its being reached: a
        Python definition's depends on the step that reached it (deferral), a module's
        on what of it is affected, and a chain followed from one alone would not know."""
        witnesses = self._witness_store()
        if not witnesses:
            return []
        for node_id in frontier:
            if reach.steps.get(node_id) is not None and reach.kind.get(node_id) in STATEFUL:
                continue
            for lead in witnesses.leads(node_id):
                followed = self._walk({node_id: 0}, None, None, only=lead.only)
                reached = hub in followed.import_live
                witnesses.followed(node_id, lead, followed, reached)
                if reached:
                    name = self.index.node(node_id).qualname
                    self._lead = f"; reached by a kept chain ({len(lead.chain)} nodes, from {name})"
                    return reach.graft(followed, node_id)
        return []

    def walk(
        self,
        starts: dict[int, int],
        quota: FileQuota | None = None,
        max_depth: int | None = None,
        known: Known | None = None,
    ) -> Reach:
        """Everything that reaches the ``starts`` (node id -> entity index). ``quota``
        stops once the reached nodes lie in that many of its files; ``max_depth`` caps the
        hops; with a quota, ``known`` nodes end the walk or are not gone on from."""
        splice = self.splice_hub and quota is None and max_depth is None
        return self._walk(starts, quota, max_depth, splice, known=known)

    def walk_to_hub(self, start: int) -> Reach:
        """Walk from ``start`` only until the hub goes live, giving the chain that got
        there to the witnesses (``indexer.select.hub_chains`` keeps it)."""
        return self._walk({start: 0}, None, None, splice=True, stop_at_hub=True)

    @property
    def hub_walk(self) -> hub_walks.HubWalk | None:
        """The hub's walk this walker spliced (kept, carried or walked), if it met the hub."""
        return self._hub_walk

    def _walk(
        self,
        starts: dict[int, int],
        quota: FileQuota | None,
        max_depth: int | None,
        splice: bool = False,
        only: frozenset[int] | None = None,
        stop_at_hub: bool = False,
        known: Known | None = None,
    ) -> Reach:
        """The walk; ``only``: the nodes it may reach besides the starts (following a
        kept chain to the hub), None for all; ``stop_at_hub``: return once the hub is
        live, keeping the chain there (with ``splice``)."""
        reach = Reach()
        hub = self._hub_node() if splice else None
        for node_id, kind, file_id in self._node_rows(list(starts)):
            reach.steps[node_id] = None
            reach.origin[node_id] = starts[node_id]
            reach.kind[node_id] = kind
            reach.file_id[node_id] = file_id
            if kind in MODULE_KINDS:
                reach.import_live.add(node_id)
            if quota is not None:
                quota.add(file_id)
        if quota is not None and quota.full:
            return reach
        frontier = list(reach.steps)
        test_side = self._test_side_files()
        tests = self.index.test_file_paths()
        reverse = list(REVERSE_KINDS)
        forward = list(FORWARD_KINDS)
        depth = 0
        # Nodes reached by a kept chain, by depth: each expanded in its turn, as if the
        # walk had reached it, until the hub's walk is spliced.
        held: dict[int, list[int]] = {}
        splice_at = 0  # the depth from which the hub's walk may be spliced
        while True:
            if hub is not None and hub not in reach.import_live and frontier:
                for node_id in self._follow_leads(reach, frontier, hub):
                    held.setdefault(reach.depth[node_id], []).append(node_id)
                # The nearest evidence first: what the change reaches within a few hops
                # of it keeps its own chain, not one through the hub.
                splice_at = NEAR_DEPTH if held else 0
            frontier += held.pop(depth, [])
            if stop_at_hub and hub is not None and hub in reach.import_live:
                self._witness_store().record(reach, hub)
                return reach
            if (
                hub is not None
                and hub in reach.import_live
                and (depth >= splice_at or not frontier or len(reach.steps) >= NEAR_NODES)
            ):
                rest = [node_id for nodes in held.values() for node_id in nodes]
                frontier = self._splice(reach, hub, frontier + rest)
                hub, held = None, {}
            if not frontier:
                frontier = self._undeferred(reach)
            if not frontier or (max_depth is not None and depth >= max_depth):
                return reach
            depth += 1
            self.graph(len(reach.steps))
            found: list[tuple[int, Step, str, int]] = []
            explicit = self._explicit_methods(frontier, reach)
            if explicit:
                found += self._method_callers(explicit, reach.steps, reach.file_id)
                # A class of a test file overriding a library method runs only where the
                # test (or a test importing it) makes one: that file is selected already,
                # and every caller of the library's method is no evidence of more. (Not
                # so for a test utility's class: the tests handing it to the library are
                # found through those callers.)
                found += self._overridden(
                    {m: name for m, name in explicit.items() if reach.file_id[m] not in tests}
                )
            found += self._registrations(frontier, reach)
            steps, live = reach.steps, reach.import_live

            def asks_target(row: EdgeRow) -> bool:
                """Whether the loop below reads the row's ref name (see its conditions)."""
                return row[1] in reach.module_names or (
                    row[2] == REFERENCES
                    and row[5] in LIBRARY_PYTHON
                    and reach.kind.get(row[1]) in COMPILED
                )

            # Nodes found already in this round: the first step found to a node is the one
            # kept, so later ones are not built (nor their calls judged), save those that
            # may widen a module reached for some names (see below).
            pending = {entry[0] for entry in found}
            # The files the found entries lie in, counted as the loop at the end will
            # (in order; an entry reached already has its file counted): once they fill
            # the quota, that loop stops at or before the last of them, so no later edge
            # matters and none is read.
            filling = (
                None if quota is None else FileQuota(quota.files, quota.count, set(quota.reached))
            )
            if filling is not None:
                for entry in found:
                    filling.add(entry[3])
            for start in range(0, len(frontier), BATCH):
                if filling is not None and filling.full:
                    break
                batch = frontier[start : start + BATCH]
                rows = self._rows_into(batch, reverse, reach.steps, asks_target)
                for src, dst, kind, file_id, line, src_kind, src_file, ref_id in rows:
                    if only is not None and src not in only:
                        continue
                    if src in steps and not (
                        (kind == REFERENCES and src_kind == MODULE)
                        or (kind == IMPORTS and src_kind in MODULE_KINDS and src not in live)
                    ):
                        continue  # reached already (a module may yet widen or go live)
                    if (
                        src in pending
                        and not (kind == REFERENCES and src_kind == MODULE)
                        and not (kind == IMPORTS and src_kind in MODULE_KINDS)
                    ):
                        continue
                    if kind == CONTAINS and (src_kind not in CLASS_KINDS or dst in explicit):
                        continue
                    if kind == IMPORTS and dst not in reach.import_live:
                        continue  # importing a name runs none of its body
                    names = reach.module_names.get(dst)
                    if (
                        names is not None
                        and ref_id is not None  # a local edge names no module attribute
                        and not names.intersection(self._target(ref_id).split("."))
                    ):
                        continue  # uses a module name the changed code is not bound to
                    if (
                        kind == REFERENCES
                        and src_kind in LIBRARY_PYTHON
                        and reach.kind.get(dst) in COMPILED
                        and src_file not in test_side
                        and not self._runs_named(ref_id)
                    ):
                        continue  # names the op without running it (a table, a key)
                    pending.add(src)
                    found.append(
                        (src, Step(dst, kind, src, dst, file_id, line), src_kind, src_file)
                    )
                    if filling is not None and filling.add(src_file):
                        break
                if filling is not None and filling.full:
                    break
                for src, dst, kind, file_id, line, dst_kind, dst_file in self._rows_out_of(
                    batch, forward
                ):
                    if dst in steps or dst in pending or (only is not None and dst not in only):
                        continue
                    if kind == DERIVES and not (
                        reach.kind.get(src) == DERIVATIVE and dst_kind == OP
                    ):
                        continue
                    pending.add(dst)
                    found.append(
                        (dst, Step(src, kind, src, dst, file_id, line), dst_kind, dst_file)
                    )
                    if filling is not None and filling.add(dst_file):
                        break
            ops = [n for n in frontier if reach.kind.get(n) == OP]
            if ops and not (filling is not None and filling.full):
                found += self._dispatcher_callers(ops, reach.steps)
            frontier = []
            for node_id, step, kind, file_id in found:  # grows: registered ops' callers
                if only is not None and node_id not in only:
                    continue
                if known is not None and node_id in known.reaches_none:
                    continue  # a walk from it met no test: nothing to find past it
                if node_id in reach.steps:
                    if step.kind == IMPORTS and kind in MODULE_KINDS:
                        if node_id not in reach.import_live:
                            # reached before for some names; its import runs changed code
                            reach.import_live.add(node_id)
                            reach.module_names.pop(node_id, None)
                            frontier.append(node_id)
                    elif self._widen_module(reach, node_id, step, kind, file_id, found):
                        frontier.append(node_id)  # more of its names are affected now
                    continue
                reach.steps[node_id] = step
                reach.depth[node_id] = depth
                reach.origin[node_id] = reach.origin[step.prev]
                reach.kind[node_id] = kind
                reach.file_id[node_id] = file_id
                if step.kind == IMPORTS and kind in MODULE_KINDS:
                    reach.import_live.add(node_id)  # importing it runs changed module code
                elif step.kind == REFERENCES and kind == MODULE:
                    found += self._module_use(reach, node_id, step, file_id)
                frontier.append(node_id)
                if quota is not None and quota.add(file_id):
                    return reach
                if known is not None and node_id in known.reaches:
                    return reach  # a test is reached through it

    def _registrations(self, frontier: list[int], reach: Reach) -> list[tuple[int, Step, str, int]]:
        """The registries decorated definitions of the frontier fill (``@op.register_impl``:
        what the decorator names before its last attribute, or an op its arguments name);
        test files' definitions register nothing another test file can reach."""
        test_files = self.index.test_file_paths()
        ids = [
            n
            for n in frontier
            if reach.kind.get(n) in DECORATED_KINDS and reach.file_id.get(n) not in test_files
        ]
        found = []
        conn = self.index.conn
        decorated: dict[int, dict[int, int]] = {}  # file id -> node id -> its def line
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            for node_id, line, file_id in conn.execute(
                f"SELECT id, line, file_id FROM nodes WHERE id IN ({placeholders(batch)})"
                " AND attrs LIKE '%\"decorators\"%'",
                batch,
            ):
                decorated.setdefault(file_id, {})[node_id] = line
        for file_id, lines in decorated.items():
            for node_id, line in lines.items():
                for dst, ref_line, dst_kind, dst_file in conn.execute(
                    "SELECT e.dst_id, e.line, d.kind, d.file_id FROM edges e"
                    " JOIN nodes d ON d.id = e.dst_id"
                    " WHERE e.src_id = ? AND e.line < ? AND d.kind = 'op'",
                    (node_id, line),
                ):
                    step = Step(node_id, REGISTERS, node_id, dst, file_id, ref_line)
                    found.append((dst, step, dst_kind, dst_file))
            for src, target, ref_line in self._unresolved_dotted(file_id):
                if src not in lines or ref_line >= lines[src]:
                    continue  # not a decorator line of a reached definition
                for dst, dst_kind, dst_file in self._registry_nodes(target):
                    step = Step(src, REGISTERS, src, dst, file_id, ref_line)
                    found.append((dst, step, dst_kind, dst_file))
        return found

    def _unresolved_dotted(self, file_id: int) -> list[tuple[int, str, int]]:
        """(src, target, line) of the file's unresolved dotted ``py`` refs; refs has no
        index on src_id, so a file's are read once per walker."""
        if file_id not in self._decorator_refs:
            self._decorator_refs[file_id] = self.index.conn.execute(
                "SELECT r.src_id, r.target, r.line FROM refs r WHERE r.file_id = ?"
                " AND r.scheme = 'py' AND r.target LIKE '%.%'"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                (file_id,),
            ).fetchall()
        return self._decorator_refs[file_id]

    def _registry_nodes(self, target: str) -> list[tuple[int, str, int]]:
        if target not in self._registries:
            self._registries[target] = self._find_registry_nodes(target)
        return self._registries[target]

    def _find_registry_nodes(self, target: str) -> list[tuple[int, str, int]]:
        """Definitions a decorator's dotted base may name: exactly, or re-exported from a
        submodule of its package (``vllm.ir.ops.rms_norm`` is ``vllm.ir.ops.layernorm.rms_norm``),
        a module included (``@torch._dynamo.register_backend`` fills a table of that package)."""
        base = target.rsplit(".", 1)[0]
        if "." not in base:
            return []
        rows = self.index.conn.execute(
            "SELECT id, kind, file_id FROM nodes WHERE qualname = ?"
            " AND kind NOT IN ('file', 'test_file')",
            (base,),
        ).fetchall()
        if rows:
            return rows
        package, _, name = base.rpartition(".")
        return [
            (node_id, kind, file_id)
            for node_id, kind, file_id, qualname in self.index.conn.execute(
                "SELECT id, kind, file_id, qualname FROM nodes WHERE name = ?"
                " AND kind IN ('python_function', 'python_class')",
                (name,),
            )
            if qualname.startswith(package + ".") and qualname.count(".") == base.count(".") + 1
        ]

    def _explicit_methods(self, frontier: list[int], reach: Reach) -> dict[int, str]:
        """Python methods of the frontier that run only when called by name (``obj.m()``),
        id -> name; the others run implicitly, through their class (docs/selection.md)."""
        ids = [n for n in frontier if reach.kind.get(n) == NodeKind.PYTHON_FUNCTION.value]
        explicit: dict[int, str] = {}
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            for node_id, name, attrs, owner in self.index.conn.execute(
                f"SELECT id, name, attrs, parent_id FROM nodes WHERE id IN ({placeholders(batch)})"
                " AND attrs LIKE '%\"method\":true%'",
                batch,
            ):
                data = json.loads(attrs)
                decorators = {d.rsplit(".", 1)[-1] for d in data.get("decorators") or ()}
                implicit = runs_implicitly(name) or bool(decorators & PROPERTY_DECORATORS)
                if name in AUTOGRAD_METHODS and owner is not None:
                    implicit = implicit or self._classes().autograd_function(owner)
                if data.get("method") and not implicit and not self._handed_out(owner, name):
                    explicit[node_id] = name
        return explicit

    def _handed_out(self, owner: int | None, name: str) -> bool:
        return owner is not None and name in self._classes().value_methods(owner)

    def _classes(self) -> ClassHierarchy:
        if self._hierarchy is None:
            self._hierarchy = ClassHierarchy(self.index)
        return self._hierarchy

    def _untyped_calls(self, name: str) -> list[tuple[int, int, int, str, int]]:
        """(src, file, line, src kind, src file) of the unresolved ``obj.name(...)`` refs:
        read once per walker, however many methods of that name the walk reaches."""
        if name not in self._untyped:
            self._untyped[name] = self.index.conn.execute(
                "SELECT r.src_id, r.file_id, r.line, n.kind, n.file_id"
                " FROM refs r JOIN nodes n ON n.id = r.src_id"
                " WHERE r.target_key = ? AND r.scheme = 'py' AND r.target = ?"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
                (name, f".{name}"),
            ).fetchall()
        return self._untyped[name]

    def _method_callers(
        self,
        methods: dict[int, str],
        reached: dict[int, Step | None],
        files: dict[int, int],
    ) -> list[tuple[int, Step, str, int]]:
        """Callers of methods by name: an unresolved ``.m`` ref is a call of C's ``m`` where
        the calling file can see C (C's file, or one using C's module), or where few classes
        define ``m`` and no op is called ``m``."""
        found = []
        for method_id, name in methods.items():
            method_file = files[method_id]  # the methods are reached: their files are known
            rare = self._definitions_named(name) <= RARE_METHOD_DEFINITIONS and not self._op_named(
                name
            )
            users = None if rare else self._files_using(method_file)
            for src, file_id, line, src_kind, src_file in self._untyped_calls(name):
                if src in reached:
                    continue
                if users is not None and src_file != method_file and src_file not in users:
                    continue
                step = Step(method_id, EdgeKind.CALLS.value, src, method_id, file_id, line)
                found.append((src, step, src_kind, src_file))
        return found

    def _overridden(self, methods: dict[int, str]) -> list[tuple[int, Step, str, int]]:
        """Each method's overridden ancestors: a call of ``B.m`` may run ``C.m``."""
        found = []
        for method_id in methods:
            for ancestor, ancestor_file, file_id, line in self._classes().overridden(method_id):
                step = Step(method_id, OVERRIDES, method_id, ancestor, file_id, line)
                found.append((ancestor, step, NodeKind.PYTHON_FUNCTION.value, ancestor_file))
        return found

    def _registered_op_callers(self, definition: int, op_name: str) -> list[Found]:
        """A Python function registered as an op runs where ``torch.ops.<ns>.<op_name>(...)``
        is called: those calls (unresolved ``py`` refs: the op is made at run time) reach it."""
        return [
            (src, Step(definition, EdgeKind.CALLS.value, src, definition, file_id, line), kind, nf)
            for src, file_id, line, kind, nf in self.index.conn.execute(
                "SELECT r.src_id, r.file_id, r.line, n.kind, n.file_id"
                " FROM refs r JOIN nodes n ON n.id = r.src_id"
                " WHERE r.target_key = ? AND r.scheme = 'py' AND r.target LIKE 'torch.ops.%'",
                (op_name,),
            )
        ]

    def _attribute_callers(self, definition: int, attribute: str) -> list[Found]:
        """A Python function installed as ``Cls.attr`` at import runs where ``.attr(...)``
        is called on an object the index cannot type, or ``Cls.attr`` is named (resolved
        or not: the class defines no ``attr`` of its own)."""
        name = attribute.rpartition(".")[2]
        return [
            (src, Step(definition, EdgeKind.CALLS.value, src, definition, file_id, line), kind, nf)
            for src, file_id, line, kind, nf in self.index.conn.execute(
                "SELECT r.src_id, r.file_id, r.line, n.kind, n.file_id"
                " FROM refs r JOIN nodes n ON n.id = r.src_id"
                " WHERE r.target_key = ? AND r.scheme = 'py' AND (r.target = ? OR r.target = ?"
                " OR r.target LIKE ? ESCAPE '\\')",
                (name, f".{name}", attribute, "%." + _like(attribute)),
            )
        ]

    def _op_named(self, name: str) -> bool:
        """Whether an op or binding is called ``name``: then ``x.name()`` is most likely a
        tensor method call, not a call of the few Python methods of that name."""
        if name not in self._ops_named:
            self._ops_named[name] = (
                self.index.conn.execute(
                    "SELECT 1 FROM nodes WHERE name = ? AND kind IN ('op', 'binding') LIMIT 1",
                    (name,),
                ).fetchone()
                is not None
            )
        return self._ops_named[name]

    def _definitions_named(self, name: str) -> int:
        if name not in self._method_names:
            self._method_names[name] = self.index.conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE name = ? AND kind = 'python_function'"
                " AND attrs LIKE '%\"method\":true%'",
                (name,),
            ).fetchone()[0]
        return self._method_names[name]

    def _files_using(self, file_id: int) -> set[int]:
        """Files with an edge into ``file_id``'s definitions (importing, naming, testing)."""
        if file_id not in self._users_of_file:
            self._users_of_file[file_id] = {
                row[0]
                for row in self.index.conn.execute(
                    "SELECT DISTINCT e.file_id FROM edges e JOIN nodes d ON d.id = e.dst_id"
                    " WHERE d.file_id = ? AND e.kind IN ('imports', 'references', 'covers',"
                    " 'calls')",
                    (file_id,),
                )
            }
        return self._users_of_file[file_id]

    def _dispatcher_callers(
        self, op_ids: list[int], reached: dict[int, Step | None]
    ) -> list[tuple[int, Step, str, int]]:
        """Code calling aten ops through generated bindings the index never sees (C++
        ``at::addmm(...)``, ``self.t()``; Python ``torch._C.add``, ``torch._VF.add``): the
        unresolved refs matched to the op by name."""
        found = []
        for op in self.index.nodes(op_ids):
            if not op.qualname.startswith("aten::"):
                continue
            for src, kind, file_id, line, src_kind, src_file in self._op_api_callers(op.name):
                if src in reached:
                    continue
                found.append(
                    (src, Step(op.id, kind, src, op.id, file_id, line), src_kind, src_file)
                )
        return found

    def _op_api_callers(self, name: str) -> list[tuple[int, str, int, int, str, int]]:
        """(src, edge kind, file, line, src kind, src file) of the unresolved calls that may
        be the generated API of the aten ops called ``name``: read once per name (an op's
        overloads share it)."""
        if name in self._op_api_calls:
            return self._op_api_calls[name]
        keys = [name, f"{name}_out", f"{name}_outf"]
        calls = []
        for (
            src,
            file_id,
            line,
            scheme,
            target,
            attrs,
            src_kind,
            src_file,
        ) in self.index.conn.execute(
            "SELECT r.src_id, r.file_id, r.line, r.scheme, r.target, r.attrs, n.kind,"
            " n.file_id FROM refs r JOIN nodes n ON n.id = r.src_id"
            f" WHERE r.target_key IN ({placeholders(keys)}) AND r.scheme IN ('cpp', 'py')"
            " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)",
            keys,
        ):
            if scheme == "cpp" and _calls_op_api(target, attrs, keys):
                kind = EdgeKind.CALLS.value
            elif scheme == "py" and target.endswith(_python_bindings(name)):
                kind = EdgeKind.REFERENCES.value
            else:
                continue
            calls.append((src, kind, file_id, line, src_kind, src_file))
        self._op_api_calls[name] = calls
        return calls

    def graph(self, reached: int = 0) -> adjacency.Adjacency | None:
        """The index's adjacency: read from the index if it keeps one derived for its
        graph, else built once the walk has reached ``ADJACENCY_AFTER`` nodes; None before."""
        if self._graph is None and not self._graph_looked:
            self._graph_looked = True
            self._graph = adjacency.cached(self.index.db_path, self.index.conn, self.index.meta)
        if self._graph is None and reached >= ADJACENCY_AFTER:
            self._graph = adjacency.shared(self.index.db_path, self.index.conn, self.index.meta)
        return self._graph

    def _target(self, ref_id: int | None) -> str:
        """The name as written of the ref an edge came from ('' for local edges)."""
        if ref_id is None:
            return ""
        if ref_id not in self._targets:
            self._load_targets([ref_id])
        return self._targets[ref_id]

    def _runs_named(self, ref_id: int | None) -> bool:
        """Whether the line of the ref an edge came from runs what it names (local
        edges do)."""
        if ref_id is None:
            return True
        self._target(ref_id)
        return ref_id not in self._named_only

    def _load_targets(self, ref_ids: list[int]) -> None:
        """Read the targets of many refs at once (one query per 900)."""
        wanted = list({r for r in ref_ids if r not in self._targets})
        for start in range(0, len(wanted), BATCH):
            batch = wanted[start : start + BATCH]
            found = {}
            for ref_id, target, named_only in self.index.conn.execute(
                "SELECT id, target, json_extract(attrs, '$.named_only') FROM refs"
                f" WHERE id IN ({placeholders(batch)})",
                batch,
            ):
                found[ref_id] = target
                if named_only:
                    self._named_only.add(ref_id)
            for ref_id in batch:
                self._targets[ref_id] = found.get(ref_id) or ""

    def _node_rows(self, ids: list[int]) -> list[tuple[int, str, int]]:
        graph = self.graph()
        if graph is not None:
            # In id order, as SQLite returns the rows of an IN list.
            ids = sorted(set(ids))
            return [(n, graph.kind(n), graph.file(n)) for n in ids if graph.kind(n) is not None]
        rows = []
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            rows += self.index.conn.execute(
                f"SELECT id, kind, file_id FROM nodes WHERE id IN ({placeholders(batch)})", batch
            ).fetchall()
        return rows

    def _from_sqlite(
        self, end: str, other: str, extra: str, batch: list[int], kinds: list[str]
    ) -> list[tuple]:
        """Edges of ``kinds`` whose ``end`` is in ``batch``, with the kind and file of the
        node at their ``other`` end (and ``extra`` columns), as the adjacency gives them."""
        return self.index.conn.execute(
            f"SELECT e.src_id, e.dst_id, e.kind, e.file_id, e.line, n.kind, n.file_id{extra}"
            f" FROM edges e JOIN nodes n ON n.id = e.{other}"
            f" WHERE e.{end} IN ({placeholders(batch)}) AND e.kind IN ({placeholders(kinds)})",
            [*batch, *kinds],
        ).fetchall()

    def _rows_into(
        self,
        batch: list[int],
        kinds: list[str],
        seen: dict[int, Any],
        asks_target: Callable[[EdgeRow], bool],
    ) -> Iterator[EdgeRow]:
        """Edges of ``kinds`` into ``batch``: (src, dst, kind, file, line, src kind, src
        file, ref id), ordered by dst, kind, edge id. From the adjacency, edges from
        ``seen`` nodes are left out (the walk skips them, save a module's references,
        which may widen it), rows are made as the walk takes them (it may stop early),
        and the names of the refs ``asks_target`` of are read in one query per chunk."""
        graph = self.graph()
        if graph is None:
            yield from self._from_sqlite("dst_id", "src_id", ", e.ref_id", batch, kinds)
            return
        rows = graph.into_unseen(batch, graph.codes(kinds), seen, REVISIT)
        while chunk := list(islice(rows, CHUNK)):
            self._load_targets([row[7] for row in chunk if row[7] is not None and asks_target(row)])
            yield from chunk

    def _rows_out_of(self, batch: list[int], kinds: list[str]) -> list[tuple]:
        """Edges of ``kinds`` out of ``batch``: (src, dst, kind, file, line, dst kind, dst
        file), ordered by src, kind, edge id."""
        graph = self.graph()
        if graph is None:
            return self._from_sqlite("src_id", "dst_id", "", batch, kinds)
        return [
            (src, dst, kind, file_id, line, graph.kind(dst), graph.file(dst))
            for src, dst, kind, file_id, line, _ in graph.out_of(batch, graph.codes(kinds))
            if graph.kind(dst) is not None
        ]
