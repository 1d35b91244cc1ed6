"""tests: which tests exercise an op or API, the test utilities, one test file's contents.

- ``mode="find"``: the tests reaching ``query`` (an op: ``matmul``, ``aten::add.Tensor``,
  ``torch.matmul``; a Python API: ``torch.nn.Linear``; an OpInfo name), found by walking
  ``covers`` and ``references`` edges back from it: tests naming it directly, OpInfo-driven
  tests whose list holds an entry for it, tests calling Python code that reaches it.
  Nearest first; each test with the hop it was reached by. ``focus`` narrows the listing
  to ``"functions"``, ``"classes"`` or ``"files"``; ``data["files"]`` always lists every
  file reached.
- ``mode="utils"``: test utilities and fixtures (``query`` filters by name;
  ``focus="fixtures"`` lists only fixtures).
- ``mode="file_info"``: a test file's classes (device-generic variants), tests
  (parametrization, OpInfo lists) and fixtures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from indexer.query import adjacency, test_rank
from indexer.query.answer import Answer, Item
from indexer.query.index import Edge, Index, Node
from indexer.query.native_reach import NativeReach
from indexer.query.op_lookup import lookup
from indexer.query.py_lookup import IndexNames, definitions, suggest
from indexer.query.recorded_answers import native_walk, record_evidence
from indexer.wording import plural

MODES = ("find", "utils", "file_info")
FOCUS = ("functions", "classes", "files")
TEST_KINDS = frozenset({"test_file", "test_class", "test_function"})
WALK_EDGES = ("covers", "references")
MAX_DEPTH = 4
DEFAULT_LIMIT = 50  # items kept when no limit is asked (the text keeps to its budget)
MAX_VISITED = 20_000
NEAREST_OPS = 8  # ops a C++ function's tests are named for (nearest first)


@dataclass
class ReachedTest:
    """A test reached: what ranks and counts it (its full node is read only if shown)."""

    id: int
    kind: str
    qualname: str
    path: str
    line: int
    depth: int
    via: Edge | None  # the first hop from the test towards the query
    tier: int = 0  # how directly it tests the query (indexer/query/test_rank.py)
    position: int = 0  # its place in the ranking, most direct first
    ran: bool = False  # a record saw it execute what the query names
    named_only: bool = False  # named for the query (test_<name>), no path in the index

    @classmethod
    def of(cls, node: Node, depth: int, via: Edge | None) -> ReachedTest:
        return cls(node.id, node.kind, node.qualname, node.path, node.line, depth, via)

    @property
    def evidence(self) -> str:
        return f"{self.path}:{self.line}"


def tests(
    index: Index,
    query: str | None = None,
    mode: str = "find",
    limit: int | None = None,
    focus: str | None = None,
) -> Answer:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1 (got {limit})")
    answer = _answer(index, query, mode, limit or DEFAULT_LIMIT, focus)
    if limit is not None:  # asked for a number of items: they are what the text shows
        answer.budget = None
    elif answer.budget is not None:
        answer.more = "pass limit=N to list N, or focus='files'"
    return answer


def _answer(index: Index, query: str | None, mode: str, limit: int, focus: str | None) -> Answer:
    query = (query or "").strip() or None
    if mode == "utils":
        if focus not in (None, "fixtures"):
            raise ValueError(f"focus for utils must be 'fixtures' or nothing (got {focus!r})")
        return _utilities(index, query, limit, focus)
    if query is None:
        raise ValueError(f"tests(mode={mode!r}) needs a query")
    if mode == "file_info":
        return _file_info(index, query, limit)
    if focus is not None and focus not in FOCUS:
        raise ValueError(f"focus must be one of {', '.join(FOCUS)} (got {focus!r})")
    return _find(index, query, limit, focus)


# --- find ---------------------------------------------------------------------------------


def _starts(index: Index, query: str) -> tuple[list[Node], str]:
    """The nodes a query names: ops (and their bindings), Python definitions, OpInfos."""
    found = lookup(index, query)
    starts: list[Node] = [*found.ops, *found.bindings]
    how = found.how
    nodes, py_how = definitions(index, query, IndexNames(index))
    if nodes and (not starts or py_how != "short name"):
        starts.extend(node for node in nodes if node.kind != "python_module" or "." in query)
        how = how or f"Python {py_how}"
    opinfos = [
        node
        for node in index.find(query, ["opinfo"])
        if node.attrs.get("name") == query or node.qualname == query
    ]
    starts.extend(opinfos)
    if opinfos and not how:
        how = "OpInfo name"
    tests_named = [node for node in index.find(query) if node.kind in TEST_KINDS]
    starts.extend(tests_named)
    return list({node.id: node for node in starts}.values()), how or "test name"


_IN_EDGES_SQL = (
    "SELECT e.src_id, e.dst_id, e.kind, e.file_id, e.line, n.kind FROM edges e"
    " JOIN nodes n ON n.id = e.src_id WHERE e.dst_id IN ({ids}) AND e.kind IN ({kinds})"
)
_BATCH = 900  # ids per query, under SQLite's bound-parameter limit


def _level_in_edges(index: Index, frontier: list[int], tests_only: bool) -> list[tuple]:
    """Every covers/references edge into ``frontier``, with its source's kind (only from
    tests when ``tests_only``), in the order per-node reads would give (frontier order,
    file, line): from the index's in-memory adjacency when this process holds it (a
    server loads it when idle), else one query per batch."""
    paths = index.file_paths()
    graph = adjacency.held(index.db_path, index.meta)
    if graph is not None:
        rows = [
            (src, dst, kind, paths.get(file_id, "?"), line, src_kind)
            for src, dst, kind, file_id, line, _ in graph.into(frontier, graph.codes(WALK_EDGES))
            if (src_kind := graph.kind(src)) is not None
            and (not tests_only or src_kind in TEST_KINDS)
        ]
    else:
        rows = _level_in_edges_sql(index, frontier, tests_only, paths)
    position = {node_id: i for i, node_id in enumerate(frontier)}
    rows.sort(key=lambda row: (position[row[1]], row[3], row[4]))
    return rows


def _level_in_edges_sql(
    index: Index, frontier: list[int], tests_only: bool, paths: dict[int, str]
) -> list[tuple]:
    rows: list[tuple] = []
    kinds = ",".join("?" * len(WALK_EDGES))
    only = f" AND n.kind IN ({','.join(repr(kind) for kind in sorted(TEST_KINDS))})"
    for start in range(0, len(frontier), _BATCH):
        batch = frontier[start : start + _BATCH]
        sql = _IN_EDGES_SQL.format(ids=",".join("?" * len(batch)), kinds=kinds)
        for src, dst, kind, file_id, line, src_kind in index.conn.execute(
            sql + (only if tests_only else ""), [*batch, *WALK_EDGES]
        ):
            rows.append((src, dst, kind, paths.get(file_id, "?"), line, src_kind))
    return rows


def _walk(
    index: Index, starts: list[Node], max_depth: int = MAX_DEPTH
) -> tuple[dict[int, ReachedTest], bool]:
    """Breadth-first back along covers/references; tests are collected, not walked past.

    One batched query per level reads the edges and their sources' kinds; only the tests
    reached are read in full (per-edge reads took thousands of queries for 'matmul')."""
    hits: dict[int, ReachedTest] = {}
    depth_of = {node.id: 0 for node in starts}
    for node in starts:
        if node.kind in TEST_KINDS:
            hits[node.id] = ReachedTest.of(node, 0, None)
    reached: list[tuple[int, int, Edge]] = []  # (test id, depth, first hop)
    frontier = list(depth_of)
    truncated = False
    for depth in range(max_depth):
        following = []
        # At the last level only tests count: what else is reached there is not walked.
        last = depth == max_depth - 1
        for src, dst, kind, path, line, src_kind in _level_in_edges(index, frontier, last):
            if src in depth_of:
                continue
            if len(depth_of) >= MAX_VISITED:
                truncated = True
                break
            depth_of[src] = depth + 1
            if src_kind in TEST_KINDS:
                edge = Edge(src, dst, kind, path, line, {})  # (its attrs are not shown)
                reached.append((src, depth + 1, edge))
            elif src_kind not in ("python_module", "file"):
                following.append(src)
        if truncated or not following:
            break
        frontier = following
    found = _light_nodes(index, [src for src, _, _ in reached])
    for src, depth, edge in reached:
        if src in found:
            kind, qualname, path, line = found[src]
            hits[src] = ReachedTest(src, kind, qualname, path, line, depth, edge)
    return hits, truncated


def _light_nodes(index: Index, ids: list[int]) -> dict[int, tuple[str, str, str, int]]:
    """id -> (kind, qualname, path, line), without the attrs (large for parametrized
    tests) that only the few tests shown need."""
    found: dict[int, tuple[str, str, str, int]] = {}
    for start in range(0, len(ids), _BATCH):
        batch = ids[start : start + _BATCH]
        for node_id, kind, qualname, path, line in index.conn.execute(
            "SELECT n.id, n.kind, n.qualname, f.path, n.line FROM nodes n"
            f" JOIN files f ON f.id = n.file_id WHERE n.id IN ({','.join('?' * len(batch))})",
            batch,
        ):
            found[node_id] = (kind, qualname, path, line)
    return found


def _describe(hit: ReachedTest, targets: dict[int, Node]) -> str:
    if hit.via is None:
        return "named"
    target = targets[hit.via.dst]
    if target.kind == "opinfo":
        return f"OpInfo {target.qualname}"
    hop = f"{hit.via.kind} {target.qualname}"
    return hop if hit.depth == 1 else f"{hop} (+{hit.depth - 1} hops)"


@dataclass
class RankedTests:
    """The tests reaching some nodes, most direct first (what ``tests`` lists and
    ``affected`` orders its files by), and those an ``@ops`` list leaves out."""

    ranked: list[ReachedTest]
    dropped: list[ReachedTest]  # OpInfo tests whose @ops list excludes the nodes' entries
    truncated: bool  # the walk stopped at MAX_VISITED nodes


def rank_tests(
    index: Index, starts: list[Node], executed: Iterable[str] = (), max_depth: int = MAX_DEPTH
) -> RankedTests:
    """The one ranking of tests by how directly they test ``starts``: walked back along
    covers/references (``max_depth`` hops), tiered and filtered by
    indexer/query/test_rank.py; tests a record saw execute them (``executed``: recorded
    node ids) before all others."""
    hits, truncated = _walk(index, starts, max_depth)
    ranked, dropped = _rank(index, list(hits.values()), starts, test_rank.RecordedIds(executed))
    for position, hit in enumerate(ranked):
        hit.position = position
    return RankedTests(ranked, dropped, truncated)


def _find(index: Index, query: str, limit: int, focus: str | None) -> Answer:
    starts, how = _starts(index, query)
    if not starts:
        return Answer.not_found("tests", query, "Op, Python API or test", suggest(index, query))
    native = native_walk(index, starts)
    evidence = record_evidence(index, starts, query, native)
    found = rank_tests(index, starts, evidence.tests if evidence else ())
    ranked, dropped, truncated = found.ranked, found.dropped, found.truncated
    ops = [node.qualname for node in starts if node.kind == "op"][:NEAREST_OPS]
    names = [query, *ops, *op_names(index, native)]
    ids = named_ids(index, names)
    named = named_for(index, (), {hit.id for hit in ranked}, ids)
    reaching = len(ranked)
    ranked = with_named(ranked, named, ids, names)
    files: dict[str, int] = {}
    for hit in ranked:
        files[hit.path] = files.get(hit.path, 0) + 1
    answer = Answer("tests", query)
    if not ranked:
        answer.title = (
            f"No test reaches {query} ({how}: {', '.join(n.qualname for n in starts[:5])})."
        )
        answer.notes.append("the index holds no covers/references path from a test to it")
        if evidence is not None:
            evidence.add_to(answer)
        return answer
    if focus == "files":
        for path in files:
            answer.items.append(Item(path, f"{path}:1", f"{files[path]} tests reach it"))
    else:
        wanted = {"functions": ("test_function",), "classes": ("test_class",)}.get(
            focus or "", ("test_function", "test_class", "test_file")
        )
        shown = [hit for hit in ranked if hit.kind in wanted]
        page = shown[:limit]  # only these are listed: the rest are counted
        vias = index.nodes(hit.via.dst for hit in page if hit.via is not None)
        targets = {node.id: node for node in vias}
        attrs = {node.id: node.attrs for node in index.nodes(hit.id for hit in page)}
        for hit in page:
            ran = "ran it in the record; " if hit.ran else ""
            detail = f"{ran}{test_rank.TIER_TEXT[hit.tier]}: {_describe(hit, targets)}"
            if hit.named_only:
                detail = "named for it; the index holds no call path from it"
            opinfo_list = attrs.get(hit.id, {}).get("opinfo_list")
            if opinfo_list:
                detail += f"; @ops({opinfo_list})"
            answer.items.append(
                Item(
                    hit.qualname,
                    hit.evidence,
                    detail,
                    data={"kind": hit.kind, "depth": hit.depth, "tier": hit.tier, "ran": hit.ran},
                )
            )
        if len(shown) > len(page):
            answer.total = len(shown)
    answer.title = (
        f"{plural(reaching, 'test')} reach{'es' if reaching == 1 else ''} {query} ({how})"
        + (f", {len(named)} more named for it" if named else "")
        + f"; {plural(len(files), 'file')}, nearest first:"
    )
    answer.data = {"files": sorted(files), "starts": [n.qualname for n in starts[:20]]}
    if dropped:
        answer.notes.append(
            f"{len(dropped)} OpInfo tests left out: their @ops list excludes {query}"
            f" (e.g. {dropped[0].qualname})"
        )
        answer.data["excluded_by_ops_list"] = [hit.qualname for hit in dropped]
    if truncated:
        answer.notes.append(f"walk stopped after {MAX_VISITED} nodes; more tests may reach it")
    answer = answer.truncate(limit)
    if evidence is not None:
        evidence.add_to(answer)
    return answer


MAX_NAMED_ONLY = 20  # tests named for the query with no path, listed after the direct ones
MAX_EXACT_FIRST = 5  # of them, named exactly test_<name>: listed before the direct ones
NAMED_READ = 500  # tests named for it read, reached or not
# test_X or test_X_*: a range over the name index ('`' sorts right after '_'), not a
# LIKE, which scans every test function (12 ms on vLLM's 18,611).
# A python_function named so in a test file is a test template's method (inductor's
# CommonTemplate, copied into device test classes when the module runs): a test too.
_NAMED_SQL = (
    "SELECT n.id, n.kind, n.file_id FROM nodes n"
    " WHERE (n.name = ? OR (n.name >= ? AND n.name < ?))"
    " AND n.kind IN ('test_function', 'python_function') LIMIT ?"
)


def named_ids(index: Index, names: Iterable[str]) -> set[int]:
    """Test functions named for what any of ``names`` names (``align_tensors``,
    ``aten::align_tensors.default``, ``torch.align_tensors``: ``test_align_tensors``,
    ``test_align_tensors_*``)."""
    ids: set[int] = set()
    test_files = index.test_file_paths()
    for base in test_bases(names):
        for spelled in dict.fromkeys((base, base.lower())):  # test_rnn_* for RNN, as written
            prefix = f"test_{spelled}_"
            rows = index.conn.execute(
                _NAMED_SQL, (f"test_{spelled}", prefix, prefix[:-1] + "`", NAMED_READ)
            )
            ids.update(
                node_id
                for node_id, kind, file_id in rows
                if kind == "test_function" or file_id in test_files
            )
    return ids


def test_bases(names: Iterable[str]) -> list[str]:
    """What tests named for ``names`` are named after: ``add`` for ``aten::add.Tensor``,
    ``softmax`` for ``torch.nn.functional.softmax``."""
    bases = []
    for query in names:
        name = query.strip()
        if "::" in name:  # aten::add.Tensor: the op's name without namespace and overload
            name = name.rpartition("::")[2].split(".", 1)[0]
        base = name.rpartition(".")[2].lstrip("_")
        if len(base) >= 3 and base.isidentifier():
            bases.append(base)
    return list(dict.fromkeys(bases))


def named_for(
    index: Index, names: Iterable[str], reached: set[int], ids: set[int] | None = None
) -> list[ReachedTest]:
    """The tests of :func:`named_ids` (``ids``, if the caller read them) that no
    covers/references path reaches: a call through a harness, a module attribute or a
    generated binding the index cannot follow. Listed as such, after the tests that name
    it."""
    found: dict[int, ReachedTest] = {}
    for node in index.nodes(sorted((named_ids(index, names) if ids is None else ids) - reached)):
        hit = ReachedTest.of(node, 1, None)
        hit.kind = "test_function"  # a test template's method is listed as the test it is
        hit.tier, hit.named_only = test_rank.FURTHER, True
        found[node.id] = hit
    return sorted(found.values(), key=lambda hit: (hit.path, hit.line))[:MAX_NAMED_ONLY]


def with_named(
    ranked: list[ReachedTest],
    named: list[ReachedTest],
    ids: set[int] = frozenset(),
    names: Iterable[str] = (),
) -> list[ReachedTest]:
    """Tests named for the query ranked as dedicated to it: the reached ones of ``ids``
    (test_ceil_*, however far their path) right after the tests that are what the query
    names and those a record saw run it; then the first few of ``named`` (no path reaches
    them) named exactly for one of ``names`` (``test_ceil``: the test of it, its calls
    through another module's name or a harness); then the tests that name it themselves;
    then the rest of ``named``; then OpInfo harness tests and tests further away.
    Positions renumbered."""
    start = next(
        (i for i, hit in enumerate(ranked) if hit.tier >= test_rank.DIRECT and not hit.ran),
        len(ranked),
    )
    promoted = [hit for hit in ranked[start:] if hit.id in ids]
    others = [hit for hit in ranked[start:] if hit.id not in ids]
    cut = next((i for i, hit in enumerate(others) if hit.tier >= test_rank.OPINFO), len(others))
    exact_names = {f"test_{base.lower()}" for base in test_bases(names)}
    exact = [hit for hit in named if hit.qualname.rpartition("::")[2].lower() in exact_names]
    exact = exact[:MAX_EXACT_FIRST]
    rest = [hit for hit in named if hit not in exact]
    merged = [*ranked[:start], *promoted, *exact, *others[:cut], *rest, *others[cut:]]
    for position, hit in enumerate(merged):
        hit.position = position
    return merged


def op_names(index: Index, native: NativeReach | None) -> list[str]:
    """The nearest ops whose kernels reach the native code a query names: what tests of
    a C++ function or kernel are named for (test_segment_reduce for segment_reduce_kernel)."""
    if native is None:
        return []
    return [node.qualname for node in index.nodes(native.ops[:NEAREST_OPS])]


def _rank(
    index: Index, hits: list[ReachedTest], starts: list[Node], executed: test_rank.RecordedIds
) -> tuple[list[ReachedTest], list[ReachedTest]]:
    """(tests most direct first, OpInfo tests whose @ops list excludes the query's
    entries): see indexer/query/test_rank.py."""
    via_ids = {hit.via.dst for hit in hits if hit.via is not None}
    graph = adjacency.held(index.db_path, index.meta)
    if graph is not None:  # the kinds are in memory
        kinds = {node_id: graph.kind(node_id) for node_id in via_ids}
    else:
        kinds = {node_id: row[0] for node_id, row in _light_nodes(index, list(via_ids)).items()}
    opinfo_hits = [
        hit for hit in hits if hit.via is not None and kinds.get(hit.via.dst) == "opinfo"
    ]
    lists = _opinfo_lists(index, [hit.id for hit in opinfo_hits])
    entries = {node.id: node.attrs for node in index.nodes({hit.via.dst for hit in opinfo_hits})}
    filters = index.shared(
        "ops-filters", lambda: test_rank.OpsFilters(index.meta.get("source_path"))
    )
    dropped = []
    kept = []
    for hit in hits:
        hit.tier = test_rank.tier(hit.depth, kinds.get(hit.via.dst) if hit.via else None)
        if hit.tier == test_rank.OPINFO:
            holds = filters.holds(
                lists.get(hit.id), hit.path, entries.get(hit.via.dst, {}), hit.line
            )
            if holds is False:
                dropped.append(hit)
                continue
            if holds is None:
                hit.tier = test_rank.FURTHER
        kept.append(hit)
    names = tuple({node.name.lower().lstrip("_") for node in starts if len(node.name) > 2})

    def named(hit: ReachedTest) -> int:  # test_searchsorted_* before a test that merely calls it
        test_name = hit.qualname[hit.qualname.rfind("::") + 2 :].lower()
        return 0 if any(name in test_name for name in names) else 1

    # Most direct first; a test the record saw run it (issue "Selection from recorded
    # runs") before all of these.
    for hit in kept:
        hit.ran = executed.ran(hit.kind, hit.qualname)
    kept.sort(key=lambda h: (not h.ran, h.tier, named(h), h.depth, h.path, h.line))
    return kept, dropped


def _opinfo_lists(index: Index, ids: list[int]) -> dict[int, str]:
    """test id -> its @ops list as written (the full text, not the shown abbreviation)."""
    found: dict[int, str] = {}
    for start in range(0, len(ids), _BATCH):
        batch = ids[start : start + _BATCH]
        for node_id, text in index.conn.execute(
            "SELECT id, json_extract(attrs, '$.opinfo_list') FROM nodes"
            f" WHERE id IN ({','.join('?' * len(batch))})",
            batch,
        ):
            if text:
                found[node_id] = text
    return found


# --- utilities ----------------------------------------------------------------------------


def _utilities(index: Index, query: str | None, limit: int, focus: str | None) -> Answer:
    nodes = index.nodes_of_kind("test_utility")
    if focus == "fixtures":
        nodes = [node for node in nodes if node.attrs.get("fixture")]
    if query:
        needle = query.lower()
        nodes = [node for node in nodes if needle in node.qualname.lower()]
        if not nodes:
            return Answer.not_found("tests", query, "Test utility", suggest(index, query))
    answer = Answer("tests", query or "", title=f"{len(nodes)} test utilities:")
    for node in nodes:
        detail = "fixture" if node.attrs.get("fixture") else node.attrs.get("py_kind", "")
        answer.items.append(Item(node.qualname, node.evidence, detail))
    if not nodes:
        answer.title = "No test utilities in the index (none under the harness's tests.utility_dirs, no fixtures)."
    return answer.truncate(limit)


# --- one file -----------------------------------------------------------------------------


def _test_file(index: Index, query: str) -> list[Node]:
    exact = [node for node in index.find(query, ["test_file"]) if node.qualname == query]
    if exact:
        return exact
    suffix = "/" + query.lstrip("/")
    rows = index.conn.execute(
        "SELECT id FROM nodes WHERE kind = 'test_file' AND qualname LIKE ?", (f"%{suffix}",)
    )
    return index.nodes(row[0] for row in rows)


def _file_info(index: Index, query: str, limit: int) -> Answer:
    found = _test_file(index, query)
    if not found:
        paths = [node.qualname for node in index.nodes_of_kind("test_file")]
        name = query.rsplit("/", 1)[-1]
        close = [p for p in paths if name.split(".")[0] in p][:5] or suggest(index, query)
        return Answer.not_found("tests", query, "Test file", close)
    if len(found) > 1:
        answer = Answer("tests", query, title=f"{len(found)} test files match {query!r}:")
        answer.items = [Item(node.qualname, f"{node.path}:1", "test file") for node in found]
        return answer.truncate(limit)
    test_file = found[0]
    nodes = index.nodes_in_file(test_file.path)
    classes = [n for n in nodes if n.kind == "test_class"]
    functions = [n for n in nodes if n.kind == "test_function"]
    answer = Answer(
        "tests",
        query,
        title=f"{test_file.path}: {len(classes)} test classes, {len(functions)} tests",
    )
    by_parent: dict[int | None, list[Node]] = {}
    for node in functions:
        by_parent.setdefault(node.parent_id, []).append(node)
    for cls in classes:
        detail = "test class"
        if cls.attrs.get("device_generic"):
            detail += "; device-generic: " + ", ".join(cls.attrs.get("variants", []))
        answer.items.append(Item(cls.qualname, cls.evidence, detail, data=dict(cls.attrs)))
        for node in by_parent.pop(cls.id, []):
            answer.items.append(_test_item(node, depth=1))
    for node in (n for group in by_parent.values() for n in group):
        answer.items.append(_test_item(node, depth=0))
    for node in nodes:
        if node.kind == "test_utility":
            answer.items.append(
                Item(
                    node.qualname,
                    node.evidence,
                    "fixture" if node.attrs.get("fixture") else "utility",
                )
            )
    answer.data = {"path": test_file.path, "classes": len(classes), "tests": len(functions)}
    return answer.truncate(limit)


def _test_item(node: Node, depth: int) -> Item:
    details = ["test"]
    if node.attrs.get("opinfo_list"):
        details.append(f"@ops({node.attrs['opinfo_list']})")
    if node.attrs.get("parametrized"):
        ids = node.attrs.get("param_ids")
        details.append(f"parametrized ({len(ids)} ids)" if ids else "parametrized")
    if node.attrs.get("dtypes"):
        details.append("dtypes " + ", ".join(node.attrs["dtypes"]))
    return Item(node.qualname, node.evidence, "; ".join(details), depth, data=dict(node.attrs))
