"""When no test reaches a changed entity: widen it once to its possible users (unresolved
calls naming it, its file's or includers' definitions, narrower where precise mode
compiled the file; a Python definition's module and importers), else run everything,
unless every chain from it ends at ops nothing in the tree names (docs/selection.md,
"Nothing reaches it")."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from indexer.diff import run_git
from indexer.graph.vocabulary import NodeKind
from indexer.paths import is_header
from indexer.query.index import Index, Node
from indexer.select.impact import STATEFUL, ImpactWalker
from indexer.select.model import Entity, Selection
from indexer.select.placement import FUNCTION_KINDS, MEMBERS_SHOWN, Placer
from indexer.select.reach import FileQuota, Known, Reach
from indexer.store.db import has_table

_PRECISE = '"extractor":"precise"'
# The C++ definitions a mention can sit in (and what the fallback widens).
CPP_KINDS = FUNCTION_KINDS | {NodeKind.CPP_CLASS.value, NodeKind.DISPATCH_STUB.value}
PYTHON_DEFS = frozenset(
    {NodeKind.PYTHON_FUNCTION.value, NodeKind.PYTHON_CLASS.value, NodeKind.TEST_UTILITY.value}
)
WIDENED = "widened: "  # reason prefix of the entities this module adds
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
ALL_USERS = (
    "the calls naming it, and the other definitions of its file (or of the files including it)"
)


def ends(reach: Reach, starts: set[int], index: Index) -> list[int]:
    """The nodes where the walk stopped: reached, and reaching nothing further (a start
    counts only if no edge at all leads into it)."""
    users = {step.prev for step in reach.steps.values() if step is not None}
    found = []
    for node_id in reach.steps:
        if node_id in users:
            continue
        if node_id in starts and _has_users(index, node_id):
            continue
        found.append(node_id)
    return found


def _has_users(index: Index, node_id: int) -> bool:
    return (
        index.conn.execute("SELECT 1 FROM edges WHERE dst_id = ? LIMIT 1", (node_id,)).fetchone()
        is not None
    )


def unnamed_ops(index: Index, source: Path, node_ids: list[int]) -> list[str] | None:
    """The qualnames of these nodes if every one is an op nothing in the tree names
    (see the module docstring); None if any is not, or the tree cannot be searched."""
    nodes = index.nodes(node_ids)
    if not nodes or any(node.kind != NodeKind.OP.value for node in nodes):
        return None
    for node in nodes:
        if index.conn.execute(
            "SELECT 1 FROM refs r WHERE r.target_key = ? AND r.src_id != ?"
            " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id) LIMIT 1",
            (node.name, node.id),
        ).fetchone():
            return None
        result = run_git(
            source, "grep", "-l", "-w", "-I", "-F", "--untracked", "-e", node.name, check=False
        )
        if result.returncode not in (0, 1):
            return None  # git cannot search the tree: a reader cannot be ruled out
        files = set(result.stdout.decode("utf-8", "surrogateescape").splitlines())
        if files - {node.path}:
            return None
    return sorted(node.qualname for node in nodes)


def compiled_files(index: Index) -> frozenset[str]:
    """The tree's files some TU of precise mode compiled (none without precise mode)."""
    if not has_table(index.conn, "precise_files"):
        return frozenset()
    return frozenset(row[0] for row in index.conn.execute("SELECT path FROM precise_files"))


