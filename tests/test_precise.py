"""Precise C++ mode: libclang over a compile database the test writes, merged over the fast
graph (tests/fixtures/preciseext, a few .cpp files and headers)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from indexer.precise.toolchain import find_resource_dir
from tests.helpers import build_private_index, line_of, make_fixture_repo

pytest.importorskip("clang.cindex", reason="libclang is not installed")
if find_resource_dir().path is None:
    pytest.skip("no compiler headers for libclang (no clang or gcc)", allow_module_level=True)

pytestmark = pytest.mark.xdist_group("precise")

TUS = ("ops", "use", "other")
CALLS = (
    "SELECT s.qualname, d.qualname, d.line, e.line, COALESCE(e.attrs, '{{}}')"
    " FROM {table} e JOIN nodes s ON s.id = e.src_id JOIN nodes d ON d.id = e.dst_id"
    " WHERE e.kind = 'calls'"
)


def write_compile_commands(repo: Path, tus=TUS) -> None:
    entries = [
        {
            "directory": str(repo),
            "file": f"csrc/{name}.cpp",
            "arguments": [
                "c++",
                "-std=c++17",
                "-Icsrc",
                "-c",
                f"csrc/{name}.cpp",
                "-o",
                f"{name}.o",
            ],
        }
        for name in tus
    ]
    (repo / "compile_commands.json").write_text(json.dumps(entries, indent=1))


def calls(db: Path, table: str = "edges") -> set[tuple[str, str, int, int, str]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(CALLS.format(table=table)).fetchall()
    finally:
        conn.close()
    return {(src, dst, dst_line, line, _via(attrs)) for src, dst, dst_line, line, attrs in rows}


def _via(attrs: str) -> str:
    values = json.loads(attrs)
    if values.get("extractor") != "precise":
        return "fast"
    return values.get("via", "precise")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("precise")
    repo = make_fixture_repo("preciseext", base / "preciseext")
    write_compile_commands(repo)
    index = build_private_index(repo, base)
    yield repo, index
    index.close()


def at(repo: Path, path: str, text: str) -> int:
    return line_of(repo / path, text)


def test_overload_is_the_one_the_argument_type_chooses(built) -> None:
    repo, index = built
    edges = calls(index.db_path)
    double = at(repo, "csrc/ops.cpp", "double scale(double x)")
    single = at(repo, "csrc/ops.cpp", "int scale(int x)")
    line = at(repo, "csrc/use.cpp", "scale(d)")
    assert ("pext::use_all", "pext::scale", double, line, "precise") in edges
    assert not any(e[:4] == ("pext::use_all", "pext::scale", single, line) for e in edges)
    # The fast graph had both, ambiguous; they are kept aside, not in the graph.
    replaced = calls(index.db_path, "superseded_edges")
    assert ("pext::use_all", "pext::scale", single, line, "fast") in replaced
    assert index.meta_json("precise")["merge"]["ambiguities_resolved"] >= 1


def test_template_static_call_goes_to_the_instantiated_member(built) -> None:
    repo, index = built
    edges = calls(index.db_path)
    primary = at(repo, "csrc/ops.h", "static T twice(T x)")
    special = at(repo, "csrc/ops.h", "static int twice(int x)")
    float_call = at(repo, "csrc/use.cpp", "Helper<float>::twice")
    alias_call = at(repo, "csrc/use.cpp", "IntHelper::twice")
    assert ("pext::use_all", "pext::Helper::twice", primary, float_call, "precise") in edges
    # Through an alias, only the compiler knows it is the Helper<int> specialization.
    assert ("pext::use_all", "pext::Helper::twice", special, alias_call, "precise") in edges
    assert not any(e[2:4] == (primary, alias_call) for e in edges)


def test_virtual_call_reaches_the_overriders(built) -> None:
    repo, index = built
    edges = calls(index.db_path)
    line = at(repo, "csrc/use.cpp", "base.run(total)")
    base_run = at(repo, "csrc/ops.cpp", "int Base::run")
    fast_run = at(repo, "csrc/ops.cpp", "int Fast::run")
    assert ("pext::use_all", "pext::Base::run", base_run, line, "precise") in edges
    assert ("pext::use_all", "pext::Fast::run", fast_run, line, "virtual") in edges
    qualified = at(repo, "csrc/use.cpp", "base.Base::run")
    assert ("pext::use_all", "pext::Base::run", base_run, qualified, "precise") in edges
    assert not any(e[1] == "pext::Fast::run" and e[3] == qualified for e in edges)


def test_call_inside_a_macro_is_credited_to_the_enclosing_function(built) -> None:
    repo, index = built
    line = at(repo, "csrc/use.cpp", "PEXT_DISPATCH(mul, total)")
    mul = at(repo, "csrc/ops.cpp", "int mul_impl")
    assert ("pext::use_all", "pext::mul_impl", mul, line, "precise") in calls(index.db_path)
    # Pasted from the macro's argument: the fast graph never saw it.
    assert not any(e[1] == "pext::mul_impl" for e in calls(index.db_path, "superseded_edges"))


def test_autograd_apply_runs_forward_and_backward(built) -> None:
    repo, index = built
    edges = calls(index.db_path)
    line = at(repo, "csrc/use.cpp", "Square::apply(total)")
    forward = at(repo, "csrc/use.cpp", "static int forward")
    backward = at(repo, "csrc/use.cpp", "static int backward")
    assert ("pext::use_all", "pext::Square::forward", forward, line, "autograd_apply") in edges
    assert ("pext::use_all", "pext::Square::backward", backward, line, "autograd_apply") in edges


def test_a_call_the_compiler_cannot_resolve_keeps_the_fast_edges(built) -> None:
    repo, index = built
    line = at(repo, "csrc/ops.h", "return scale(x);")
    kept = {e for e in calls(index.db_path) if e[0] == "pext::scale_any" and e[3] == line}
    assert {(e[1], e[4]) for e in kept} == {("pext::scale", "fast")}
    assert len(kept) == 2  # both overloads: which one depends on T


def test_calls_the_preprocessor_skipped_keep_the_fast_edges(built) -> None:
    repo, index = built
    line = at(repo, "csrc/use.cpp", "other_entry(total)")
    assert ("pext::use_all", "pext::other_entry", 5, line, "fast") in calls(index.db_path)
    assert index.meta_json("precise")["merge"]["kept_skipped"] == 1


def test_status_and_graph_name_the_database_and_the_extractor(built) -> None:
    from indexer.query.graph import graph

    repo, index = built
    precise = index.meta_json("precise")
    assert precise["mode"] == "on"
    assert precise["database"] == str(repo / "compile_commands.json")
    assert (precise["tus"], precise["failed"], precise["parsed"]) == (3, 0, 3)
    assert precise["merge"]["added"] > 0 and precise["merge"]["confirmed"] > 0
    answer = graph(index, "pext::use_all", mode="calls", depth=1)
    text = answer.to_text()
    assert "pext::Square::forward" in text and "(precise)" in text


def test_update_after_a_header_change_parses_its_includers_only(tmp_path: Path) -> None:
    from indexer.query.index import Index
    from indexer.update import update_index
    from indexer.workspace import Workspace

    repo = make_fixture_repo("preciseext", tmp_path / "preciseext")
    write_compile_commands(repo)
    build_private_index(repo, tmp_path).close()
    header = repo / "csrc" / "ops.h"
    text = header.read_text().replace("int add_impl(int x);", "int add_impl(int x);\nint sub(int);")
    header.write_text(text)
    (repo / "csrc" / "lonely.h").write_text("int lonely();\n")  # included by no TU
    os.environ["TORCHTALK_CACHE_DIR"] = str(tmp_path / "cache")  # the index's (isolated_dirs)
    result = update_index(Workspace.resolve(repo), show_progress=False)
    assert result.precise is not None
    assert result.precise["reparsed_sample"] == ["csrc/ops.cpp", "csrc/use.cpp"]
    assert (result.precise["parsed"], result.precise["cached"]) == (2, 1)
    assert result.precise["headers_in_no_tu"] == ["csrc/lonely.h"]
    assert any("include closure of no TU" in warning for warning in result.warnings)
    # The merge is done again whole: what a rebuild of the changed tree makes.
    rebuilt = build_private_index(repo, tmp_path / "rebuild")
    assert calls(result.db_path) == calls(rebuilt.db_path)
    assert calls(result.db_path, "superseded_edges") == calls(rebuilt.db_path, "superseded_edges")
    updated = Index(result.db_path)
    for key in ("counts", "link_stats"):
        assert updated.meta_json(key) == rebuilt.meta_json(key), key
    updated.close()
    rebuilt.close()


def test_an_undone_change_finds_the_facts_of_before_without_parsing(tmp_path: Path) -> None:
    # An audit: mutation A, restore, mutation B, restore. Each restore is answered from
    # the cache, the second too: a hit makes the clean tree's facts the most recently used
    # of the command's two variants, so mutation B does not evict them.
    from indexer.update import update_index
    from indexer.workspace import Workspace

    repo = make_fixture_repo("preciseext", tmp_path / "preciseext")
    write_compile_commands(repo)
    build_private_index(repo, tmp_path).close()
    header = repo / "csrc" / "ops.h"
    original = header.read_text()
    os.environ["TORCHTALK_CACHE_DIR"] = str(tmp_path / "cache")  # the index's (isolated_dirs)
    counts = []
    for edit in ("int sub(int);", "int mul(int);"):
        header.write_text(original.replace("int add_impl(int x);", f"int add_impl(int x);\n{edit}"))
        mutated = update_index(Workspace.resolve(repo), show_progress=False).precise
        header.write_text(original)
        restored = update_index(Workspace.resolve(repo), show_progress=False).precise
        counts.append(
            (mutated["parsed"], mutated["cached"], restored["parsed"], restored["cached"])
        )
    assert counts == [(2, 1, 0, 3), (2, 1, 0, 3)]
    # Two edits in a row before the restore (an audit's mutations of one header, one after
    # the other): the clean tree, found before, outlives the first edit's facts.
    for edit in ("int div(int);", "int mod(int);"):
        header.write_text(original.replace("int add_impl(int x);", f"int add_impl(int x);\n{edit}"))
        assert update_index(Workspace.resolve(repo), show_progress=False).precise["parsed"] == 2
    header.write_text(original)
    assert update_index(Workspace.resolve(repo), show_progress=False).precise["parsed"] == 0


def test_a_failed_tu_is_named_and_keeps_the_fast_graph(tmp_path: Path) -> None:
    repo = make_fixture_repo("preciseext", tmp_path / "preciseext")
    (repo / "csrc" / "broken.cpp").write_text(
        '#include "missing.h"\nnamespace pext {\nint broken() { return standalone(1); }\n}\n'
    )
    write_compile_commands(repo, (*TUS, "broken"))
    entries = json.loads((repo / "compile_commands.json").read_text())
    entries.append({**entries[0], "file": "csrc/gone.cpp"})
    (repo / "compile_commands.json").write_text(json.dumps(entries))
    index = build_private_index(repo, tmp_path)
    precise = index.meta_json("precise")
    assert precise["failed"] == 1
    [failed] = precise["failed_tus"]
    assert failed["file"] == "csrc/broken.cpp" and "missing.h" in failed["reason"]
    assert precise["missing_files"] == 1 and precise["missing_sample"][0].endswith("gone.cpp")
    # Its function keeps the fast graph's edge; the other TUs are merged as ever.
    edges = calls(index.db_path)
    assert ("pext::broken", "pext::standalone", 3, 3, "fast") in edges
    assert any(e[4] == "virtual" for e in edges)
    index.close()


def test_no_compile_database_leaves_precise_mode_off(tmp_path: Path) -> None:
    repo = make_fixture_repo("preciseext", tmp_path / "preciseext")
    index = build_private_index(repo, tmp_path)
    precise = index.meta_json("precise")
    index.close()
    assert precise["mode"] == "off"
    assert precise["reason"].startswith("no compile database found")
    assert "--compile-commands" in precise["reason"]


def test_a_selection_follows_a_precise_edge_and_says_so(tmp_path: Path, monkeypatch) -> None:
    """mul_impl is called only through a token-pasting macro: the fast graph cannot reach
    it from the op's kernel; with the compiler's edge the op's test is selected."""
    from pytest_torchtalk.report import chain_text
    from tests.helpers import commit_all
    from tests.select_support import IndexedTree

    repo = make_fixture_repo("preciseext", tmp_path / "preciseext")
    write_compile_commands(repo)
    commit_all(repo, "compile database")
    build_private_index(repo, tmp_path).close()
    tree = IndexedTree(repo, tmp_path / "cache").use(monkeypatch)
    tree.replace("csrc/ops.cpp", "return x * x;", "return x * x * x;")
    selection = tree.select()
    assert set(selection.files) == {"tests/test_use.py"}
    # Without precise mode the fast graph has no caller of mul_impl, and the selection
    # falls back to "possible users of pext::mul_impl".
    assert [entity.label for entity in selection.entities] == ["pext::mul_impl"]
    [reason] = selection.files["tests/test_use.py"].reasons
    [hop] = [hop for hop in reason.chain if hop.dst == "pext::mul_impl"]
    assert (hop.src, hop.kind, hop.extractor) == ("pext::use_all", "calls", "precise")
    assert "pext::use_all calls (precise) pext::mul_impl" in chain_text(reason)


