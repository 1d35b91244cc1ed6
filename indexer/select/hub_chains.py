"""Chains to the hub from the most used ops, derived from one index and kept inside it.

The refresh after a build or an update (``indexer.select.derived``) walks from each of
the most used ops, in order, until the hub is live (``ImpactWalker.walk_to_hub``),
following the chains of the ops before it as leads (``indexer.select.witness``), and
keeps the chain that got there. What an op's walk read is noted with it: the nodes it
met (its own and the leads' walks) and, for each node it asked for leads, which leads
it was given (a digest of their chains and node ids).

An update keeps an op's chain without walking when nothing the walk read changed: none
of the nodes it met is among what the update touched (``hub.touched_by``, the criterion
by which the hub's own walk is carried over), and every node it asked is given the same
leads now. Walking again would read the same edges, rows, file text and leads, so it
would find the same chain: the chains after any history of updates are those a build
derives (docs/selection.md, "A current index"). A lead that fails to reach the hub is
not followed from that node again in the derivation (its walk's nodes count as met by
every op that skips it), so no op's chain depends on another's failures.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from indexer.query.adjacency_delta import deltas_of
from indexer.select import hub as hub_walks
from indexer.select.walk_code import CODE_VERSION
from indexer.select.witness import Chain, Ids, Lead, Witnesses, chain_keys
from indexer.store import derived

if TYPE_CHECKING:
    import sqlite3

    from indexer.query.index import Index
    from indexer.select.reach import Reach

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