def users_in_compiled_file(
    index: Index, source: Path, path: str, names: set[str], own: set[int]
) -> set[int] | None:
    """The definitions of ``path`` (a compiled file) holding a mention of ``names`` that no
    resolved call explains, ``own`` left out; None when some mention is outside every
    definition, or the file cannot be read: then every definition may be a user."""
    try:
        lines = (source / path).read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return None
    word = re.compile(r"\b(" + "|".join(re.escape(name) for name in sorted(names)) + r")\b")
    mentions: dict[int, Counter[str]] = {}
    for number, text in enumerate(lines, 1):
        found = Counter(word.findall(text))
        if found:
            mentions[number] = found
    if not mentions:
        return set()
    row = index.conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
    if row is None:
        return None
    file_id = row[0]
    definitions = index.conn.execute(
        f"SELECT id, name, line, end_line FROM nodes WHERE file_id = ?"
        f" AND kind IN ({','.join('?' * len(CPP_KINDS))})",
        (file_id, *sorted(CPP_KINDS)),
    ).fetchall()
    explained = _explained(index, file_id, names, definitions)
    users: set[int] = set()
    for number, found in mentions.items():
        accounted = explained.get(number, Counter())
        if all(count <= accounted[name] for name, count in found.items()):
            continue
        holders = [d for d in definitions if d[2] <= number <= d[3]]
        if not holders:
            return None
        innermost = max(holders, key=lambda d: d[2])
        if innermost[0] not in own:
            users.add(innermost[0])
    return users


def _explained(
    index: Index, file_id: int, names: set[str], definitions: list[tuple]
) -> dict[int, Counter[str]]:
    """Per line, how many mentions of each name resolved calls and definitions account for."""
    explained: dict[int, Counter[str]] = {}
    marks = ",".join("?" * len(names))
    for line, name, attrs in index.conn.execute(
        "SELECT e.line, d.name, e.attrs FROM edges e JOIN nodes d ON d.id = e.dst_id"
        f" WHERE e.file_id = ? AND e.kind = 'calls' AND instr(e.attrs, ?) > 0"
        f" AND d.name IN ({marks})",
        (file_id, _PRECISE, *sorted(names)),
    ):
        values = json.loads(attrs)
        if values.get("via"):
            continue
        explained.setdefault(line, Counter())[name] += int(values.get("sites", 1))
    for _, name, line, _ in definitions:
        if name in names:
            explained.setdefault(line, Counter())[name] += 1
    return explained


def known_from(reach: Reach, tests: set[int]) -> Known:
    """The nodes of ``reach`` on a chain from a start to a test: they reach one."""
    known = Known()
    for node_id, file_id in reach.file_id.items():
        if file_id in tests:
            _mark_chain(reach, node_id, known)
    return known


def _mark_chain(reach: Reach, node_id: int, known: Known) -> None:
    """Mark the nodes of the chain ending at ``node_id`` (a test, or a node known to
    reach one) as reaching a test; each chain is walked back only to a marked node."""
    current: int | None = node_id
    while current is not None:
        if reach.kind.get(current) not in STATEFUL:
            known.reaches.add(current)
        step = reach.steps.get(current)
        current = step.prev if step is not None else None
        if current in known.reaches:
            break


def _reaches_tests(
    walker: ImpactWalker, entity: Entity, position: int, tests: set[int], known: Known
) -> bool:
    """Whether any test reaches ``entity``. The shared walk credits each node to the first
    entity that reached it, so an entity whose closure overlaps an earlier one's is asked
    again on its own (stopping at the first test, or at a node ``known`` to reach one).
    What the walk finds is added to ``known`` for the next entity."""
    if not entity.node_ids:
        return False
    if any(node_id in known.reaches for node_id in entity.node_ids):
        return True
    if all(node_id in known.reaches_none for node_id in entity.node_ids):
        return False
    alone = walker.walk(
        dict.fromkeys(entity.node_ids, position), quota=FileQuota(tests, 1), known=known
    )
    for node_id, file_id in alone.file_id.items():
        if file_id in tests or node_id in known.reaches:
            _mark_chain(alone, node_id, known)
            return True
    known.reaches_none.update(n for n, kind in alone.kind.items() if kind not in STATEFUL)
    return False