@pytest.mark.corpus
def test_pytorch_without_a_build_is_indexed_as_before(pytorch_index) -> None:
    from indexer.query.index import Index
    from tests.helpers import corpus_db

    index = Index(corpus_db(pytorch_index))
    try:
        precise = index.meta_json("precise")
        assert precise["mode"] == "off"
        assert precise["reason"].startswith("no compile database found")
        marked = index.conn.execute(
            "SELECT COUNT(*) FROM edges WHERE instr(attrs, '\"extractor\"') > 0"
        ).fetchone()[0]
        assert marked == 0
    finally:
        index.close()


def test_index_build_with_a_compile_database_it_was_not_built_with_applies_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from indexer.query.index import Index
    from indexer.workspace import Workspace
    from pytest_torchtalk.cli import main

    repo = make_fixture_repo("preciseext", tmp_path / "preciseext")
    database = tmp_path / "build"
    database.mkdir()
    write_compile_commands(repo)
    (repo / "compile_commands.json").rename(database / "compile_commands.json")

    def precise() -> dict:
        index = Index(Workspace.resolve(repo).db_path)
        try:
            return index.meta_json("precise")
        finally:
            index.close()

    assert main(["index", "build", "--source", str(repo), "-q"]) == 0
    assert precise()["mode"] == "off"
    capsys.readouterr()
    # The tree did not change, but the index was not built with this database.
    named = ["index", "build", "--source", str(repo), "-q", "--compile-commands", str(database)]
    assert main(named) == 0
    assert "not built with --compile-commands" in capsys.readouterr().out
    on = precise()
    assert (on["mode"], on["tus"], on["failed"]) == ("on", 3, 0)
    assert main(named) == 0
    assert "up to date" in capsys.readouterr().out
    missing = ["index", "build", "--source", str(repo), "--compile-commands", str(tmp_path / "no")]
    assert main(missing) == 2
    assert f"--compile-commands {tmp_path / 'no'}: no such file" in capsys.readouterr().err


