"""The in-memory adjacency the impact walk reads edges from (indexer.query.adjacency):
kept inside the index by index maintenance, read while the graph is the same, built
again when it was derived for another graph or its rows are damaged, and a walk over it
selects what a walk over SQL does. The walk reads no source: its judgments of Python are
facts kept at extraction."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.graph.vocabulary import EdgeKind
from indexer.query import adjacency
from indexer.query.index import Index
from indexer.select import impact
from indexer.select.impact import ImpactWalker
from indexer.store import derived
from indexer.store.db import read_meta
from indexer.workspace import Workspace
from tests.helpers import build_private_index, make_fixture_repo

ALL_KINDS = [kind.value for kind in EdgeKind]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(repo, database) of an indexed minitorch."""
    base = tmp_path_factory.mktemp("speed")
    repo = make_fixture_repo("minitorch", base / "minitorch")
    index = build_private_index(repo, base)
    index.close()
    return repo, index.db_path


def _sql_rows(index: Index, column: str, node_id: int) -> list[tuple]:
    return index.conn.execute(
        "SELECT src_id, dst_id, kind, file_id, line, ref_id FROM edges"
        f" WHERE {column} = ? ORDER BY kind, id",
        (node_id,),
    ).fetchall()


def _same_as_index(graph: adjacency.Adjacency, index: Index) -> None:
    codes = graph.codes(ALL_KINDS)
    # A few kinds, as walks ask: each node's run of each kind is found by bisection.
    some = [EdgeKind.CALLS.value, EdgeKind.IMPLEMENTS.value, EdgeKind.REFERENCES.value]
    for node_id, kind, file_id in index.conn.execute("SELECT id, kind, file_id FROM nodes"):
        assert (graph.kind(node_id), graph.file(node_id)) == (kind, file_id)
        assert list(graph.into([node_id], codes)) == _sql_rows(index, "dst_id", node_id)
        assert list(graph.out_of([node_id], codes)) == _sql_rows(index, "src_id", node_id)
        for side, column in ((graph.into, "dst_id"), (graph.out_of, "src_id")):
            wanted = [row for row in _sql_rows(index, column, node_id) if row[2] in some]
            assert list(side([node_id], graph.codes(some))) == wanted


def _builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the adjacency builds from now on."""
    calls: list[int] = []
    real = adjacency.build

    def counted(conn):
        calls.append(1)
        return real(conn)

    monkeypatch.setattr(adjacency, "build", counted)
    return calls


def _copy(db_path: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / "index.sqlite"
    target.write_bytes(db_path.read_bytes())
    return target


def _writable(db_path: Path) -> sqlite3.Connection:
    """A connection writing the index in place (a test's stand-in for maintenance's
    private copy: nothing reads it meanwhile)."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    derived.ensure(conn)
    return conn


def _keep(db_path: Path) -> adjacency.Adjacency:
    """Derive and keep the adjacency in the index, as index maintenance does."""
    with closing(_writable(db_path)) as conn:
        meta = read_meta(conn)
        made = adjacency.derive(conn, meta)
        conn.execute("BEGIN")
        adjacency.store(conn, meta, made)
        conn.execute("COMMIT")
    return made.adjacency


def test_the_adjacency_is_kept_in_the_index_once_and_read(indexed, tmp_path, monkeypatch) -> None:
    db_path = _copy(indexed[1], tmp_path)
    builds = _builds(monkeypatch)
    with closing(Index(db_path)) as index:
        assert adjacency.load(index.conn, index.meta) is not None
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index.sqlite"]
    first = _keep(db_path)  # index maintenance keeps it
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index.sqlite"]  # inside
    with closing(Index(db_path)) as index:
        again = adjacency.load(index.conn, index.meta)
        assert len(builds) == 2, "the second load reads what the index keeps"
        _same_as_index(first, index)
        _same_as_index(again, index)
        assert adjacency.cached(db_path, index.conn, index.meta) is not None


