"""The in-memory adjacency the impact walk reads edges from (indexer.query.adjacency):
its sidecar file is written once, reused while the index is the same, rebuilt when the
index changes or the file is damaged, and a walk over it selects what a walk over SQL does.
The walk's call judgments (indexer.select.judgments) are kept by file content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.graph.vocabulary import EdgeKind
from indexer.query import adjacency
from indexer.query.index import Index
from indexer.select import edge_rows, judgments
from indexer.select.impact import ImpactWalker
from indexer.select.module_scope import ModuleStatements
from indexer.workspace import Workspace
from tests.helpers import build_private_index, line_of, make_fixture_repo

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


def test_sidecar_is_written_once_and_reused(indexed, tmp_path, monkeypatch) -> None:
    db_path = _copy(indexed[1], tmp_path)
    index = Index(db_path)
    builds = _builds(monkeypatch)
    assert adjacency.load(db_path, index.conn, index.meta) is not None
    assert not adjacency.sidecar_path(db_path).exists()  # a reader writes nothing
    first = adjacency.keep(db_path, index.conn, index.meta)  # index maintenance does
    assert adjacency.sidecar_path(db_path).is_file()
    again = adjacency.load(db_path, index.conn, index.meta)
    assert len(builds) == 2, "the second load reads the sidecar"
    _same_as_index(first, index)
    _same_as_index(again, index)
    assert adjacency.cached(db_path, index.meta) is not None
    index.close()


def test_sidecar_of_another_index_is_rebuilt(indexed, tmp_path, monkeypatch) -> None:
    """A sidecar beside a database it was not written for (the index rebuilt from an
    edited tree, or a copy) is never trusted."""
    repo, shared_db = indexed
    db_path = _copy(shared_db, tmp_path / "a")
    index = Index(db_path)
    adjacency.keep(db_path, index.conn, index.meta)
    sidecar = adjacency.sidecar_path(db_path)
    stale = sidecar.read_bytes()
    index.close()

    path = repo / "minitorch" / "extra_speed.py"
    path.write_text("def extra():\n    return 1\n", encoding="utf-8")
    monkeypatch.setenv("TORCHTALK_CACHE_DIR", str(tmp_path / "rebuilt"))
    try:
        rebuilt = build_index(Workspace.resolve(repo), show_progress=False).db_path
    finally:
        path.unlink()
    adjacency.sidecar_path(rebuilt).write_bytes(stale)
    index = Index(rebuilt)
    assert adjacency.cached(rebuilt, index.meta) is None
    builds = _builds(monkeypatch)
    graph = adjacency.keep(rebuilt, index.conn, index.meta)
    assert builds == [1]
    _same_as_index(graph, index)
    assert adjacency.sidecar_path(rebuilt).read_bytes() != stale
    index.close()


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short
        lambda data: data[:-4] + b"\xff" * 4,  # last offsets overwritten
        lambda data: b"not a sidecar\n" + data,
        lambda data: data + b"extra",
        lambda data: b"",
    ],
    ids=["truncated", "garbled-tail", "bad-magic", "trailing-bytes", "empty"],
)
def test_damaged_sidecar_is_rebuilt(indexed, tmp_path, monkeypatch, damage) -> None:
    db_path = _copy(indexed[1], tmp_path)
    index = Index(db_path)
    adjacency.keep(db_path, index.conn, index.meta)
    sidecar = adjacency.sidecar_path(db_path)
    sidecar.write_bytes(damage(sidecar.read_bytes()))
    builds = _builds(monkeypatch)
    graph = adjacency.keep(db_path, index.conn, index.meta)
    assert builds == [1]
    _same_as_index(graph, index)
    assert adjacency.load(db_path, index.conn, index.meta) is not None and builds == [1]
    index.close()


def test_walk_over_the_adjacency_reaches_what_the_walk_over_sql_does(indexed) -> None:
    """Same nodes, reached by the same steps at the same depths, from every C++ function
    and Python definition of the fixture."""
    repo, db_path = indexed
    index = Index(db_path)
    starts = [
        node_id
        for (node_id,) in index.conn.execute(
            "SELECT id FROM nodes WHERE kind IN ('cpp_function', 'cuda_kernel',"
            " 'python_function', 'python_class', 'dispatch_stub') ORDER BY id"
        )
    ]
    assert len(starts) > 20
    over_sql = ImpactWalker(index, repo)
    over_sql._graph_looked = True  # no sidecar, and never built: SQL throughout
    assert over_sql.graph() is None
    in_memory = ImpactWalker(index, repo)
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
    repo, shared_db = indexed
    db_path = _copy(shared_db, tmp_path)
    index = Index(db_path)
    monkeypatch.setattr(edge_rows, "ADJACENCY_AFTER", 1)
    builds = _builds(monkeypatch)
    start = index.conn.execute("SELECT id FROM nodes WHERE kind = 'op' LIMIT 1").fetchone()[0]
    ImpactWalker(index, repo).walk({start: 0})
    assert builds == [1] and not adjacency.sidecar_path(db_path).exists()  # in memory
    walker = ImpactWalker(index, repo)
    assert walker.graph() is not None and builds == [1]
    index.close()


def test_call_judgments_are_kept_across_walkers_and_follow_the_content(indexed) -> None:
    """A judgment is reused by the next walker from the sidecar, and a file whose
    content changed is judged again (its key is the content's hash)."""
    repo, db_path = indexed
    index = Index(db_path)
    path = "minitorch/nn/functional.py"
    file_id = index.conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()[0]
    source = repo / path
    original = source.read_text(encoding="utf-8")
    line = line_of(source, "minitorch._C._nn.linear(")
    target = "minitorch._C._nn.linear"
    sidecar = db_path.with_name(db_path.name + judgments.SUFFIX)
    sidecar.unlink(missing_ok=True)
    try:
        first = ImpactWalker(index, repo)
        assert first._calls(file_id, line, target)
        first.judgments.save()
        assert sidecar.is_file()
        again = ImpactWalker(index, repo)
        key = f"{again.statements.digest(path)}:{line}:{target}"
        assert again.judgments.get(key) is True

        lines = original.splitlines(keepends=True)
        lines[line - 1] = "    pass  # minitorch._C._nn.linear is not called here\n"
        source.write_text("".join(lines), encoding="utf-8")
        edited = ImpactWalker(index, repo)
        assert not edited._calls(file_id, line, target)

        sidecar.write_text("{not json", encoding="utf-8")
        assert ImpactWalker(index, repo).judgments.get(key) is None
    finally:
        source.write_text(original, encoding="utf-8")
        sidecar.unlink(missing_ok=True)
        index.close()


def test_module_scope_judgments_are_kept_and_a_walk_from_them_parses_nothing(
    indexed, monkeypatch
) -> None:
    """What a module's top-level statements do with a reached name is judged once: the
    next walker reads it from the sidecar and parses no statement, reaching the same."""
    repo, db_path = indexed
    index = Index(db_path)
    sidecar = db_path.with_name(db_path.name + judgments.SUFFIX)
    sidecar.unlink(missing_ok=True)
    # ops.py calls _OpNamespace at import, and the package imports ops.
    start = index.conn.execute(
        "SELECT id FROM nodes WHERE qualname = 'minitorch.ops._OpNamespace.__init__'"
    ).fetchone()[0]
    try:
        keeping = ImpactWalker(index, repo, keep=True)
        first = keeping.walk({start: 0})
        assert not sidecar.exists()  # written when asked to: index maintenance asks
        keeping.save()
        assert any(key.split(":", 1)[1].startswith("use:") for key in judgments._read(sidecar))

        def no_parsing(*args, **kwargs):
            raise AssertionError("a kept judgment was parsed again")

        monkeypatch.setattr(ModuleStatements, "_use_plan", no_parsing)
        monkeypatch.setattr(ModuleStatements, "_derive", no_parsing)
        monkeypatch.setattr(ModuleStatements, "_nested", no_parsing)
        again = ImpactWalker(index, repo).walk({start: 0})
        assert set(again.steps) == set(first.steps)
        assert again.import_live == first.import_live

        # Kept answers of the wrong shape (a damaged sidecar) are judged again.
        monkeypatch.undo()
        kept = json.loads(sidecar.read_text(encoding="utf-8"))
        kept["answers"] = {
            key: ([] if key.split(":", 1)[1].startswith(("use:", "derived:")) else "x")
            if not isinstance(value, bool) or ":nested:" in key
            else value
            for key, value in kept["answers"].items()
        }
        sidecar.write_text(json.dumps(kept), encoding="utf-8")
        damaged = ImpactWalker(index, repo).walk({start: 0})
        assert set(damaged.steps) == set(first.steps)
        assert damaged.import_live == first.import_live
    finally:
        sidecar.unlink(missing_ok=True)
        index.close()


def test_one_thread_makes_the_adjacency_and_nobody_waits_to_ask(indexed, monkeypatch) -> None:
    """A server makes the adjacency in the background: a request asking for it meanwhile
    gets None at once (and reads SQLite) rather than waiting seconds; a second maker
    waits for the first and gets the same arrays."""
    import threading

    _, db_path = indexed
    index = Index(db_path)
    adjacency.sidecar_path(db_path).unlink(missing_ok=True)
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
    assert adjacency.cached(db_path, index.meta) is None  # answered while it is being made
    release.set()
    for maker in makers:
        maker.join(30)
    assert len(made) == 2 and made[0] is made[1]
    assert adjacency.cached(db_path, index.meta) is made[0]
