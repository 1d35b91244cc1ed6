"""Checking an index against a harness's anchors: one line per fact it does not reproduce.

The facts were read off the tree by a person (an op's kernel at file:line, a test file
that covers an op); what is checked is the index's graph and the answers the query layer
gives from it (``tests``, ``affected``), the ones an agent and a CI job rely on.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from indexer.anchors.spec import Anchor, Anchors
from indexer.answers.affected import affected
from indexer.harness import Manifest, detect_harness
from indexer.query.health import shortfalls
from indexer.query.index import Index, Node, spelled
from indexer.query.op_chain import dispatch_hops, keys_of
from indexer.query.tests import tests

# Edges a binding chain follows, user to used; and how many between two names.
CHAIN_EDGES = ("references", "binds", "dispatches", "implements", "calls", "launches", "derives")
CHAIN_HOPS = 4
MANY = 1_000_000  # a limit no answer reaches: every test file listed


def check(index: Index, anchors: Anchors, manifest: Manifest, source) -> list[str]:
    """Every failure, one line each (empty: the index reproduces them all)."""
    failures = []
    where = anchors.path
    if anchors.detected and detect_harness(source) != manifest.name:
        failures.append(
            f"{where}: detected: the tree is detected as {detect_harness(source)!r},"
            f" not {manifest.name!r} (its [detect] marker_files)"
        )
    counts = index.meta_json("counts", {})
    for line in shortfalls(manifest, counts):
        failures.append(f"{where}: manifest minimum {line}")
    for kind, minimum in sorted(anchors.minimums.items()):
        have = counts.get("nodes", {}).get(kind, counts.get("edges", {}).get(kind, 0))
        if have < minimum:
            failures.append(f"{where}: minimum {kind}: {have} < {minimum}")
    for anchor in anchors.anchors:
        problem = _CHECKS[anchor.kind](index, anchor)
        if problem:
            failures.append(f"{where}:{anchor.line}: {anchor.label}: {problem}")
    return failures


def _named(index: Index, name: str, kinds: Iterable[str] | None = None) -> list[Node]:
    """Nodes whose qualified name is ``name``, as written or as code spells it."""
    return [
        node
        for node in index.find_spelled(name, kinds)
        if name in (node.qualname, spelled(node.qualname))
    ]


def _at(value: str) -> tuple[str, int]:
    path, _, line = value.rpartition(":")
    return path, int(line)


def _kernel(index: Index, anchor: Anchor) -> str | None:
    ops = _named(index, anchor.values["kernel"], ["op"])
    if not ops:
        return "no op of that name in the index"
    key, want = anchor.values["key"], _at(anchor.values["at"])
    seen = []
    # The op's own dispatches, and those of the m.impl registrations it fans out to.
    frontier = [op.id for op in ops]
    visited = set(frontier)
    while frontier:
        hops = [hop for node_id in frontier for hop in dispatch_hops(index, node_id)]
        frontier = []
        for hop in hops:
            if hop.node.kind == "registration":
                if hop.node.id not in visited:
                    visited.add(hop.node.id)
                    frontier.append(hop.node.id)
                continue
            if key not in keys_of(hop.attrs):
                continue
            if (hop.node.path, hop.node.line) == want:
                return None
            seen.append(f"{hop.node.qualname} at {hop.node.path}:{hop.node.line}")
    if not seen:
        return f"no {key} kernel registered for it"
    return f"its {key} kernel is {', '.join(sorted(set(seen))[:3])}"


def _defines(index: Index, anchor: Anchor) -> str | None:
    nodes = [node for node in _named(index, anchor.values["defines"]) if node.kind != "file"]
    if not nodes:
        return "no definition of that name in the index"
    want = _at(anchor.values["at"])
    if any((node.path, node.line) == want for node in nodes):
        return None
    return "defined at " + ", ".join(sorted({node.evidence for node in nodes})[:3])


def _covers(index: Index, anchor: Anchor) -> str | None:
    answer = tests(index, anchor.values["covers"], focus="files", limit=MANY)
    if not answer.found:
        return f"not found by the tests answer ({answer.title})"
    files = answer.data.get("files", [])
    if anchor.values["test_file"] in files:
        return None
    return f"the tests answer lists {len(files)} files, not this one ({answer.title})"


def _affected(index: Index, anchor: Anchor) -> str | None:
    answer = affected(index, anchor.values["affected"], limit=MANY)
    if not answer.found:
        return f"not found by the affected answer ({answer.title})"
    files = answer.data.get("test_files", [])
    if anchor.values["test_file"] in files:
        return None
    return f"the affected answer lists {len(files)} test files, not this one"


def _chain(index: Index, anchor: Anchor) -> str | None:
    names = anchor.values["chain"]
    current = _named(index, names[0])
    if not current:
        return f"no node named {names[0]}"
    for before, name in itertools.pairwise(names):
        wanted = {node.id for node in _named(index, name)}
        if not wanted:
            return f"no node named {name}"
        reached = index.walk([node.id for node in current], "out", CHAIN_EDGES, CHAIN_HOPS)
        hit = [node_id for node_id in reached if node_id in wanted]
        if not hit:
            return f"{before} does not reach {name} within {CHAIN_HOPS} edges"
        current = index.nodes(hit)
    return None


_CHECKS = {
    "kernel": _kernel,
    "defines": _defines,
    "covers": _covers,
    "affected": _affected,
    "chain": _chain,
}
