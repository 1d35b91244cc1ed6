"""The impact walk's judgments of Python source are facts written at extraction
(docs/selection.md, "Facts judged at extraction"): whether a ref's line runs what it
names, the lines of definitions nested in a function, what each module-level statement
does. Each is read here from an index of five-line sources."""

from __future__ import annotations

import json
import textwrap

import pytest

from indexer.query.index import Index
from tests.pyindex import build_fixture, node

SOURCES = {
    "minitorch/facts_calls.py": """\
        import minitorch
        TABLE = {"atan2": minitorch.atan2}
        def run(a, b):
            return minitorch.atan2(a, b)
        def keep(self):
            self.op = minitorch.linalg.norm
        """,
    "minitorch/facts_receivers.py": """\
        SEEN = set()
        def note(x):
            SEEN.add(x)
        def grow(t, x):
            return t.add(x)
        """,
    "minitorch/facts_nested.py": """\
        def make(flag):
            def inner():
                return flag
            return lambda: inner()
        def plain(x): return x
        """,
    "minitorch/facts_module.py": """\
        from minitorch.facts_calls import run
        cached = lru_cache(run)
        REGISTRY["x"] = run
        Tensor.partition = run
        direct_register_custom_op(op_name="ns::fused.out", op_func=run)
        """,
    "minitorch/facts_module_calls.py": """\
        from minitorch.facts_calls import run
        SKIP = set()
        SKIP.add(run)
        if run:
            TABLE = run(1, lambda: run(2))
        """,
}


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Index:
    extra = {path: textwrap.dedent(text) for path, text in SOURCES.items()}
    _, built = build_fixture(tmp_path_factory, "minitorch", extra)
    return built


def _refs(index: Index, path: str) -> dict[tuple[int, str], bool]:
    """(line, target) -> whether the ref is kept as naming its target without running it."""
    rows = index.conn.execute(
        "SELECT r.line, r.target, r.attrs FROM refs r JOIN files f ON f.id = r.file_id"
        " WHERE f.path = ? AND r.kind = 'references' AND r.target IS NOT NULL",
        (path,),
    )
    return {
        (line, target): bool(json.loads(attrs or "{}").get("named_only"))
        for line, target, attrs in rows
    }


def _statements(index: Index, path: str) -> dict[int, dict]:
    rows = index.conn.execute(
        "SELECT s.line, s.facts FROM py_statements s JOIN files f ON f.id = s.file_id"
        " WHERE f.path = ?",
        (path,),
    )
    return {line: json.loads(facts) for line, facts in rows}


def test_a_ref_in_a_table_names_its_op_and_a_call_or_a_kept_value_runs_it(index) -> None:
    refs = _refs(index, "minitorch/facts_calls.py")
    assert refs[(2, "minitorch.atan2")] is True  # a table's value
    assert refs[(4, "minitorch.atan2")] is False  # called
    assert refs[(6, "minitorch.linalg.norm")] is False  # kept whole, to be called later


def test_a_method_called_on_a_set_is_not_the_op(index) -> None:
    refs = _refs(index, "minitorch/facts_receivers.py")
    assert refs[(3, ".add")] is True  # SEEN = set()
    assert refs[(5, ".add")] is False  # t may be a tensor


def test_a_function_keeps_the_lines_of_what_it_only_defines(index) -> None:
    make = node(index, "minitorch.facts_nested.make")
    assert make.attrs["nested"] == [[3, 3], [4, 4]]  # inner's body, the lambda's
    assert "nested" not in node(index, "minitorch.facts_nested.plain").attrs


def test_what_module_level_statements_bind_store_install_and_register(index) -> None:
    found = _statements(index, "minitorch/facts_module.py")
    assert 1 not in found or "binds" not in found[1]
    assert found[2]["binds"] == ["cached"] and ["lru_cache", False] in found[2]["calls"]
    assert found[3]["mutates"] is True
    assert found[4]["install"] == ["Tensor.partition", "run"]
    assert found[5]["calls"] == [["direct_register_custom_op", False, ["run"], "fused"]]


def test_module_level_calls_leave_out_lambdas_and_know_a_set(index) -> None:
    found = _statements(index, "minitorch/facts_module_calls.py")
    assert found[3]["calls"] == [["add", True]]  # SKIP = set()
    assert 4 not in found  # the if line itself is no statement; its body's are
    assert found[5]["calls"] == [["run", False]]  # run(2) runs when the lambda is called
    assert found[5]["reads"] == ["run"] and found[5]["binds"] == ["TABLE"]


def test_a_statement_whose_facts_cannot_be_read_is_left_out_not_raised(index, tmp_path) -> None:
    """A damaged or crafted row: its lines are then in no kept statement, which the walk
    reads as run at import (docs/selection.md), instead of an error in every selection."""
    import shutil
    import sqlite3

    from indexer.query.python_facts import module_statements

    copy = tmp_path / "index.sqlite"
    shutil.copyfile(index.db_path, copy)
    conn = sqlite3.connect(copy)
    (file_id,) = conn.execute(
        "SELECT id FROM files WHERE path = 'minitorch/facts_module.py'"
    ).fetchone()
    kept = module_statements(conn, file_id)
    first = kept[0][0]
    conn.execute(
        "UPDATE py_statements SET facts = ? WHERE file_id = ? AND line = ?",
        ("[" * 100_000, file_id, first),
    )
    assert module_statements(conn, file_id) == kept[1:]