def _rows(db_path: Path) -> tuple[list, list]:
    with closing(sqlite3.connect(db_path)) as conn:
        head = conn.execute("SELECT * FROM derived WHERE name = 'adjacency'").fetchall()
        arrays = conn.execute("SELECT * FROM derived_arrays WHERE name = 'adjacency'").fetchall()
    return head, arrays


def _put_rows(db_path: Path, rows: tuple[list, list]) -> None:
    with closing(_writable(db_path)) as conn:
        derived.drop(conn, ["adjacency"])
        conn.executemany("INSERT INTO derived VALUES (?, ?, ?)", rows[0])
        conn.executemany("INSERT INTO derived_arrays VALUES (?, ?, ?, ?)", rows[1])


def test_an_adjacency_kept_for_another_graph_is_built_again(indexed, tmp_path, monkeypatch) -> None:
    """What was derived for another graph (the index rebuilt from an edited tree) is
    never read as this one's."""
    repo, shared_db = indexed
    db_path = _copy(shared_db, tmp_path / "a")
    _keep(db_path)
    stale = _rows(db_path)

    path = repo / "minitorch" / "extra_speed.py"
    path.write_text("def extra():\n    return 1\n", encoding="utf-8")
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(tmp_path / "rebuilt"))
    try:
        rebuilt = build_index(Workspace.resolve(repo), show_progress=False).db_path
    finally:
        path.unlink()
    _put_rows(rebuilt, stale)
    with closing(Index(rebuilt)) as index:
        assert adjacency.cached(rebuilt, index.conn, index.meta) is None
    builds = _builds(monkeypatch)
    _keep(rebuilt)
    assert builds == [1]
    with closing(Index(rebuilt)) as index:
        _same_as_index(adjacency.load(index.conn, index.meta), index)
    assert builds == [1] and _rows(rebuilt) != stale


def _damage_array(name: str, change):
    def damage(rows: tuple[list, list]) -> tuple[list, list]:
        head, arrays = rows
        return head, [(*row[:3], change(row[3])) if row[1] == name else row for row in arrays]

    return damage


