"""Chains to the hub from the most used ops, derived by the refresh into the index, and
the leads a walk follows from them (a kept chain is only a lead: following it proves the
hub live or fails, and a failed lead is dropped). Derived and kept across updates as
docs/selection.md, "The hub", says."""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from indexer.query.adjacency_delta import deltas_of
from indexer.select import hub as hub_walks
from indexer.select.hub import CODE_VERSION
from indexer.store import derived

if TYPE_CHECKING:
    import sqlite3

    from indexer.query.index import Index
    from indexer.select.reach import Reach

_BATCH = 900
Key = tuple[str, str, str]  # (kind, qualified name, file path)
Chain = tuple[Key, ...]
Ids = list[list[int]]  # per node of a chain, the ids its key names (overloads share one)
NAME = "hub_chains"  # its item in the index's derived data
# Per op, in the order derived: the nodes its walk met, those it asked for leads and
# was given none, those it was given leads with a digest of them, each run ending at
# the op's ``*_end``.
_ARRAYS = {
    "op": "i",
    "met": "i",
    "met_end": "i",
    "asked": "i",
    "asked_end": "i",
    "led": "i",
    "given": "q",
    "led_end": "i",
}


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


class Walker(Protocol):
    def lead_by(self, witnesses: Witnesses) -> None: ...
    def walk_to_hub(self, start: int) -> Reach: ...


@dataclass
class OpChain:
    """One op's derivation: its chain to the hub (None: its walk did not reach it) and
    what the walk read."""

    op: int
    chain: Chain | None
    met: array
    asked: array  # sorted
    led: array
    given: array


@dataclass
class Derivation:
    hub: int
    ops: list[OpChain]
    chain_ids: list[Ids] = field(default_factory=list)  # per chain kept, in this index
    walked: int = 0  # ops walked for this index (the others kept from the one before)

    def chains(self) -> list[Chain]:
        return [op.chain for op in self.ops if op.chain is not None]


class Seeding(Witnesses):
    """The leads an op's walk is given during a derivation: the chains of the ops before
    it, none dropped; what the walk asks and meets is noted for the op."""

    def __init__(self, index: Index) -> None:
        super().__init__(index, [], [])
        self.met: set[int] = set()
        self.asked: set[int] = set()
        self.led: dict[int, int] = {}
        self.chain: Chain | None = None
        self._failed: dict[tuple[int, Chain], frozenset[int]] = {}

    def __bool__(self) -> bool:
        return True  # every node is asked, leads or none: a later update compares them

    def start(self) -> None:
        self.met, self.asked, self.led, self.chain = set(), set(), {}, None

    def derived(self, op: int, reach: Reach) -> OpChain:
        """What the walk from ``op`` that reached ``reach`` derived and read."""
        self.met.update(reach.steps)
        return OpChain(
            op,
            self.chain,
            array("i", sorted(self.met)),
            array("i", sorted(self.asked)),
            array("i", self.led),
            array("q", self.led.values()),
        )

    def leads(self, node_id: int) -> list[Lead]:
        leads = super().leads(node_id)
        if leads:
            self.led[node_id] = _digest(leads)
        else:
            self.asked.add(node_id)
        kept = []
        for lead in leads:
            failed = self._failed.get((node_id, lead.chain))
            if failed is None:
                kept.append(lead)
            else:  # fails again: what its walk read is read for this op too
                self.met.update(failed)
        return kept

    def gives_as_before(self, op: OpChain) -> bool:
        """Whether every node ``op``'s walk asked is given the leads it was then."""
        leads = super().leads
        if any(leads(node) for node in self._through.keys() & set(op.asked)):
            return False
        return all(_digest(leads(n)) == d for n, d in zip(op.led, op.given, strict=True))

    def followed(self, node_id: int, lead: Lead, reach: Reach, reached: bool) -> None:
        self.met.update(reach.steps)
        if not reached:
            self._failed[(node_id, lead.chain)] = frozenset(reach.steps)

    def record(self, reach: Reach, hub: int) -> None:
        self.chain = chain_keys(self.index, reach, hub)


def _digest(leads: list[Lead]) -> int:
    """Which leads were given, chains and node ids (0: none)."""
    if not leads:
        return 0
    text = json.dumps([[lead.chain, sorted(lead.only)] for lead in leads])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True) or 1


@dataclass
class Before:
    """The derivation kept for the index an update started from, and what the update
    changed: ``touched`` (``hub.touched_by``), and every node whose row it rewrote
    (moved ones too), by which a kept chain's ids are known to hold still."""

    derivation: Derivation
    touched: set[int]
    rows: set[int]


