"""From changed entities back to the tests that reach them: reverse reachability.

Edges point from the user to the used, so impact flows backwards along most kinds (a
caller is affected by its callee, an op by its kernel, a test by what it covers). Two
kinds carry impact forwards: a structured kernel ``implements`` its op, and a derivative
entry ``derives`` its op (a changed formula helper reaches the derivative backwards, then
its op forwards).

Python needs care, or one reached class reaches everything:

- a method reaches its class (``contains`` backwards) only if it runs implicitly through
  the class: dunders (``C(...)`` runs ``__init__``), ``forward``, properties, methods the
  class or an ancestor hands out as values (``return self.forward_cuda``). A method
  called by name is reached through the ``obj.m()`` calls naming it, from files that can
  see its class (``indexer.select.bridges``), and through the calls of the methods it
  overrides (``indexer.select.overrides``);
- ``imports`` carries impact only from a module whose import runs changed code (changed
  at module level, or importing such a module). Importing a function runs none of its
  body; a module whose top-level code names a changed definition is affected as far as
  that statement goes (``module_scope``): run at import (its importers), bound to module
  names (their users), or only passed along (an op given to ``add_docstr``: nothing).
- library Python that names an op without calling it there (``get_testing_overrides``'
  table of every op) does not run its kernel, unless it keeps the op whole to call later
  (``self.op = torch.ops._C.silu_and_mul``, ``return torch.ops.x``); tests, OpInfo
  entries and any Python under the manifest's test and test-utility directories, which
  hand ops to harnesses (``opcheck(torch.ops._C.x, ...)``), count wherever they name it.

A decorated function reaches the registry its decorator fills (``@op.register_impl``).
An OpInfo entry reaches the ``@ops`` tests iterating its list through their ``covers``
edges. No depth cap; each node is visited once, so cycles end.

The walk is breadth-first over whole frontiers of 900 nodes, reading each batch's edges
from SQLite or the index's in-memory adjacency (``indexer.select.edge_rows``).
"""

from __future__ import annotations

import json

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.paths import under_any
from indexer.query.index import Index
from indexer.select import hub as hub_walks
from indexer.select import hub_chains
from indexer.select.bridges import Bridges, Found, placeholders
from indexer.select.deferral import Deferral
from indexer.select.edge_rows import EdgeRow, EdgeRows
from indexer.select.module_scope import ModuleStatements, StatementUse
from indexer.select.reach import FileQuota, Known, Reach, Step
from indexer.select.witness import Witnesses

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
_BATCH = 900


class ImpactWalker(Bridges, EdgeRows):
    """Reverse reachability over one index; reusable across walks.

    ``splice_hub``: once a full walk (no quota, no depth cap) makes the hub live, take
    what the hub reaches from the walk kept in the index, not walk it again
    (``indexer.select.hub``).

    ``keep``: hold what the walks derive (the hub's walk) for index
    maintenance to keep in the index (``indexer.select.derived``); a walker writes
    nothing (docs/selection.md, "A current index").
    """

    def __init__(
        self,
        index: Index,
        *,
        splice_hub: bool = False,
        keep: bool = False,
    ) -> None:
        Bridges.__init__(self)
        EdgeRows.__init__(self)
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
        walk's rules (``indexer.select.witness``); the nodes it adds, or [] if none
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
        """Everything that reaches the ``starts`` (node id -> entity index).

        ``quota`` stops the walk as soon as the reached nodes (starts included) lie in
        that many of its files; ``max_depth`` caps the hops (None: no cap, as selection
        walks); with a quota, ``known`` nodes end the walk (``known.reaches``) or are
        not gone on from (``known.reaches_none``): see :class:`Known`.
        """
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
            for start in range(0, len(frontier), _BATCH):
                if filling is not None and filling.full:
                    break
                batch = frontier[start : start + _BATCH]
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
