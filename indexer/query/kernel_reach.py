"""Which CUDA ops of an extension reach a kernel: a coverage figure of the C++ graph.

An op registered for CUDA in a bindings file (vLLM's csrc/torch_bindings.cpp) runs its
host function, which launches kernels directly, through helpers, or through macros. The
host reaching a ``cuda_kernel`` over ``calls``, ``launches`` and ``dispatches`` within a
few steps is what lets ``trace`` and the selection cross from the op to the kernel.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict

MAX_STEPS = 8
_WALKED = ("cpp_function", "cuda_kernel", "registration")


def cuda_ops_reaching_kernels(
    conn: sqlite3.Connection, bindings: str
) -> tuple[list[str], list[str]]:
    """(CUDA ops registered in the file ``bindings``, those whose host function reaches a
    ``cuda_kernel`` in at most ``MAX_STEPS`` steps), each sorted."""
    hosts: dict[str, set[int]] = defaultdict(set)
    for op, host, attrs in conn.execute(
        "SELECT o.qualname, e.dst_id, e.attrs FROM edges e JOIN nodes o ON o.id = e.src_id"
        " JOIN files f ON f.id = o.file_id"
        " WHERE e.kind = 'dispatches' AND o.kind = 'op' AND f.path = ?",
        (bindings,),
    ):
        keys = json.loads(attrs or "{}")
        if "CUDA" in [keys.get("key"), *keys.get("keys", [])]:
            hosts[op].add(host)
    kinds = dict(
        conn.execute(
            f"SELECT id, kind FROM nodes WHERE kind IN ({','.join('?' * len(_WALKED))})",
            _WALKED,
        )
    )
    out: dict[int, list[int]] = defaultdict(list)
    for src, dst in conn.execute(
        "SELECT src_id, dst_id FROM edges WHERE kind IN ('calls', 'launches', 'dispatches')"
    ):
        out[src].append(dst)
    reaching = []
    for op, starts in sorted(hosts.items()):
        seen, frontier = set(starts), list(starts)
        for _ in range(MAX_STEPS):
            if any(kinds.get(node) == "cuda_kernel" for node in frontier):
                reaching.append(op)
                break
            frontier = [d for n in frontier for d in out[n] if d in kinds and d not in seen]
            seen.update(frontier)
    return sorted(hosts), reaching