SHAPES_H = """#pragma once
namespace pext {
inline int shape_of(int x) { return x + 1; }
inline double shape_of(double x) { return x + 2.5; }
}  // namespace pext
"""


SHAPES_AS_METHODS_H = """#pragma once
namespace pext {
struct Shapes {
  static int shape_of(int x) { return x + 1; }
  static double shape_of(double x) { return x + 2.5; }
};
using ShapeOf = Shapes;
}  // namespace pext
"""


def tree_with_an_overload_only_an_unnamed_op_reaches(
    tmp_path: Path, monkeypatch, use_line: str, header: str = SHAPES_H
):
    """preciseext plus csrc/shapes.h: scale(int) calls the int shape_of, and ``hidden``,
    the kernel of an op nothing in the tree names, the double one. ``use_line`` goes
    into use_all (reached by tests/test_use.py)."""
    from tests.helpers import commit_all
    from tests.select_support import IndexedTree

    repo = make_fixture_repo("preciseext", tmp_path / "preciseext")
    (repo / "csrc" / "shapes.h").write_text(header)
    call = "shape_of" if header == SHAPES_H else "Shapes::shape_of"
    ops = repo / "csrc" / "ops.cpp"
    text = ops.read_text().replace('#include "ops.h"', '#include "ops.h"\n#include "shapes.h"')
    text = text.replace(
        "int scale(int x) { return x * 2; }", f"int scale(int x) {{ return {call}(x) * 2; }}"
    )
    ops.write_text(
        text + f"\nnamespace pext {{\ndouble hidden(double d) {{ return {call}(d); }}\n}}\n"
    )
    use = repo / "csrc" / "use.cpp"
    text = use.read_text().replace('#include "ops.h"', '#include "ops.h"\n#include "shapes.h"')
    use.write_text(
        text.replace(
            "  return total + static_cast<int>", f"{use_line}\n  return total + static_cast<int>"
        )
    )
    bindings = repo / "csrc" / "bindings.cpp"
    bindings.write_text(
        bindings.read_text().replace(
            "TORCH_LIBRARY(pext, m) {",
            "namespace pext {\ndouble hidden(double d);\n}\n\nTORCH_LIBRARY(pext, m) {\n"
            '  m.def("secret_op(float d) -> float");\n'
            '  m.impl("secret_op", torch::kCPU, &pext::hidden);',
        )
    )
    write_compile_commands(repo)
    commit_all(repo, "shapes")
    build_private_index(repo, tmp_path).close()
    tree = IndexedTree(repo, tmp_path / "cache").use(monkeypatch)
    tree.replace("csrc/shapes.h", "return x + 2.5;", "return x + 3.5;")
    return tree


