"""The link step: every ref goes to the resolver of its scheme; resolutions become edges.

Resolvers are pure functions ``resolve(refs, symbols) -> Iterable[Resolution]`` keyed by
scheme in :data:`RESOLVERS`. A ref with no resolution stays in the refs table (counted
as unresolved); one with several keeps them all, each edge marked ambiguous, rather than
guessing.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import import_module

from indexer.cpp import symbol_rows
from indexer.link.symbols import Ref, Resolution, SymbolTable

Resolver = Callable[[list[Ref], SymbolTable], Iterable[Resolution]]

# scheme -> "module:function". Each layer registers the scheme its extractor emits.
RESOLVERS: dict[str, str] = {
    "cpp": "indexer.cpp.resolve:resolve",
    "include": "indexer.cpp.includes:resolve",
    "op": "indexer.bindings.resolve:resolve",
    "op_impl": "indexer.bindings.resolve:resolve_registrations",
    "py": "indexer.python.resolve:resolve",
    "opinfo": "indexer.python.resolve:resolve_opinfo",
    "fixture": "indexer.python.resolve:resolve_fixtures",
    "registry": "indexer.python.resolve:resolve_registry",
}

# Up to this many refs (an edited file's, and those its change can affect), lookups read
# the rows they name, one name at a time; more, every row once.
FEW_REFS = 20_000


@dataclass
class SchemeStats:
    refs: int = 0
    resolved: int = 0  # refs with exactly one target
    ambiguous: int = 0  # refs with several targets (all kept)
    unresolved: int = 0


@dataclass
class LinkStats:
    by_scheme: dict[str, SchemeStats] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {scheme: vars(stats) for scheme, stats in sorted(self.by_scheme.items())}


def _resolver(scheme: str) -> Resolver:
    spec = RESOLVERS.get(scheme)
    if spec is None:
        raise LookupError(f"no resolver registered for ref scheme {scheme!r}")
    module_name, _, function_name = spec.partition(":")
    return getattr(import_module(module_name), function_name)


def _load_refs(conn: sqlite3.Connection, ref_ids: list[int] | None) -> dict[str, list[Ref]]:
    query = "SELECT id, file_id, src_id, kind, scheme, target, line, attrs FROM refs WHERE target_id IS NULL"
    by_scheme: dict[str, list[Ref]] = defaultdict(list)
    if ref_ids is None:
        rows: Iterable[tuple] = conn.execute(query)
    else:
        rows = []
        for start in range(0, len(ref_ids), 900):
            batch = ref_ids[start : start + 900]
            rows.extend(conn.execute(f"{query} AND id IN ({','.join('?' * len(batch))})", batch))
    for ref_id, file_id, src_id, kind, scheme, target, line, attrs in rows:
        by_scheme[scheme].append(
            Ref(
                ref_id,
                file_id,
                src_id,
                kind,
                scheme,
                target,
                line,
                json.loads(attrs) if attrs else {},
            )
        )
    return by_scheme


def link(conn: sqlite3.Connection, ref_ids: list[int] | None = None) -> LinkStats:
    """Resolve refs into edges: all of them (``ref_ids=None``) or the given ones.

    The caller owns the transaction and must have removed the old edges of the refs it
    re-links.
    """
    stats = LinkStats()
    if ref_ids is None:
        # Derived from every node here; an update keeps them per file (indexer/update.py).
        symbol_rows.write(conn)
        conn.execute(
            "INSERT INTO edges(ref_id, src_id, dst_id, kind, file_id, line, attrs)"
            " SELECT id, src_id, target_id, kind, file_id, line, attrs FROM refs"
            " WHERE target_id IS NOT NULL"
        )
    else:
        for start in range(0, len(ref_ids), 900):
            batch = ref_ids[start : start + 900]
            conn.execute(
                "INSERT INTO edges(ref_id, src_id, dst_id, kind, file_id, line, attrs)"
                " SELECT id, src_id, target_id, kind, file_id, line, attrs FROM refs"
                f" WHERE target_id IS NOT NULL AND id IN ({','.join('?' * len(batch))})",
                batch,
            )
    refs_by_scheme = _load_refs(conn, ref_ids)
    if not refs_by_scheme:
        return stats
    symbols = SymbolTable(conn, few_refs=ref_ids is not None and len(ref_ids) <= FEW_REFS)
    for scheme, refs in sorted(refs_by_scheme.items()):
        by_id = {ref.id: ref for ref in refs}
        targets: dict[int, list[Resolution]] = defaultdict(list)
        for resolution in _resolver(scheme)(refs, symbols):
            targets[resolution.ref_id].append(resolution)
        scheme_stats = stats.by_scheme.setdefault(scheme, SchemeStats())
        scheme_stats.refs += len(refs)
        rows = []
        for ref_id, resolutions in targets.items():
            ref = by_id[ref_id]
            distinct = len({(res.src_id, res.dst_id) for res in resolutions})
            # A fanout (an @ops test over every entry of a list) is not ambiguity.
            fanout = all((res.attrs or {}).get("fanout") for res in resolutions)
            ambiguous = distinct > 1 and not fanout
            if ambiguous:
                scheme_stats.ambiguous += 1
            else:
                scheme_stats.resolved += 1
            seen: set[tuple[int | None, int]] = set()
            for res in resolutions:
                if (res.src_id, res.dst_id) in seen:
                    continue
                seen.add((res.src_id, res.dst_id))
                attrs = dict(res.attrs or {})
                if ambiguous:
                    attrs["ambiguous"] = distinct
                rows.append(
                    (
                        ref.id,
                        ref.src_id if res.src_id is None else res.src_id,
                        res.dst_id,
                        ref.kind,
                        ref.file_id,
                        ref.line,
                        json.dumps(attrs, sort_keys=True, separators=(",", ":")) if attrs else None,
                    )
                )
        scheme_stats.unresolved += len(refs) - len(targets)
        conn.executemany(
            "INSERT INTO edges(ref_id, src_id, dst_id, kind, file_id, line, attrs)"
            " VALUES (?,?,?,?,?,?,?)",
            rows,
        )
    return stats