@dataclass
class _Widening:
    """The widened entities that stand for some unreached ones; each unreached entity
    counts as reached when one of the widened entities covering it reaches a test."""

    entities: list[Entity] = field(default_factory=list)
    covers: list[list[int]] = field(default_factory=list)  # per entity: positions it covers
    # What a covered entity's "run everything" names when its widening reaches no test.
    named: dict[int, str] = field(default_factory=dict)

    def add(self, entity: Entity, positions: list[int], named: dict[int, str]) -> None:
        self.entities.append(entity)
        self.covers.append(positions)
        for position, label in named.items():
            self.named.setdefault(position, label)


def _named_users(index: Index, names: set[str]) -> dict[str, set[int]]:
    """Per function name: the sources of the unresolved C++ calls naming it (a call whose
    name-matched edge precise mode replaced was resolved, by the compiler)."""
    from indexer.precise.merge import not_superseded  # precise mode's: imported when asked

    users: dict[str, set[int]] = {}
    ordered = sorted(names)
    resolved_by_compiler = not_superseded(index.conn)
    for start in range(0, len(ordered), 900):
        batch = ordered[start : start + 900]
        for name, src in index.conn.execute(
            "SELECT DISTINCT r.target_key, r.src_id FROM refs r"
            f" WHERE r.target_key IN ({','.join('?' * len(batch))}) AND r.scheme = 'cpp'"
            " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = r.id)" + resolved_by_compiler,
            batch,
        ):
            users.setdefault(name, set()).add(src)
    return users


def _function_names(nodes: list[Node]) -> set[str]:
    return {node.name for node in nodes if node.kind in FUNCTION_KINDS}


def _called_by_name(index: Index, group: list[tuple[int, Entity, list[Node]]]) -> set[str]:
    """The names of the group's functions, if each is a free function, used only where
    its name is written (empty otherwise): a class, a constructor, a destructor or an
    operator runs without its name, and a method may override one that code outside the
    tree calls, so no mention search can find their users."""
    names: set[str] = set()
    for _, _, nodes in group:
        for node in nodes:
            scope = node.qualname.rpartition("::")[0]
            if (
                node.kind not in FUNCTION_KINDS
                or not _IDENTIFIER.fullmatch(node.name)
                or node.name.startswith("operator")
                or (scope and _is_class(index, scope))
            ):
                return set()
            names.add(node.name)
    return names


def _is_class(index: Index, qualname: str) -> bool:
    return (
        index.conn.execute(
            "SELECT 1 FROM nodes WHERE kind = 'cpp_class' AND qualname = ? LIMIT 1",
            (qualname.split("<", 1)[0],),
        ).fetchone()
        is not None
    )


def _file_users(
    index: Index, placer: Placer, paths: set[str], names: set[str], own: set[int]
) -> set[int]:
    """The definitions of ``paths`` and, for a header, of the files including it that may
    use ``names``: all of a file's, unless precise mode compiled it."""
    files = set(paths)
    for path in paths:
        if is_header(path):
            files |= placer._includers(path)
    compiled = compiled_files(index) if names else frozenset()
    whole = {path for path in files if path not in compiled}
    users: set[int] = set()
    for path in sorted(files - whole):
        found = users_in_compiled_file(index, placer.diff.source, path, names, own)
        if found is None:
            whole.add(path)
        else:
            users |= found
    return users | set(placer._ids_in_files(whole))


def _definitions(index: Index, ids: set[int]) -> list[int]:
    return [node.id for node in index.nodes(sorted(ids)) if node.kind != NodeKind.FILE.value]