@pytest.mark.parametrize(
    "damage",
    [
        _damage_array("in_other", lambda data: data[: len(data) // 2]),  # cut short
        _damage_array("in_count", lambda data: data[:-4] + b"\xff" * 4),  # a count overwritten
        _damage_array("out_ref", lambda data: data[:-1]),  # not whole values
        lambda rows: (rows[0], [row for row in rows[1] if row[1] != "out_line"]),  # missing
        lambda rows: (rows[0], [*rows[1], ("adjacency", "bogus", 0, b"")]),  # unknown
        lambda rows: ([(name, key, "{") for name, key, _ in rows[0]], rows[1]),  # header
        lambda rows: (rows[0], []),  # no arrays
    ],
    ids=["truncated", "garbled-count", "partial-value", "missing", "unknown", "header", "empty"],
)
def test_damaged_rows_are_built_again(indexed, tmp_path, monkeypatch, damage) -> None:
    db_path = _copy(indexed[1], tmp_path)
    _keep(db_path)
    _put_rows(db_path, damage(_rows(db_path)))
    builds = _builds(monkeypatch)
    with closing(Index(db_path)) as index:
        assert adjacency.cached(db_path, index.conn, index.meta) is None
    graph = _keep(db_path)
    assert builds == [1]
    with closing(Index(db_path)) as index:
        _same_as_index(graph, index)
        assert adjacency.load(index.conn, index.meta) is not None and builds == [1]


def test_walk_over_the_adjacency_reaches_what_the_walk_over_sql_does(indexed) -> None:
    """Same nodes, reached by the same steps at the same depths, from every C++ function
    and Python definition of the fixture."""
    _, db_path = indexed
    index = Index(db_path)
    starts = [
        node_id
        for (node_id,) in index.conn.execute(
            "SELECT id FROM nodes WHERE kind IN ('cpp_function', 'cuda_kernel',"
            " 'python_function', 'python_class', 'dispatch_stub') ORDER BY id"
        )
    ]
    assert len(starts) > 20
    over_sql = ImpactWalker(index)
    over_sql._graph_looked = True  # none kept, and never built: SQL throughout
    assert over_sql.graph() is None
    in_memory = ImpactWalker(index)
    in_memory._graph = adjacency.build(index.conn)
    for node_id in starts:
        expected = over_sql.walk({node_id: 0})
        got = in_memory.walk({node_id: 0})
        assert got.steps == expected.steps, node_id
        assert got.depth == expected.depth
        assert got.kind == expected.kind and got.file_id == expected.file_id
        assert got.import_live == expected.import_live
        assert got.module_names == expected.module_names
    index.close()


def test_a_big_walk_builds_the_adjacency_and_the_next_walk_of_the_process_reads_it(
    indexed, tmp_path, monkeypatch
) -> None:
    _, shared_db = indexed
    db_path = _copy(shared_db, tmp_path)
    index = Index(db_path)
    monkeypatch.setattr(impact, "ADJACENCY_AFTER", 1)
    builds = _builds(monkeypatch)
    start = index.conn.execute("SELECT id FROM nodes WHERE kind = 'op' LIMIT 1").fetchone()[0]
    ImpactWalker(index).walk({start: 0})
    assert builds == [1]  # in memory
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index.sqlite"]
    walker = ImpactWalker(index)
    assert walker.graph() is not None and builds == [1]
    index.close()


def test_a_walk_reads_no_source(tmp_path) -> None:
    """What the walk judges of Python source (calls, module-level statements, nested
    definitions) is read from the index: with the tree's Python gone, walks from every
    op and from a class whose construction a module runs at import reach the same."""
    repo = make_fixture_repo("minitorch", tmp_path / "minitorch")
    db_path = build_private_index(repo, tmp_path).db_path

    def walks() -> list[tuple[set[int], set[int]]]:
        with closing(Index(db_path)) as index:
            starts = [
                node_id
                for (node_id,) in index.conn.execute(
                    "SELECT id FROM nodes WHERE kind = 'op'"
                    " OR qualname = 'minitorch.ops._OpNamespace.__init__' ORDER BY id"
                )
            ]
            walker = ImpactWalker(index)
            found = []
            for start in starts:
                reach = walker.walk({start: 0})
                found.append((set(reach.steps), set(reach.import_live)))
            return found

    before = walks()
    for path in repo.rglob("*.py"):
        path.unlink()
    assert walks() == before


def test_one_thread_makes_the_adjacency_and_nobody_waits_to_ask(indexed, monkeypatch) -> None:
    """A server makes the adjacency in the background: a request asking for it meanwhile
    gets None at once (and reads SQLite) rather than waiting seconds; a second maker
    waits for the first and gets the same arrays."""
    import threading

    _, db_path = indexed
    index = Index(db_path)  # keeps no adjacency: it is made
    monkeypatch.setattr(adjacency, "_loaded", {})
    started, release = threading.Event(), threading.Event()
    real = adjacency.build

    def slow(conn):
        started.set()
        release.wait(30)
        return real(conn)

    monkeypatch.setattr(adjacency, "build", slow)
    made: list[adjacency.Adjacency] = []
    makers = [
        threading.Thread(
            target=lambda: made.append(adjacency.shared(db_path, Index(db_path).conn, index.meta))
        )
        for _ in range(2)
    ]
    makers[0].start()
    assert started.wait(30)
    makers[1].start()
    assert adjacency.cached(db_path, index.conn, index.meta) is None  # answered while made
    release.set()
    for maker in makers:
        maker.join(30)
    assert len(made) == 2 and made[0] is made[1]
    assert adjacency.cached(db_path, index.conn, index.meta) is made[0]