def derive(
    index: Index, walker: Walker, hub: int, ops: list[int], before: Before | None = None
) -> Derivation:
    """The chains to ``hub`` from ``ops``, in order; an op derived ``before`` the update
    keeps its chain when nothing its walk read changed."""
    seeding = Seeding(index)
    walker.lead_by(seeding)
    kept: dict[int, OpChain] = {}
    touched: set[int] = set()
    ids: dict[Chain, Ids] = {}
    if before is not None and before.derivation.hub == hub:
        kept = {op.op: op for op in before.derivation.ops}
        touched = before.touched
        ids = _ids_kept(index, before)
    derivation = Derivation(hub, [])
    for op in ops:
        old = kept.get(op)
        if (
            old is None
            or (touched and not touched.isdisjoint(old.met))
            or not seeding.gives_as_before(old)
        ):
            seeding.start()
            old = seeding.derived(op, walker.walk_to_hub(op))
            derivation.walked += 1
        derivation.ops.append(old)
        if old.chain is not None and not seeding.holds(old.chain):
            seeding.add(old.chain, ids.get(old.chain))
    derivation.chain_ids = seeding.ids
    return derivation


def _ids_kept(index: Index, before: Before) -> dict[Chain, Ids]:
    """The ids of the chains kept ``before`` that name the same nodes in this index: no
    node of theirs was rewritten by the update, nor one added under a key of theirs
    (else they are looked up again)."""
    rows = sorted(before.rows)
    keys = set()
    for start in range(0, len(rows), 900):
        batch = rows[start : start + 900]
        keys.update(
            index.conn.execute(
                "SELECT n.kind, n.qualname, f.path FROM nodes n JOIN files f ON f.id = n.file_id"
                f" WHERE n.id IN ({','.join('?' * len(batch))})",
                batch,
            )
        )
    kept = {}
    for chain, chain_ids in zip(
        before.derivation.chains(), before.derivation.chain_ids, strict=True
    ):
        if keys.isdisjoint(chain) and all(before.rows.isdisjoint(named) for named in chain_ids):
            kept[chain] = chain_ids
    return kept


def store(conn: sqlite3.Connection, index: Index, derivation: Derivation) -> None:
    """Keep the derivation in the index ``index`` reads, through ``conn`` (a writer's
    connection to it, in its transaction)."""
    if not CODE_VERSION:
        return
    arrays = {name: array(typecode) for name, typecode in _ARRAYS.items()}
    for op in derivation.ops:
        arrays["op"].append(op.op)
        arrays["met"].extend(op.met)
        arrays["met_end"].append(len(arrays["met"]))
        arrays["asked"].extend(op.asked)
        arrays["asked_end"].append(len(arrays["asked"]))
        arrays["led"].extend(op.led)
        arrays["given"].extend(op.given)
        arrays["led_end"].append(len(arrays["led"]))
    header = {
        "hub": derivation.hub,
        "chains": [op.chain for op in derivation.ops],
        "chain_ids": derivation.chain_ids,
        "walked": derivation.walked,
    }
    derived.write(conn, NAME, hub_walks.derived_key(index), header, {0: arrays})


def load(index: Index, of_index: str | None = None) -> Derivation | None:
    """The derivation kept for this very index (``of_index``: for the index of that key),
    or None."""
    if not CODE_VERSION:
        return None
    key = hub_walks.derived_key(index, of_index)
    header = derived.header(index.conn, NAME, key)
    a = derived.arrays(index.conn, NAME, _ARRAYS) if header is not None else None
    if header is None or a is None:
        return None
    try:
        chains = [None if c is None else tuple(tuple(k) for k in c) for c in header["chains"]]
        derivation = Derivation(
            int(header["hub"]),
            [],
            [[[int(i) for i in named] for named in ids] for ids in header["chain_ids"]],
            int(header["walked"]),
        )
        met = asked = led = 0
        for row, chain in enumerate(chains):
            met_end, asked_end, led_end = a["met_end"][row], a["asked_end"][row], a["led_end"][row]
            derivation.ops.append(
                OpChain(
                    a["op"][row],
                    chain,
                    a["met"][met:met_end],
                    a["asked"][asked:asked_end],
                    a["led"][led:led_end],
                    a["given"][led:led_end],
                )
            )
            met, asked, led = met_end, asked_end, led_end
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    if len(derivation.ops) != len(a["op"]) or len(derivation.chain_ids) != len(derivation.chains()):
        return None
    return derivation


def before_update(index: Index) -> Before | None:
    """The derivation kept for the index this one was updated from, with what the
    update changed; None when there is none."""
    for delta in deltas_of(index.meta):
        found = load(index, delta.base)
        if found is not None:
            return Before(found, hub_walks.touched_by(index, delta), set(delta.rows))
    return None
