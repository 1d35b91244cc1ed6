"""Which refs an incremental update must re-resolve so that it equals a full rebuild.

A ref's resolution is a function of the ref and of the nodes its scheme's resolver reads.
So after some files changed, a ref outside them needs re-resolving only if

* its edges touched an evicted node (pointed into one, or started from one), or
* its scheme's resolver reads a node kind that changed, and then
  - for a *targeted* scheme, only refs that can name a changed node: their target_key, or
    the last component of a name in a ``secondary`` attribute (``receiver``, ``stub``), is
    a name some changed node had or has; a file is named by a path suffix;
  - for any other scheme, every ref of the scheme.

:data:`POLICIES` records, per scheme, what its resolver reads (checked against the
resolvers' code; tests/test_update_equals_rebuild.py compares an update with a rebuild
over every kind of change). A scheme not listed reads everything and is re-linked whole:
correctness before speed.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from indexer.cpp.aten_api import api_spellings
from indexer.graph.facts import ANSWER_ATTRS, LINE_ATTRS
from indexer.graph.vocabulary import NodeKind
from indexer.store.db import dump_attrs, target_key

_BATCH = 900
FILE_KIND = "file"


@dataclass(frozen=True)
class Policy:
    reads: frozenset[str] | None  # node kinds the resolver looks at; None: any
    targeted: bool  # resolution depends only on nodes named like the ref (see module doc)
    # ref attribute -> the node kinds it names (a call's receiver class, a dispatch stub)
    secondary: tuple[tuple[str, frozenset[str]], ...] = ()
    whole_if: tuple[str, ...] = ()  # node attributes whose change re-links the whole scheme


_CPP = frozenset({"cpp_function", "cuda_kernel", "dispatch_stub", "cpp_class"})
_OPS = frozenset({"op", "registration", "derivative", "binding"})
_PYTHON = frozenset(
    {
        "python_module",
        "python_class",
        "python_function",
        "test_utility",
        "test_file",
        "test_class",
        "test_function",
        "op",
        "binding",
    }
)

POLICIES: dict[str, Policy] = {
    # Scope lookups by qualname and last name; member calls walk class bases; calls with
    # no C++ definition fall back to aten ops by name (indexer/cpp/aten_api.py).
    "cpp": Policy(
        _CPP | {"op"},
        True,
        secondary=(
            ("receiver", frozenset({"cpp_class"})),
            ("stub", frozenset({"dispatch_stub"})),
            ("operand_types", frozenset({"cpp_class"})),  # a + b: the operands' classes
        ),
        whole_if=("bases",),
    ),
    # Files by path: relative, rooted, or by path suffix.
    "include": Policy(frozenset({FILE_KIND}), True),
    # Ops, registrations, derivatives, bindings by qualname / (namespace, name) / name.
    "op": Policy(_OPS, True),
    "op_impl": Policy(frozenset({"registration"}), True),
    # Fixtures by name, then by the nearest conftest.py.
    "fixture": Policy(frozenset({"test_utility"}), True),
    # Registry entries by name; a model id is no identifier, so not keyed by a last name.
    "registry": Policy(frozenset({NodeKind.REGISTRY_ENTRY.value}), False),
    # Dotted names through re-exports and partial prefixes: not keyed by the last name.
    "py": Policy(_PYTHON, False),
    # OpInfo list membership from module summaries (test files hold some) and class
    # hierarchies.
    "opinfo": Policy(
        frozenset(
            {"opinfo", "python_module", "test_file", "python_class", "test_utility", "test_class"}
        ),
        False,
    ),
}
DEFAULT_POLICY = Policy(None, False)


def policy(scheme: str) -> Policy:
    return POLICIES.get(scheme, DEFAULT_POLICY)


def batches(items: list, size: int = _BATCH) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


_NAME_LIKE = re.compile(r"[\w.:~]+\Z")


def _names_in(value: Any) -> Iterator[str]:
    """Name-like strings in a node's attributes (python_names, bindings, bases...)."""
    if isinstance(value, str):
        if _NAME_LIKE.match(value):
            yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _names_in(str(key))
            yield from _names_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _names_in(item)


@dataclass
class Changed:
    """The nodes of the changed files before and after, by identity (everything a resolver
    can read of a node but its row id and lines); only identities that came or went can
    change how a ref elsewhere resolves. A function whose body changed keeps its identity.
    """

    before: Counter = field(default_factory=Counter)
    after: Counter = field(default_factory=Counter)
    names: set[str] = field(default_factory=set)
    kinds: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    attrs_changed: set[str] = field(default_factory=set)  # attribute keys of those nodes

    def collect(self, conn: sqlite3.Connection, file_ids: list[int], *, after: bool) -> None:
        into = self.after if after else self.before
        for batch in batches(file_ids):
            into.update(
                (kind, name, qualname, path, _without_lines(attrs), *parent)
                for kind, name, qualname, path, attrs, *parent in conn.execute(
                    "SELECT n.kind, n.name, n.qualname, f.path, COALESCE(n.attrs, ''),"
                    " p.kind, p.qualname FROM nodes n JOIN files f ON f.id = n.file_id"
                    " LEFT JOIN nodes p ON p.id = n.parent_id"
                    f" WHERE n.file_id IN ({','.join('?' * len(batch))})",
                    batch,
                )
            )

    def add_name(self, text: str | None) -> None:
        if text:
            self.names.add(text)
            key = target_key(text)
            if key:
                self.names.add(key)

    def finish(self) -> None:
        """Derive names, kinds and files from the identities that differ."""
        differing = (self.before - self.after) + (self.after - self.before)
        if any(kind in _OPS for kind, *_ in differing):
            self.names.add("default")  # torch.ops.aten.add.default names aten::add
        for kind, name, qualname, _, attrs, _, _ in differing:
            self.kinds.add(kind)
            if kind == FILE_KIND:
                self.files.add(qualname)
                continue
            self.add_name(name)
            self.add_name(qualname)
            if kind == "op":  # calls through ATen's API name it with suffixes too
                for spelling in api_spellings(name):
                    self.add_name(spelling)
            if attrs:
                values = json.loads(attrs)
                self.attrs_changed.update(values)
                for text in _names_in(values):
                    self.add_name(text)