@pytest.mark.parametrize(
    "use_line",
    ["", "  total += shape_of(1) + shape_of(2);"],  # two calls of the int overload on a line
    ids=["alone", "two-calls-on-a-line"],
)
def test_a_header_function_only_an_unnamed_op_calls_selects_nothing(
    tmp_path: Path, monkeypatch, use_line: str
) -> None:
    # The fast graph credits scale(int)'s call to both overloads; the compiler to the int
    # one. With no resolved call from a test, the fallback widens to the definitions of
    # the files including shapes.h, but the compiler saw every call in them: no mention
    # of shape_of there is unexplained, and the one chain ends at an op nobody names.
    tree = tree_with_an_overload_only_an_unnamed_op_reaches(tmp_path, monkeypatch, use_line)
    selection = tree.select()
    assert selection.files == {} and selection.everything == []
    assert any("pext::secret_op" in note and "reaches no test" in note for note in selection.notes)


def test_a_header_function_whose_address_a_compiled_file_takes_selects_its_tests(
    tmp_path: Path, monkeypatch
) -> None:
    # The same, but use_all takes the double overload's address: no call the compiler
    # resolved explains that mention, so use_all is a possible user, and its test runs.
    line = "  double (*pick)(double) = &shape_of;\n  total += static_cast<int>(pick(0.5));"
    tree = tree_with_an_overload_only_an_unnamed_op_reaches(tmp_path, monkeypatch, line)
    selection = tree.select()
    assert set(selection.files) == {"tests/test_use.py"}
    [reason] = selection.files["tests/test_use.py"].reasons
    assert reason.entity.startswith("possible users of")


def test_a_method_only_an_unnamed_op_calls_is_still_widened_to_its_files(
    tmp_path: Path, monkeypatch
) -> None:
    # A method may override one that code outside the tree calls, unseen by any compiler
    # of the tree: for methods the fallback keeps every definition of the includers.
    tree = tree_with_an_overload_only_an_unnamed_op_reaches(
        tmp_path, monkeypatch, "", SHAPES_AS_METHODS_H
    )
    selection = tree.select()
    assert set(selection.files) == {"tests/test_use.py"}
    [reason] = selection.files["tests/test_use.py"].reasons
    assert reason.entity == "possible users of pext::Shapes::shape_of"
