"""Chains to the hub that earlier walks found, kept to be followed first.

A walk that makes the hub live (``indexer.select.hub``) has found a chain of steps from
a change to it: ``at::native::matmul`` -> ``aten::matmul`` -> ... -> ``NestedTensor`` ->
``torch.nested`` -> ``torch``. Breadth first, finding it took ~10,000 nodes; a later walk
that reaches a node of a kept chain follows the rest of it instead (a walk by the same
rules restricted to the chain's nodes), and once the hub is live splices the hub's walk.
A kept chain is only a lead: following it proves the hub live or fails, and a chain that
fails is dropped. Nothing it says is taken on trust.

Chains are kept by node identity (kind, qualified name, file), not by id, so they
outlive an index update (with their ids in the index they were last resolved in, so the
same index needs no lookup); in a sidecar next to the index, with the hash of the walking
code (other rules, other chains), written to a temporary file and renamed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from indexer import durable
from indexer.query.adjacency_delta import index_key
from indexer.select.judgments import CODE_VERSION

if TYPE_CHECKING:
    from indexer.query.index import Index
    from indexer.select.reach import Reach

SUFFIX = ".witnesses"
MAX_CHAINS = 1000  # the most recent are kept, and as many that failed are remembered
_BATCH = 900
Key = tuple[str, str, str]  # (kind, qualified name, file path)
Chain = tuple[Key, ...]
Ids = list[list[int]]  # per node of a chain, the ids its key names (overloads share one)


@dataclass(frozen=True)
class Lead:
    chain: Chain  # the kept chain
    only: frozenset[int]  # the ids of its nodes after the one it is followed from


class Witnesses:
    """The kept chains of one index, resolved to its node ids when first asked."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.path = index.db_path.with_name(index.db_path.name + SUFFIX)
        self._key = index_key(index.db_path, index.meta)
        self._chains: list[Chain] = []
        self._failed: list[Chain] = []  # followed and found wanting: not kept again
        self._changed = False
        self._ids: list[Ids] | None = None
        self._through: dict[int, list[tuple[int, int]]] = {}  # node -> (chain, position)
        if CODE_VERSION:
            self._chains, self._failed, ids = _read(self.path, self._key)
            if ids is not None:
                self._index(ids)

    def __bool__(self) -> bool:
        return bool(self._chains)

    def leads(self, node_id: int) -> list[Lead]:
        """The rest of each kept chain through ``node_id``, for chains whose every node
        this index holds."""
        self.resolve()
        found = []
        for chain, position in self._through.get(node_id, ()):
            ids = self._ids[chain] if self._ids is not None else []
            rest = ids[position + 1 :]
            if rest and all(rest):
                only = frozenset(node for named in rest for node in named)
                found.append(Lead(self._chains[chain], only))
        return found

    def drop(self, lead: Lead) -> None:
        """Forget the chain of ``lead``: following it failed; and do not keep it again."""
        if lead.chain not in self._chains or self._ids is None:
            return
        position = self._chains.index(lead.chain)
        ids = self._ids[:position] + self._ids[position + 1 :]
        self._failed = [*self._failed, lead.chain][-MAX_CHAINS:]
        self._keep([c for c in self._chains if c != lead.chain])
        self._index(ids)

    def record(self, reach: Reach, hub: int) -> None:
        """Keep the chain by which ``reach`` made the hub live (unless kept already)."""
        steps = reach.chain(hub)
        if not steps:
            return
        ids = [steps[0].prev] + [s.src if s.prev == s.dst else s.dst for s in steps]
        nodes = {node.id: node for node in self.index.nodes(ids)}
        if any(node_id not in nodes for node_id in ids):
            return
        chain = tuple((nodes[n].kind, nodes[n].qualname, nodes[n].path) for n in ids)
        if chain not in self._chains and chain not in self._failed:
            self._keep([*self._chains, chain][-MAX_CHAINS:])

    def save(self) -> None:
        if not self._changed or not CODE_VERSION:
            return
        data = {"code": CODE_VERSION, "chains": self._chains, "failed": self._failed}
        if self._ids is not None:
            data.update(index=self._key, ids=self._ids)
        try:
            durable.write_atomic(self.path, json.dumps(data, separators=(",", ":")).encode())
        except OSError:
            return
        self._changed = False

    def _keep(self, chains: list[Chain]) -> None:
        self._chains = chains
        self._changed = True
        self._ids = None
        self._through = {}

    def resolve(self) -> None:
        """Find the kept chains' nodes in this index (kept with them by ``save``)."""
        if self._ids is not None:
            return
        names = sorted({key[1] for chain in self._chains for key in chain})
        found: dict[Key, list[int]] = {}
        for start in range(0, len(names), _BATCH):
            batch = names[start : start + _BATCH]
            for node_id, kind, qualname, path in self.index.conn.execute(
                "SELECT n.id, n.kind, n.qualname, f.path FROM nodes n"
                " JOIN files f ON f.id = n.file_id"
                f" WHERE n.qualname IN ({','.join('?' * len(batch))})",
                batch,
            ):
                found.setdefault((kind, qualname, path), []).append(node_id)
        self._index([[found.get(key, []) for key in chain] for chain in self._chains])
        self._changed = self._changed or bool(self._chains)  # keep the ids for this index

    def _index(self, ids: list[Ids]) -> None:
        self._ids = ids
        self._through = {}
        for chain, chain_ids in enumerate(ids):
            for position, named in enumerate(chain_ids[:-1]):
                for node_id in named:
                    self._through.setdefault(node_id, []).append((chain, position))


def _chains(value: object) -> list[Chain] | None:
    if not isinstance(value, list):
        return None
    chains = []
    for chain in value:
        if not isinstance(chain, list) or not chain:
            return None
        if not all(
            isinstance(k, list) and len(k) == 3 and all(isinstance(x, str) for x in k)
            for k in chain
        ):
            return None
        chains.append(tuple(tuple(k) for k in chain))
    return chains


def _read(path: Path, key: str) -> tuple[list[Chain], list[Chain], list[Ids] | None]:
    """(chains, failed chains, the chains' ids if resolved in the index of ``key``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # a cache that does not parse is a miss
        return [], [], None
    if not isinstance(data, dict) or data.get("code") != CODE_VERSION:
        return [], [], None
    chains = _chains(data.get("chains"))
    if chains is None:
        return [], [], None
    failed = _chains(data.get("failed", [])) or []
    ids = data.get("ids")
    resolved = (
        data.get("index") == key
        and isinstance(ids, list)
        and len(ids) == len(chains)
        and all(
            isinstance(row, list)
            and len(row) == len(chain)
            and all(
                isinstance(named, list) and all(isinstance(i, int) for i in named) for named in row
            )
            for row, chain in zip(ids, chains, strict=False)
        )
    )
    return chains, failed, ids if resolved else None