def _cpp_group(
    index: Index, placer: Placer, group: list[tuple[int, Entity, list[Node]]], widening: _Widening
) -> None:
    """Widen the unreached C++ entities of one file (or set of files) to their possible
    users: the unresolved calls naming each, and the other definitions of the file (or
    of the files including it), read once for the whole group."""
    paths = {node.path for _, _, nodes in group for node in nodes}
    own_all = {node.id for _, _, nodes in group for node in nodes}
    shared = _file_users(index, placer, paths, _called_by_name(index, group), own_all)
    by_name = _named_users(
        index, {name for _, _, nodes in group for name in _function_names(nodes)}
    )

    def named_by(nodes: list[Node]) -> set[int]:
        return {src for name in _function_names(nodes) for src in by_name.get(name, ())}

    if len(group) == 1:
        position, entity, nodes = group[0]
        users = _definitions(index, (named_by(nodes) | shared) - own_all)
        if users:
            wider = _possible_users(index, entity, users)
            widening.add(wider, [position], {position: wider.label})
        return
    # Apart from what it names, each entity's possible users are the same definitions;
    # the group's own are left out of them: their walks met no test already.
    common = _definitions(index, shared - own_all)
    if common:
        where = ", ".join(sorted(paths)[:3])
        label = f"possible users of {len(group)} changed definitions in {where}"
        entity = Entity(
            label,
            "group",
            group[0][1].evidence,
            f"{WIDENED}no resolved call reaches them from a test: the other definitions of "
            "their file (or of the files including it)",
            common,
            any(e.cuda for _, e, _ in group),
            [n.qualname for n in index.nodes(common[:MEMBERS_SHOWN])],
        )
        named = {position: f"possible users of {e.label}" for position, e, _ in group}
        widening.add(entity, list(named), named)
    for position, entity, nodes in group:
        callers = named_by(nodes) - {node.id for node in nodes}
        named = _definitions(index, callers) if callers else []
        if named:
            wider = _possible_users(index, entity, named, "the calls naming it")
            widening.add(wider, [position], {position: wider.label})


def _possible_users(
    index: Index, entity: Entity, users: list[int], what: str = ALL_USERS
) -> Entity:
    return Entity(
        f"possible users of {entity.label}",
        "group",
        entity.evidence,
        f"{WIDENED}no resolved call reaches {entity.label} from a test: {what}",
        users,
        entity.cuda,
        [n.qualname for n in index.nodes(users[:MEMBERS_SHOWN])],
    )


def _python_group(
    placer: Placer, paths: tuple[str, ...], group: list[tuple[int, Entity]], widening: _Widening
) -> None:
    """Widen unreached Python definitions of the same files to those files' modules."""
    modules = [m for path in paths for m in placer._modules(path)]
    if not modules:
        return
    single = len(group) == 1
    label = f"module of {group[0][1].label}" if single else f"modules of {', '.join(paths[:3])}"
    reason = group[0][1].label if single else f"{len(group)} changed definitions"
    widening.add(
        Entity(
            label,
            "group" if len(modules) > 1 else modules[0].kind,
            group[0][1].evidence,
            f"{WIDENED}no test names {reason}: its module and that module's importers",
            [m.id for m in modules],
            any(e.cuda for _, e in group),
            [m.qualname for m in modules[:MEMBERS_SHOWN]],
        ),
        [position for position, _ in group],
        {position: f"module of {entity.label}" for position, entity in group},
    )


def _widen(index: Index, placer: Placer, unreached: list[tuple[int, Entity]]) -> _Widening:
    """The widened entities of every unreached entity, grouped by file: one read of a
    file's definitions for all its entities (a new file of N functions: N entities)."""
    widening = _Widening()
    nodes_of = {node.id: node for node in index.nodes(n for _, e in unreached for n in e.node_ids)}
    python: dict[tuple[str, ...], list[tuple[int, Entity]]] = {}
    cpp: dict[tuple[str, ...], list[tuple[int, Entity, list[Node]]]] = {}
    for position, entity in unreached:
        nodes = [nodes_of[n] for n in entity.node_ids if n in nodes_of]
        if not nodes or entity.reason.startswith(WIDENED):
            continue
        paths = tuple(sorted({node.path for node in nodes}))
        if all(node.kind in PYTHON_DEFS for node in nodes):
            python.setdefault(paths, []).append((position, entity))
        elif all(node.kind in CPP_KINDS for node in nodes):
            cpp.setdefault(paths, []).append((position, entity, nodes))
    for paths, group in python.items():
        _python_group(placer, paths, group, widening)
    for group in cpp.values():
        _cpp_group(index, placer, group, widening)
    return widening


