"""What a walk reached, and how: each node's first step back towards a changed entity,
so following steps from any node leads back to a start; and that chain rendered as a
reason (``reasons_for``: the one rendering, for selections and the MCP ``affected``)."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from indexer.graph.vocabulary import Extractor
from indexer.query.index import Index
from indexer.select.model import READS_PATH, Entity, Hop, Reason

FAST, PRECISE = Extractor.FAST.value, Extractor.PRECISE.value


def reasons_for(
    index: Index,
    reach: Reach,
    node_ids: list[int],
    entities: list[Entity],
    paths: dict[int, str],
) -> list[Reason]:
    """The chain of steps from a changed entity out to each of ``node_ids``, with
    evidence; the nodes of all the chains read in one query (a central change selects
    ~900 files, each chain ~15 hops)."""
    chains = [reach.chain(node_id) for node_id in node_ids]
    ids = set(node_ids)
    for steps in chains:
        ids.update(step.src for step in steps)
        ids.update(step.dst for step in steps)
    nodes = {node.id: node for node in index.nodes(ids)}
    precise = index.precise_edges()
    return [
        _reason(reach, node_id, steps, entities, paths, nodes, precise)
        for node_id, steps in zip(node_ids, chains, strict=True)
    ]


def _reason(
    reach: Reach,
    node_id: int,
    steps: list,
    entities: list[Entity],
    paths: dict[int, str],
    nodes: dict[int, object],
    precise: frozenset[tuple[int, int, int]] = frozenset(),
) -> Reason:
    entity = entities[reach.origin[node_id]]
    hops = [
        Hop(
            step.kind,
            _label(nodes, step.src),
            _label(nodes, step.dst),
            f"{paths.get(step.file_id, '?')}:{step.line}",
            _kind(nodes, step.src),
            _kind(nodes, step.dst),
            PRECISE if (step.src, step.dst, step.line) in precise else FAST,
        )
        for step in steps
    ]
    if not hops:
        node = nodes.get(node_id)
        note = f"{node.qualname} changed" if node is not None else ""
        if entity.kind == READS_PATH:
            note = entity.reason  # the test itself is unchanged: it reads a changed file
        return Reason(entity.label, entity.evidence, note=note)
    return Reason(entity.label, entity.evidence, hops)


def _label(nodes: dict[int, object], node_id: int) -> str:
    node = nodes.get(node_id)
    return getattr(node, "qualname", str(node_id))


def _kind(nodes: dict[int, object], node_id: int) -> str:
    return getattr(nodes.get(node_id), "kind", "")


class Step(NamedTuple):
    """How a node was first reached: the edge, and the node it was reached from. (A
    tuple: a walk makes tens of thousands, and splices in as many at once.)"""

    prev: int
    kind: str
    src: int
    dst: int
    file_id: int | None
    line: int


@dataclass
class Reach:
    # Dicts, or Overlays once the hub's walk is spliced in (indexer.select.hub).
    steps: MutableMapping[int, Step | None] = field(default_factory=dict)  # None: a start
    origin: MutableMapping[int, int] = field(default_factory=dict)  # node -> its entity
    kind: MutableMapping[int, str] = field(default_factory=dict)
    file_id: MutableMapping[int, int] = field(default_factory=dict)
    # Modules whose import runs changed code: changed at module level, or importing one
    # that is. A module merely naming a changed definition affects its names' users only.
    import_live: set[int] = field(default_factory=set)
    # Modules reached because top-level code names a changed definition without running
    # it at import: only the users of these module names are affected.
    module_names: dict[int, frozenset[str]] = field(default_factory=dict)
    depth: MutableMapping[int, int] = field(default_factory=dict)  # hops from a start
    # (module, definition) of top-level calls judged to run none of the reached code:
    # asked again when the frontier runs out (indexer.select.module_scope).
    deferred_calls: list[tuple[int, int]] = field(default_factory=list)

    def merge(self, other: Reach) -> list[int]:
        """Add what ``other`` reached and this did not, and return it; chains stay paths
        of real steps. Where the two walks meet, a chain of ``other``'s runs on through
        this walk's steps: it is credited to the entity it really starts from."""
        if isinstance(other.steps, Overlay) and not isinstance(self.steps, Overlay):
            return self._merge_overlay(other)
        added = [node_id for node_id in other.steps if node_id not in self.steps]
        for node_id in added:  # in the order reached: each one's prev comes before it
            self._take(other, node_id, other.steps[node_id])
        self.import_live |= other.import_live
        return added

    def _take(self, other: Reach, node_id: int, step: Step | None) -> None:
        """Add ``other``'s node reached by ``step``, credited to the entity its chain
        starts from here (its prev is already held)."""
        self.steps[node_id] = step
        self.kind[node_id] = other.kind[node_id]
        self.file_id[node_id] = other.file_id[node_id]
        self.depth[node_id] = other.depth.get(node_id, 0)
        self.origin[node_id] = other.origin[node_id] if step is None else self.origin[step.prev]

    def _merge_overlay(self, other: Reach) -> list[int]:
        """``merge`` of a walk that spliced the hub's walk in (``other.steps`` an
        Overlay): its own nodes are added one by one, its hub rows are laid over this
        walk the same way, made only when read (a widened walk reaching the hub would
        otherwise make ~80,000 steps here to read a few thousand)."""
        overlay = other.steps
        own = [n for n in overlay.own if n not in self.steps]
        for node_id in own:
            self._take(other, node_id, overlay.own[node_id])
        rows = overlay.rows
        laid = [n for n in rows if n not in self.steps]
        step_of, origins = overlay.value, self.origin

        def origin(row: int) -> int:
            # The entity of the first node up the row's chain this walk holds itself, as
            # ``merge`` credits it (each row's prev is a row above it, or such a node).
            path = []
            node = step_of(row).prev
            while node not in origins.own:
                path.append(node)
                node = step_of(rows[node]).prev
            found = origins.own[node]
            for passed in path:
                origins[passed] = found
            return found

        for name in ("steps", "kind", "file_id", "depth", "origin"):
            mine, theirs = getattr(self, name), getattr(other, name)
            value = origin if name == "origin" else theirs.value
            extra = len(laid) if name != "depth" else sum(1 for n in rows if n not in mine)
            setattr(self, name, Overlay(mine, rows, value, extra))
        origins = self.origin
        self.import_live |= other.import_live
        return own + laid

    def graft(self, other: Reach, root: int) -> list[int]:
        """Add what ``other``, a walk from ``root`` alone (a node reached here), reached
        and this did not, as reached through ``root``; return the nodes added."""
        whole = self.held_whole(other.module_names)
        added = []
        base, origin = self.depth.get(root, 0), self.origin[root]
        for node_id, step in other.steps.items():  # in the order reached: prev first
            if node_id in self.steps:
                continue
            self.steps[node_id] = step
            self.kind[node_id] = other.kind[node_id]
            self.file_id[node_id] = other.file_id[node_id]
            self.depth[node_id] = base + other.depth.get(node_id, 0)
            self.origin[node_id] = origin
            added.append(node_id)
        self.join_state(other.import_live, other.module_names, other.deferred_calls, whole)
        return added

    def held_whole(self, modules: Iterable[int]) -> set[int]:
        """Of ``modules``, those reached here as fully affected (neither live nor for
        some names only): asked before another walk's nodes are added."""
        return {
            m
            for m in modules
            if m in self.steps and m not in self.module_names and m not in self.import_live
        }

    def join_state(
        self,
        import_live: Iterable[int],
        module_names: Mapping[int, Iterable[str]],
        deferred_calls: Iterable[tuple[int, int]],
        whole: set[int],
    ) -> None:
        """Join what another walk left to more evidence (modules live or reached for
        some names, deferred top-level calls), to be decided with everything this walk
        reaches; ``whole``: this walk's fully affected modules (``held_whole``)."""
        for module in import_live:
            self.import_live.add(module)
            self.module_names.pop(module, None)
        for module, names in module_names.items():
            if module not in self.import_live and module not in whole:
                held = self.module_names.get(module, frozenset())
                self.module_names[module] = held | frozenset(names)
        self.deferred_calls += [d for d in deferred_calls if d[0] not in self.import_live]

    def chain(self, node_id: int) -> list[Step]:
        """The steps from a start node out to ``node_id``."""
        steps: list[Step] = []
        step = self.steps.get(node_id)
        while step is not None:
            steps.append(step)
            step = self.steps.get(step.prev)
        return steps[::-1]


