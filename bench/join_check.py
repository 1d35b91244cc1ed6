"""An independent check of the record join: which recorded tests a change must select.

Written apart from the join (indexer/select/record_join.py, op_family.py,
native_reach.py and indexer/query/recorded.py's name matching), so that it cannot share
their blind spots: the index is read here with plain SQL, native_functions.yaml is parsed
here with yaml, and a record's op names are compared here, spelling by spelling.

1. **Ops whose kernel the change reaches.** Breadth first from the changed nodes,
   backwards over native edges (``calls``, ``launches``, ``dispatches``, ``binds``) and
   forwards over ``implements``, ending at each op reached (its other callers reach it
   through the dispatcher, which a record sees). A C++ autograd function's
   ``F::backward`` is also an end when the record names F's node (the engine runs it).
2. **Every name that runs those kernels**, from native_functions.yaml: an entry runs
   the kernel of the entry it names in ``structured_delegate`` (``cumsum_`` runs
   ``cumsum.out``'s), and an ``autogen`` variant runs its source's.
3. **A recorded name matches** when it is one of those names exactly (``aten::sort`` is
   the default overload), or when one side names no overload and the names agree (a
   record that keeps names without overloads).

Then every trusted test whose own work (not a module's import) holds a matching name, or
the autograd node named in step 1, must be kept by the selection. Trust is the join's
(``trusted_tests``): this checks names and kernels, not trust.
"""

from __future__ import annotations

import json
import sqlite3
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import yaml

WALK_BACK = ("calls", "launches", "dispatches", "binds", "derives")


@dataclass
class Needed:
    """What a change must select, as this check computes it."""

    ops: set[str]  # full names (``aten::sort.stable``) of the ops whose kernel it reaches
    backward_nodes: set[str]  # recorded autograd node names whose backward it reaches
    tests: set[str]  # node ids of the trusted tests that must run


def kernel_names(yaml_path: Path) -> dict[str, str]:
    """``aten::<full name>`` of every entry -> whose kernel it runs (itself, its
    ``structured_delegate``, or, for an ``autogen`` variant, its source)."""
    runs: dict[str, str] = {}
    for entry in yaml.safe_load(yaml_path.read_text()) or []:
        if not isinstance(entry, dict) or "func" not in entry:
            continue
        name = "aten::" + str(entry["func"]).split("(", 1)[0].strip()
        delegate = entry.get("structured_delegate")
        runs.setdefault(name, f"aten::{delegate}" if delegate else name)
        for generated in str(entry.get("autogen") or "").split(","):
            if generated.strip():
                runs.setdefault(f"aten::{generated.strip()}", name)
    return runs


def ops_reached(db: Path, starts: list[int], backward_names: set[str]) -> tuple[set[str], set[str]]:
    """(qualnames of the ops whose kernel reaches ``starts``, autograd node names from
    ``backward_names`` whose backward does)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return _walk(conn, starts, backward_names)
    finally:
        conn.close()


NATIVE_KINDS = frozenset(
    {"cpp_function", "cpp_class", "cuda_kernel", "dispatch_stub", "op", "binding",
     "registration", "derivative"}
)  # fmt: skip


def _walk(
    conn: sqlite3.Connection, starts: list[int], backward_names: set[str]
) -> tuple[set[str], set[str]]:
    seen = set(starts)
    queue = deque(starts)
    ops: set[str] = set()
    nodes: set[str] = set()
    while queue:
        node = queue.popleft()
        kind, qualname = conn.execute(
            "SELECT kind, qualname FROM nodes WHERE id = ?", (node,)
        ).fetchone()
        if kind not in NATIVE_KINDS or kind == "binding":
            continue  # Python runs a binding: the record saw who
        if kind == "op":
            ops.add(qualname)
            continue
        # F::backward runs when the engine evaluates F's node: where the record names
        # that node, F::apply's edge is not followed (the node's runners are).
        named: set[str] = set()
        if qualname.endswith("::backward"):
            owner = qualname.rsplit("::", 1)[0].rsplit("::", 1)[-1]
            named = {b for b in backward_names if b.endswith((f"::{owner}>", f"<{owner}>"))}
        marks = ",".join("?" * len(WALK_BACK))
        following = []
        for src, attrs in conn.execute(
            f"SELECT src_id, attrs FROM edges WHERE dst_id = ? AND kind IN ({marks})",
            (node, *WALK_BACK),
        ):
            if named and attrs and json.loads(attrs).get("via") == "autograd_apply":
                nodes |= named
                continue
            following.append(src)
        forward = ["implements"] + (["derives"] if kind == "derivative" else [])
        following += [
            dst
            for (dst,) in conn.execute(
                f"SELECT dst_id FROM edges WHERE src_id = ? AND kind IN ({','.join('?' * len(forward))})",
                (node, *forward),
            )
        ]
        for other in following:
            if other not in seen:
                seen.add(other)
                queue.append(other)
    return ops, nodes


def names_running(ops: set[str], kernels: dict[str, str]) -> set[str]:
    """The full names whose execution runs one of ``ops``' kernels."""
    found = set(ops)
    changed = True
    while changed:
        changed = False
        for name, owner in kernels.items():
            if owner in found and name not in found:
                found.add(name)
                changed = True
    return found


def matches(recorded: str, needed: set[str]) -> bool:
    """Whether a recorded op name is one of ``needed``: exactly (``aten::sort`` is the
    default overload), or, for a name kept without its overload, any overload of it."""
    if recorded in needed:
        return True
    return "." not in recorded and any(n.split(".", 1)[0] == recorded for n in needed)


def needed_tests(
    record, trusted: list, yaml_path: Path, db: Path, starts: list[int], cuda_only: bool
) -> Needed:
    """The trusted tests of ``record`` (an ``indexer.record.model.Record``) that must run
    for a change to the nodes ``starts``; ``cuda_only``: the change is only to
    ``__global__`` kernels (then, where every part of the record had CUDA, only tests that
    used CUDA run it)."""
    if not hasattr(record, "names_of"):  # format 3, read by parts: the check reads it whole
        record = record.decode()
    backward_names = {text for kind, text in record.names if kind == "backward"}
    ops, backward = ops_reached(db, starts, backward_names)
    running = names_running(ops, kernel_names(yaml_path))
    every_part = record.meta.get("devices_in_every_part", record.meta.get("devices", []))
    by_cuda = cuda_only and "cuda" in (every_part or [])
    tests = set()
    for test in trusted:
        names = [record.names[i] for i in record.names_of(test)]
        if by_cuda and ("device", "cuda") not in names:
            continue
        if any(
            (kind == "op" and matches(text, running)) or (kind == "backward" and text in backward)
            for kind, text in names
        ):
            tests.add(test.nodeid)
    return Needed(running, backward, tests)