def _only_outside_users(
    index: Index, walker: ImpactWalker, placer: Placer, entities: list[Entity]
) -> list[str] | None:
    """The ops ending every chain from these entities, if all are ops nothing in the tree
    names; else None."""
    starts = {node_id for entity in entities for node_id in entity.node_ids}
    alone = walker.walk(dict.fromkeys(starts, 0))
    return unnamed_ops(index, placer.diff.source, ends(alone, starts, index))


@dataclass
class Fallbacks:
    """What widening found for the entities no test reaches."""

    # position of each widened entity -> the positions of the entities it stands for
    covers: dict[int, list[int]] = field(default_factory=dict)
    # (position, what names it) of the entities nothing reaches even widened, whose
    # chains do not all end at ops outside the tree: any test may reach them
    unreached: list[tuple[int, str]] = field(default_factory=list)


def _uncredited(
    reach: Reach, selection: Selection, tests: set[int], positions: Iterable[int]
) -> list[int]:
    """Of ``positions``, the entities with nodes that no test in ``reach`` reaches: the
    walk's nodes are read only until each is found reaching one (a central change's walk
    holds ~80,000)."""
    left = {p for p in positions if selection.entities[p].node_ids}
    if left:
        for node_id, file_id in reach.file_id.items():
            if file_id in tests:
                left.discard(reach.origin[node_id])
                if not left:
                    break
    return sorted(left)


def apply_fallbacks(
    index: Index,
    walker: ImpactWalker,
    reach: Reach,
    placer: Placer,
    selection: Selection,
    tests: set[int],
    positions: Iterable[int],
) -> Fallbacks:
    """Widen each entity of ``positions`` that no test in ``reach`` reaches, once, and
    add what the widened entities reach to ``reach``. Those nothing reaches even widened
    are returned: the merge decides what they select (``indexer.select.engine``). The
    walks share what they learn (:class:`Known`), so the cost grows with the nodes
    walked, not with entities times nodes."""
    found = Fallbacks()
    asked = [
        (position, selection.entities[position])
        for position in _uncredited(reach, selection, tests, positions)
    ]
    if not asked:
        return found
    known = known_from(reach, tests)  # only now: a central change's walk is large
    unreached = [
        (position, entity)
        for position, entity in asked
        if not _reaches_tests(walker, entity, position, tests, known)
    ]
    if not unreached:
        return found
    widening = _widen(index, placer, unreached)
    first = len(selection.entities)
    selection.entities += widening.entities
    walked = walker.walk(
        {n: first + i for i, e in enumerate(widening.entities) for n in e.node_ids}
    )
    added = reach.merge(walked)
    # The widened entities' positions are new: only what their walk added credits them.
    credited = {reach.origin[n] for n in added if reach.file_id[n] in tests}
    covered: set[int] = set()
    for offset, positions_covered in enumerate(widening.covers):
        position = first + offset
        found.covers[position] = positions_covered
        if covered.issuperset(positions_covered):
            continue
        wider = selection.entities[position]
        if position in credited or _reaches_tests(walker, wider, position, tests, known):
            covered.update(positions_covered)
    left = [(position, entity) for position, entity in unreached if position not in covered]
    if not left:
        return found
    # One question for all of them: a walk per entity would cost entities times nodes.
    wider = [
        selection.entities[first + offset]
        for offset, positions_covered in enumerate(widening.covers)
        if any(position in positions_covered for position, _ in left)
    ]
    outside = _only_outside_users(index, walker, placer, [*wider, *(e for _, e in left)])
    for position, entity in left:
        if outside is not None:
            selection.notes.append(
                f"{entity.label} (changed at {entity.evidence}) reaches no test: every "
                f"chain from it ends at ops nothing in the tree names ({', '.join(outside)}),"
                " whose callers are outside the tree"
            )
        else:
            found.unreached.append((position, widening.named.get(position, entity.label)))
    return found