@dataclass
class FileQuota:
    """Stop a walk once it has reached ``count`` distinct files of ``files`` (the nearest,
    as the walk is breadth-first): to ask *whether* a test is reached, or for an answer
    that lists only so many."""

    files: Container[int]
    count: int
    reached: set[int] = field(default_factory=set)

    def add(self, file_id: int) -> bool:
        """Count a reached node's file; True once the quota is full."""
        if file_id in self.files:
            self.reached.add(file_id)
        return self.full

    @property
    def full(self) -> bool:
        return len(self.reached) >= self.count


@dataclass
class Known:
    """What a selection's walks have established about nodes, for later walks that ask
    whether a test is reached (``indexer.select.fallback``): ``reaches`` lead to a test
    (a walk's chain to one ran through them), ``reaches_none`` lead to none (a whole walk
    from them met no test). A walk given it stops at a node of ``reaches`` and does not
    go on from one of ``reaches_none``, so asking of N entities whose users overlap (a
    new file of N functions calling each other) costs one walk, not N."""

    reaches: set[int] = field(default_factory=set)
    reaches_none: set[int] = field(default_factory=set)


class Overlay(MutableMapping):
    """A walk's own dict laid over rows of another walk it takes whole, whose values are
    made only when asked (``indexer.select.hub``: ~80,000 rows, of which a selection
    reads a few thousand). Keys this walk holds win; new keys go to its own dict."""

    def __init__(
        self, own: dict, rows: Mapping[int, int], value: Callable[[int], Any], extra: int
    ) -> None:
        self.own = own
        self.rows = rows  # key -> row, for the value
        self.value = value
        self._extra = extra  # how many keys of ``rows`` ``own`` lacks

    def __contains__(self, key: object) -> bool:
        return key in self.own or key in self.rows

    def __getitem__(self, key: int) -> Any:
        if key in self.own:
            return self.own[key]
        return self.value(self.rows[key])

    def get(self, key: int, default: Any = None) -> Any:
        if key in self.own:
            return self.own[key]
        row = self.rows.get(key)
        return default if row is None else self.value(row)

    def __setitem__(self, key: int, value: Any) -> None:
        if key not in self.own and key in self.rows:
            self._extra -= 1
        self.own[key] = value

    def __delitem__(self, key: int) -> None:
        raise TypeError("a walk's reach only grows")

    def __iter__(self) -> Iterator[int]:
        yield from self.own
        own = self.own
        yield from (key for key in self.rows if key not in own)

    def items(self) -> Iterator[tuple[int, Any]]:  # type: ignore[override]
        yield from self.own.items()
        own, value = self.own, self.value
        yield from ((key, value(row)) for key, row in self.rows.items() if key not in own)

    def __len__(self) -> int:
        return len(self.own) + self._extra
