"""Chains to the hub kept for an index, followed first by a walk that meets one.

A walk that makes the hub live (``indexer.select.hub``) has found a chain of steps from
a change to it: ``at::native::matmul`` -> ``aten::matmul`` -> ... -> ``NestedTensor`` ->
``torch.nested`` -> ``torch``. Breadth first, finding it took ~10,000 nodes; a later walk
that reaches a node of a kept chain follows the rest of it instead (a walk by the same
rules restricted to the chain's nodes), and once the hub is live splices the hub's walk.
A kept chain is only a lead: following it proves the hub live or fails, and a chain that
fails is dropped for the rest of the walk. Nothing it says is taken on trust.

The chains are derived from the index by its refresh (``indexer.select.hub_chains``) and
kept with the ids of their nodes (kind, qualified name and file: overloads share one)
in that index; a walk over another index has none (docs/selection.md, "A current index").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from indexer.query.index import Index
    from indexer.select.reach import Reach

_BATCH = 900
Key = tuple[str, str, str]  # (kind, qualified name, file path)
Chain = tuple[Key, ...]
Ids = list[list[int]]  # per node of a chain, the ids its key names (overloads share one)


@dataclass(frozen=True)
class Lead:
    chain: Chain  # the kept chain
    only: frozenset[int]  # the ids of its nodes after the one it is followed from


class Witnesses:
    """Kept chains of one index, in the order kept, with their node ids in it."""

    def __init__(
        self, index: Index, chains: list[Chain] = (), ids: list[Ids] | None = None
    ) -> None:
        self.index = index
        self._chains: list[Chain] = list(chains)
        self._ids: list[Ids] = []
        self._through: dict[int, list[tuple[int, int]]] = {}  # node -> (chain, position)
        self._index(ids if ids is not None else resolve(index, self._chains))

    def __bool__(self) -> bool:
        return bool(self._chains)

    def leads(self, node_id: int) -> list[Lead]:
        """The rest of each kept chain through ``node_id``, for chains whose every node
        this index holds."""
        found = []
        for chain, position in self._through.get(node_id, ()):
            rest = self._ids[chain][position + 1 :]
            if rest and all(rest):
                only = frozenset(node for named in rest for node in named)
                found.append(Lead(self._chains[chain], only))
        return found

    def followed(self, node_id: int, lead: Lead, reach: Reach, reached: bool) -> None:
        """``lead`` was followed from ``node_id``, reaching ``reach``; a lead that did
        not reach the hub is forgotten."""
        if reached or lead.chain not in self._chains:
            return
        position = self._chains.index(lead.chain)
        ids = self._ids[:position] + self._ids[position + 1 :]
        self._chains = self._chains[:position] + self._chains[position + 1 :]
        self._index(ids)

    def record(self, reach: Reach, hub: int) -> None:
        """Follow the chain by which ``reach`` made the hub live in later walks of this
        walker (kept in memory only: a selection writes nothing)."""
        chain = chain_keys(self.index, reach, hub)
        if chain is not None and chain not in self._chains:
            self.add(chain)

    def holds(self, chain: Chain) -> bool:
        return chain in self._chains

    @property
    def ids(self) -> list[Ids]:
        return self._ids

    def add(self, chain: Chain, ids: Ids | None = None) -> None:
        if ids is None:
            (ids,) = resolve(self.index, [chain])
        self._chains.append(chain)
        self._ids.append(ids)
        self._through_chain(len(self._ids) - 1)

    def _index(self, ids: list[Ids]) -> None:
        self._ids = ids
        self._through = {}
        for chain in range(len(ids)):
            self._through_chain(chain)

    def _through_chain(self, chain: int) -> None:
        for position, named in enumerate(self._ids[chain][:-1]):
            for node_id in named:
                self._through.setdefault(node_id, []).append((chain, position))


def chain_keys(index: Index, reach: Reach, hub: int) -> Chain | None:
    """The chain by which ``reach`` made the hub live, by node identity; None when it
    has no steps or names a node the index lacks."""
    steps = reach.chain(hub)
    if not steps:
        return None
    ids = [steps[0].prev] + [s.src if s.prev == s.dst else s.dst for s in steps]
    nodes = {node.id: node for node in index.nodes(ids)}
    if any(node_id not in nodes for node_id in ids):
        return None
    return tuple((nodes[n].kind, nodes[n].qualname, nodes[n].path) for n in ids)


def resolve(index: Index, chains: list[Chain]) -> list[Ids]:
    """Each chain's nodes found in ``index`` by key (none found: an empty list)."""
    names = sorted({key[1] for chain in chains for key in chain})
    found: dict[Key, list[int]] = {}
    for start in range(0, len(names), _BATCH):
        batch = names[start : start + _BATCH]
        for node_id, kind, qualname, path in index.conn.execute(
            "SELECT n.id, n.kind, n.qualname, f.path FROM nodes n"
            " JOIN files f ON f.id = n.file_id"
            f" WHERE n.qualname IN ({','.join('?' * len(batch))}) ORDER BY n.id",
            batch,
        ):
            found.setdefault((kind, qualname, path), []).append(node_id)
    return [[found.get(key, []) for key in chain] for chain in chains]