_UNREAD = (*LINE_ATTRS, *ANSWER_ATTRS)


def _without_lines(attrs: str) -> str:
    """A node's attributes without those no resolver reads (``LINE_ATTRS``,
    ``ANSWER_ATTRS``): a node that only moved, or whose docstring changed, keeps its
    identity."""
    if not any(f'"{name}"' in attrs for name in _UNREAD):
        return attrs
    values = json.loads(attrs)
    if not isinstance(values, dict):
        return attrs
    return dump_attrs({key: value for key, value in values.items() if key not in _UNREAD}) or ""


def refs_touching(conn: sqlite3.Connection, file_ids: list[int]) -> set[int]:
    """Refs of other files whose edges point into, or start from, nodes of ``file_ids``."""
    found: set[int] = set()
    for batch in batches(file_ids):
        marks = ",".join("?" * len(batch))
        for column in ("dst_id", "src_id"):
            found.update(
                row[0]
                for row in conn.execute(
                    f"SELECT DISTINCT e.ref_id FROM nodes n JOIN edges e ON e.{column} = n.id"
                    f" WHERE n.file_id IN ({marks}) AND e.ref_id IS NOT NULL",
                    batch,
                )
            )
    return found


def _select_ids(conn: sqlite3.Connection, sql: str, values: list) -> set[int]:
    found: set[int] = set()
    for batch in batches(values):
        found.update(row[0] for row in conn.execute(sql.format(",".join("?" * len(batch))), batch))
    return found


def refs_to_relink(
    conn: sqlite3.Connection, changed: Changed, schemes: list[str] | None = None
) -> tuple[set[int], list[str]]:
    """(refs of unchanged files to re-resolve, schemes re-linked whole) for ``changed``.

    ``schemes``: those of the unchanged files' name refs (the old index's link_stats),
    which saves a scan of the refs table; None scans it."""
    if schemes is None:
        schemes = [row[0] for row in conn.execute("SELECT DISTINCT scheme FROM refs")]
    targeted: list[str] = []
    whole: list[str] = []
    for scheme in schemes:
        rule = policy(scheme)
        if scheme == "local" or (rule.reads is not None and not rule.reads & changed.kinds):
            continue
        if rule.targeted and not changed.attrs_changed & set(rule.whole_if):
            targeted.append(scheme)
        else:
            whole.append(scheme)
    found: set[int] = set()
    for scheme in whole:
        found.update(
            row[0]
            for row in conn.execute(
                "SELECT id FROM refs WHERE scheme = ? AND target_id IS NULL", (scheme,)
            )
        )
    if not targeted:
        return found, sorted(whole)
    wanted = set(targeted)
    for ref_id, scheme in _select_ids_with_scheme(conn, sorted(changed.names)):
        if scheme in wanted:
            found.add(ref_id)
    if "include" in wanted or policy("include").reads is None:
        found |= _refs_naming_files(conn, changed.files, wanted)
    secondary = {
        attr
        for scheme in targeted
        for attr, kinds in policy(scheme).secondary
        if kinds & changed.kinds
    }
    if secondary:
        found |= _refs_by_secondary(conn, changed.names, wanted, secondary)
    return found, sorted(whole)


def _select_ids_with_scheme(conn: sqlite3.Connection, names: list[str]) -> Iterator[tuple]:
    for batch in batches(names):
        yield from conn.execute(
            "SELECT id, scheme FROM refs WHERE target_id IS NULL"
            f" AND target_key IN ({','.join('?' * len(batch))})",
            batch,
        )


def _refs_naming_files(conn: sqlite3.Connection, paths: set[str], schemes: set[str]) -> set[int]:
    """Unresolved-name refs whose target is a path ending with a changed file's name."""
    found: set[int] = set()
    by_key: dict[str, set[str]] = {}
    for path in paths:
        by_key.setdefault(target_key(path) or "", set()).add(path.rsplit("/", 1)[-1])
    for key, basenames in by_key.items():
        for ref_id, scheme, target in conn.execute(
            "SELECT id, scheme, target FROM refs WHERE target_id IS NULL AND target_key = ?",
            (key,),
        ):
            if scheme in schemes and target and target.rsplit("/", 1)[-1] in basenames:
                found.add(ref_id)
    return found


def _refs_by_secondary(
    conn: sqlite3.Connection, names: set[str], schemes: set[str], attrs: set[str]
) -> set[int]:
    """Refs whose ``attrs`` (receiver, stub...) name a changed node by its last component."""
    found: set[int] = set()
    marks = ",".join("?" * len(schemes))
    likes = " OR ".join("instr(attrs, ?) > 0" for _ in attrs)
    for ref_id, raw in conn.execute(
        f"SELECT id, attrs FROM refs WHERE target_id IS NULL AND scheme IN ({marks})"
        f" AND attrs IS NOT NULL AND ({likes})",
        [*sorted(schemes), *(f'"{attr}":' for attr in sorted(attrs))],
    ):
        values = json.loads(raw)
        for attr in attrs:
            value = values.get(attr)
            written = value if isinstance(value, list) else [value]  # operand_types: a list
            if any(
                isinstance(name, str) and (name in names or target_key(name) in names)
                for name in written
            ):
                found.add(ref_id)
                break
    return found
