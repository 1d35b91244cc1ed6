"""affected: which tests can a change to these functions break, and why.

The selection engine's impact walk (indexer.select.impact) from the named definitions,
without a diff: each impacted test file comes with the shortest chain of evidence from
the change to the test, every hop with file:line. ``depth`` caps the hops (default: no
cap, as test selection walks).

Files are ranked as ``tests`` ranks tests (:func:`indexer.query.tests.rank_tests`, the
one ranking): files whose tests name the changed op or function themselves first, then
those with OpInfo-driven tests whose ``@ops`` list holds it, then files reached further
away, nearest first. A file reached only through OpInfo tests whose ``@ops`` list excludes
the op is not listed (the answer counts them and names them in its data).

The answer lists the ``limit`` nearest test files, and the walk, breadth-first, stops
once it has found them: a central function (``at::native::matmul``) reaches nearly every
test file through ~76,000 nodes, seconds of walking for a list no agent reads past its
first screen. Such an answer says it is a lower bound ("at least 50"); a walk that ends
before the limit is complete and says how many. ``torchtalk select`` on a diff always
walks to the end. One walker serves every call on an index, so what it learnt of the
sources (which lines call an op, module statements) carries over between calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from threading import Lock

from indexer.graph.vocabulary import NodeKind
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node
from indexer.query.native_reach import NativeReach
from indexer.query.py_lookup import reexported
from indexer.query.recorded_answers import native_walk, record_evidence
from indexer.query.test_rank import FURTHER, TIER_TEXT
from indexer.query.tests import (
    NEAREST_OPS,
    RankedTests,
    ReachedTest,
    named_for,
    named_ids,
    op_names,
    rank_tests,
    with_named,
)
from indexer.select.impact import ImpactWalker
from indexer.select.model import Entity
from indexer.select.reach import FileQuota, reasons_for
from indexer.wording import plural

CHANGEABLE = (
    NodeKind.CPP_FUNCTION.value,
    NodeKind.CUDA_KERNEL.value,
    NodeKind.DISPATCH_STUB.value,
    NodeKind.OP.value,
    NodeKind.DERIVATIVE.value,
    NodeKind.BINDING.value,
    NodeKind.PYTHON_FUNCTION.value,
    NodeKind.PYTHON_CLASS.value,
    NodeKind.PYTHON_MODULE.value,
    NodeKind.TEST_UTILITY.value,
)
MAX_FILES = 50  # files walked to and kept, each with its chain; the MCP tool says "50"
MAX_HOPS_SHOWN = 12
CHAINS_SHOWN = 3  # files whose chains the text spells out, hop by hop (the rest: in data)
TESTS_NAMED = 3  # a file's most direct tests named in its line
RANKED_HOPS = 2  # a test naming it (1), an OpInfo test through its entry (2)


def _resolve(index: Index, name: str) -> list[Node]:
    """Definitions named ``name``: by qualified or short name, then by a qualified suffix
    (``native::matmul``, ``functional.linear``)."""
    nodes = index.find_spelled(name, CHANGEABLE)
    exact = [node for node in nodes if node.qualname == name]
    if exact or nodes:
        return exact or nodes
    exported = [node for node in reexported(index, name) if node.kind in CHANGEABLE]
    if exported:
        return exported
    separator = "." if "." in name and "::" not in name else "::"
    rows = index.conn.execute(
        "SELECT n.id FROM nodes n WHERE n.qualname LIKE ? ESCAPE '\\'"
        f" AND n.kind IN ({','.join('?' * len(CHANGEABLE))})",
        ["%" + separator + name.replace("%", "\\%").replace("_", "\\_"), *CHANGEABLE],
    ).fetchall()
    return index.nodes(row[0] for row in rows)


def affected(
    index: Index,
    funcs: Iterable[str] | str,
    depth: int | None = None,
    limit: int | None = None,
) -> Answer:
    """The test files a change to ``funcs`` can break, most directly tested first. Without
    ``limit`` the nearest MAX_FILES, the text within its budget; with it, that many, all
    in the text."""
    if limit is not None and limit < 1:
        raise ValueError(f"affected: limit must be at least 1, not {limit}")
    answer = _affected(index, funcs, depth, limit or MAX_FILES)
    if limit is not None:  # asked for a number of files: they are what the text shows
        answer.budget = None
    return answer


def _affected(index: Index, funcs: Iterable[str] | str, depth: int | None, limit: int) -> Answer:
    names = [part.strip() for part in funcs.split(",")] if isinstance(funcs, str) else list(funcs)
    names = [name for name in names if name]
    query = ", ".join(names)
    entities: list[Entity] = []
    starts: dict[int, int] = {}
    missing: list[str] = []
    for name in names:
        nodes = _resolve(index, name)
        if not nodes:
            missing.append(name)
            continue
        label = nodes[0].qualname if len(nodes) == 1 else name
        entity = Entity(label, nodes[0].kind, nodes[0].evidence, "named", [n.id for n in nodes])
        for node in nodes:
            starts.setdefault(node.id, len(entities))
        entities.append(entity)
    if not entities:
        return Answer.not_found(
            "affected", query, "function", index.suggest(names[0] if names else "")
        )
    tests = index.test_file_paths()
    quota = FileQuota(tests, limit)
    walker, walking = index.shared("impact-walker", lambda: (ImpactWalker(index), Lock()))
    with walking:  # the walker's per-file caches are not for two walks at once
        reach = walker.walk(starts, quota=quota, max_depth=depth)
    complete = not quota.full
    paths = index.file_paths()
    by_file: dict[str, list[int]] = {}
    for node_id, file_id in reach.file_id.items():
        if file_id in tests:
            by_file.setdefault(tests[file_id], []).append(node_id)
    named = index.nodes(node_id for entity in entities for node_id in entity.node_ids)
    native = native_walk(index, named)  # once, for the record and the ranking
    evidence = record_evidence(index, named, query, native)
    # Two hops hold the tiers that order files (naming it; OpInfo entry -> op); files
    # further away keep the impact walk's order, which the deeper levels would only redo.
    ranking = rank_tests(
        index,
        _ranking_starts(index, named, native),
        evidence.tests if evidence else (),
        max_depth=RANKED_HOPS,
    )
    excluded = _excluded_files(index, by_file, ranking)
    for path in excluded:
        del by_file[path]
    answer = Answer("affected", query)
    cap = "" if depth is None else f" within {depth} hops"
    answer.title = (
        f"{len(by_file)} test files can break from a change to {query}{cap} "
        f"(of {len(tests)} test files)"
    )
    if not complete:
        answer.title = (
            f"at least {len(by_file)} test files can break from a change to {query}{cap} "
            f"(of {len(tests)} test files); the {len(by_file)} nearest are listed, and the "
            "walk stopped there: 'torchtalk select' on a diff finds every one"
        )
    # Tests named for it (test_<name>) that no path reaches: as `tests` lists them, after
    # the files that name it, their files listed even where the walk did not reach them.
    reached_tests = {hit.id for hit in ranking.ranked}
    test_names = [*names, *op_names(index, native)]
    ids = named_ids(index, test_names)
    named_tests = {hit.id: hit for hit in named_for(index, (), reached_tests, ids)}
    ordered = with_named(ranking.ranked, list(named_tests.values()), ids, test_names)
    direct = _tests_by_file(ordered)
    named_only = sorted({hit.path for hit in named_tests.values()} - set(by_file))
    if named_only:
        answer.title += (
            f"; {len(named_only)} more hold{'s' if len(named_only) == 1 else ''} a test "
            "named for it"
        )
    nearest = {path: min(reach.depth.get(n, 0) for n in ids) for path, ids in by_file.items()}
    ranked = sorted([*by_file, *named_only], key=lambda p: _file_key(p, direct, nearest, by_file))
    walked = [path for path in ranked if path in by_file]
    firsts = [min(by_file[path], key=lambda n: reach.depth.get(n, 0)) for path in walked]
    reasons = dict(zip(walked, reasons_for(index, reach, firsts, entities, paths), strict=True))
    for position, path in enumerate(ranked):
        hits = direct.get(path, [])
        reason = reasons.get(path)
        if reason is None:  # named for it, and no path reaches it
            shown = ", ".join(hit.qualname.rsplit("::", 1)[-1] for hit in hits[:TESTS_NAMED])
            answer.items.append(
                Item(
                    path,
                    hits[0].evidence,
                    f"named for it ({shown}); the index holds no call path from it",
                    data={"tier": FURTHER, "tests": [_test_data(hit) for hit in hits]},
                )
            )
            continue
        tier = hits[0].tier if hits else FURTHER
        ran = "ran it in the record; " if hits and hits[0].ran else ""
        detail = f"{ran}{TIER_TEXT[tier]}; {len(reason.chain)} hops from {reason.entity}"
        if any(hit.kind != "test_file" for hit in hits):
            tests = [hit for hit in hits if hit.kind != "test_file"]  # the file is the line
            shown = ", ".join(hit.qualname.rsplit("::", 1)[-1] for hit in tests[:TESTS_NAMED])
            more = f" and {len(tests) - TESTS_NAMED} more" if len(tests) > TESTS_NAMED else ""
            detail += f"; {shown}{more}"
        answer.items.append(
            Item(
                path,
                hits[0].evidence if hits else _chain_end(reason),
                detail,
                data={
                    "tier": tier,
                    # the file's tests, most direct first: name in the file, line, tier (and
                    # "ran" when a record saw it run); kept short, a central function's
                    # answer lists hundreds
                    "tests": [_test_data(hit) for hit in hits],
                    "chain": [vars(hop) for hop in reason.chain],
                    "reached": len(by_file[path]),
                },
            )
        )
        if position < CHAINS_SHOWN:  # further files' chains are in their items' data
            for hop in reason.chain[:MAX_HOPS_SHOWN]:
                answer.items.append(
                    Item(
                        f"{hop.src} {hop.kind} {hop.dst}",
                        hop.evidence,
                        depth=1,
                        data={"minor": True},  # the budget drops hops before files
                    )
                )
    answer.data = {
        "test_files": sorted(by_file),
        "ranked_files": ranked,
        "named_only_files": named_only,
        "complete": complete,
        "changed": [{"name": e.label, "kind": e.kind, "evidence": e.evidence} for e in entities],
    }
    answer.more = "pass limit=N to list N files; each file's chain and tests are in its item's data"
    if excluded:
        answer.notes.append(
            f"{plural(len(excluded), 'test file')} left out: reached only through OpInfo tests whose "
            f"@ops list excludes it (e.g. {excluded[0]})"
        )
        answer.data["excluded_by_ops_list"] = excluded
    if missing:
        answer.notes.append(f"not found in the index: {', '.join(missing)}")
    unreached = [
        e.label
        for i, e in enumerate(entities)
        if not any(reach.origin[n] == i for path in by_file for n in by_file[path])
    ]
    if not by_file:
        answer.notes.append(
            f"no test reaches {query}{cap}: its users may be invisible to the index "
            "(generated code, function pointers); test selection would run everything"
        )
    elif complete and unreached and len(entities) > 1:
        answer.notes.append(f"no test was credited to {', '.join(unreached)} (shared paths)")
    answer = answer.truncate(limit + CHAINS_SHOWN * MAX_HOPS_SHOWN)
    if evidence is not None:
        evidence.add_to(answer)
    return answer


def _ranking_starts(index: Index, named: list[Node], native: NativeReach | None) -> list[Node]:
    """What tests are ranked against: the named definitions and, for native code (which
    tests do not name), the nearest ops whose kernels reach it (``native``: the walk from
    the named native code): a test naming ``torch.bincount`` tests
    ``at::native::_bincount_cpu`` directly."""
    if native is None:
        return named
    return [*named, *index.nodes(native.ops[:NEAREST_OPS])]


def _test_data(hit: ReachedTest) -> dict[str, object]:
    data: dict[str, object] = {
        "name": hit.qualname.partition("::")[2] or hit.qualname,
        "line": hit.line,
        "tier": hit.tier,
    }
    if hit.ran:
        data["ran"] = True
    return data


def _tests_by_file(ranked: list[ReachedTest]) -> dict[str, list[ReachedTest]]:
    """Each file's tests in ``tests``' order (most direct first)."""
    by_path: dict[str, list[ReachedTest]] = {}
    for hit in ranked:
        by_path.setdefault(hit.path, []).append(hit)
    return by_path


def _file_key(
    path: str,
    direct: dict[str, list[ReachedTest]],
    nearest: dict[str, int],
    by_file: dict[str, list[int]],
) -> tuple:
    """A file ranks as its most direct test does in ``tests``; files that ranking does not
    reach (further away than its walk) after them, nearest first, then those where the
    walk reached the most."""
    hits = direct.get(path)
    if hits:
        return (0, hits[0].position, path)
    return (1, nearest[path], -len(by_file[path]), path)


def _excluded_files(index: Index, by_file: dict[str, list[int]], ranking: RankedTests) -> list[str]:
    """Files reached only through tests an @ops list leaves out: every test function the
    impact walk reached there is one of them, and no test of the file ranks."""
    dropped: dict[str, set[int]] = {}
    for hit in ranking.dropped:
        dropped.setdefault(hit.path, set()).add(hit.id)
    kept = {hit.path for hit in ranking.ranked}
    excluded = []
    for path, ids in dropped.items():
        if path not in by_file or path in kept:
            continue
        reached = [n for n in index.nodes(by_file[path]) if n.kind == "test_function"]
        if reached and all(node.id in ids for node in reached):
            excluded.append(path)
    return sorted(excluded)


def _chain_end(reason) -> str:
    return reason.chain[-1].evidence if reason.chain else reason.evidence
